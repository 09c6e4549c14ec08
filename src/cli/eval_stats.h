/* The arithmetic of `amp eval` (cmd_eval.c): what a model in one load dtype
 * loses against the same model in f32, per position of a text.
 *
 *   negative log-likelihood  nll = logsumexp(z) - z[target]       (nats)
 *   perplexity               exp(mean nll)
 *   KL divergence            KL(P || Q) = sum_v p_v (log p_v - log q_v),
 *                            P = softmax of the f32 model's logits (the
 *                            reference), Q = the other dtype's: llama.cpp's
 *                            llama-perplexity --kl-divergence reports the same
 *                            direction (base model first)
 *   top-1 agreement          argmax z_f32 == argmax z_dtype (the first index
 *                            on ties, as torch.argmax)
 *   cosine                   a.b / (|a| |b|) (sentence embeddings)
 *
 * All sums in double over float logits, log-softmax as z - logsumexp(z) with
 * the max subtracted first (no overflow for any finite logits). A header so
 * that tests/test_cli_eval.c checks it against float64 references without the
 * CLI. */
#ifndef AMP_CLI_EVAL_STATS_H
#define AMP_CLI_EVAL_STATS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* logsumexp of z[0..n), n >= 1, in double */
static inline double eval_logsumexp(const float *z, int64_t n) {
    double m = z[0];
    for (int64_t i = 1; i < n; i++)
        if (z[i] > m) m = z[i];
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += exp((double)z[i] - m);
    return m + log(s);
}

/* the index of the largest z (the first of equal ones) */
static inline int64_t eval_argmax(const float *z, int64_t n) {
    int64_t a = 0;
    for (int64_t i = 1; i < n; i++)
        if (z[i] > z[a]) a = i;
    return a;
}

/* KL(softmax(p) || softmax(q)) of two logit rows, nats (>= 0 up to rounding) */
static inline double eval_kl(const float *p, const float *q, int64_t n) {
    const double lp = eval_logsumexp(p, n), lq = eval_logsumexp(q, n);
    double kl = 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = (double)p[i] - lp; /* log p_i */
        kl += exp(a) * (a - ((double)q[i] - lq));
    }
    return kl > 0 ? kl : 0; /* a sum of terms that rounds below 0 is 0 */
}

/* cosine of a and b (0 when either is all zeros) */
static inline double eval_cosine(const float *a, const float *b, int64_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

/* One load dtype's running totals over the scored positions of a text. */
typedef struct {
    double nll;     /* sum of nll */
    double kl;      /* sum of KL to the reference */
    double kl_max;  /* the largest KL of a position */
    int64_t top1;   /* positions whose argmax is the reference's */
    int64_t n;      /* positions */
} eval_acc;

/* Adds one position: z the dtype's logits, ref the f32 model's (may be z
 * itself: KL 0, agreement 1), target the next token. */
static inline void eval_acc_add(eval_acc *a, const float *z, const float *ref, int64_t n, int64_t target) {
    a->nll += eval_logsumexp(z, n) - (double)z[target];
    const double kl = ref == z ? 0.0 : eval_kl(ref, z, n);
    a->kl += kl;
    if (kl > a->kl_max) a->kl_max = kl;
    a->top1 += ref == z || eval_argmax(z, n) == eval_argmax(ref, n);
    a->n++;
}

static inline double eval_acc_ppl(const eval_acc *a) { return a->n ? exp(a->nll / (double)a->n) : NAN; }
static inline double eval_acc_kl(const eval_acc *a) { return a->n ? a->kl / (double)a->n : NAN; }
static inline double eval_acc_top1(const eval_acc *a) { return a->n ? (double)a->top1 / (double)a->n : NAN; }

#endif
