/* amp eval (issue 25): what a model in one load dtype loses against the same
 * model in f32.
 *   - the arithmetic (src/cli/eval_stats.h) against float64 references
 *     written here another way (softmax in long double, KL as
 *     sum p log(p / q)), on synthetic logits: random rows, a closed-form
 *     two-class case, logits near 3000 (a softmax without the max subtracted
 *     overflows there), uniform logits (perplexity = vocabulary size exactly),
 *     argmax ties (the first index, as torch.argmax), cosines;
 *   - the command: bad arguments are usage errors naming the argument,
 *     before anything is loaded; a missing model names scripts/deps.sh;
 *   - a small real run of each kind on the installed models (they are
 *     required: scripts/deps.sh models installs them): SmolLM2 on a text in
 *     f32 and q8_0 (f32's own row: KL exactly 0, top-1 exactly 100%; q8_0's
 *     KL small but not 0; the JSON agrees with the table), MiniLM in f32 and
 *     bf16 (f32's cosine to itself exactly 1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sys/stat.h>

#include "cli/eval_stats.h"
#include "test_support.h"

/* softmax of z in long double, the plain way (no max subtracted: callers keep z small) */
static void ref_softmax(const float *z, int64_t n, long double *p) {
    long double s = 0;
    for (int64_t i = 0; i < n; i++) s += p[i] = expl((long double)z[i]);
    for (int64_t i = 0; i < n; i++) p[i] /= s;
}

static double ref_kl(const float *a, const float *b, int64_t n) {
    long double *p = malloc(sizeof(long double) * (size_t)n), *q = malloc(sizeof(long double) * (size_t)n), kl = 0;
    ref_softmax(a, n, p);
    ref_softmax(b, n, q);
    for (int64_t i = 0; i < n; i++) kl += p[i] * logl(p[i] / q[i]);
    free(p);
    free(q);
    return (double)kl;
}

static double ref_nll(const float *z, int64_t n, int64_t t) {
    long double *p = malloc(sizeof(long double) * (size_t)n);
    ref_softmax(z, n, p);
    double r = (double)-logl(p[t]);
    free(p);
    return r;
}

static void t_kl_random(void **s) {
    (void)s;
    enum { V = 4096 };
    static float a[V], b[V];
    test_rng r = {7};
    for (int row = 0; row < 8; row++) {
        const double noise = row < 4 ? 1e-3 : 0.5; /* a bf16-like and a coarse difference */
        for (int i = 0; i < V; i++) {
            a[i] = (float)test_rng_range(&r, -8, 8);
            b[i] = a[i] + (float)(noise * test_rng_normal(&r));
        }
        const double want = ref_kl(a, b, V), got = eval_kl(a, b, V);
        assert_true(want > 0);
        assert_close(got, want, 1e-8, 1e-14, "KL(P||Q) of random logits"); /* terms cancel: ~1e-15 absolute */
        assert_close(eval_kl(b, a, V), ref_kl(b, a, V), 1e-8, 1e-14, "KL(Q||P)");
        assert_true(fabs(eval_kl(a, a, V)) < 1e-12);
        int64_t t = row * 97 % V;
        assert_close(eval_logsumexp(a, V) - a[t], ref_nll(a, V, t), 1e-12, 0, "nll");
    }
}

/* two classes: p = (1 - s(a), s(a)), s the logistic function, for logits (0, a) */
static void t_kl_two_class(void **s) {
    (void)s;
    const float a[2] = {0, 2}, b[2] = {0, -1};
    const double pa = 1 / (1 + exp(-2.0)), pb = 1 / (1 + exp(1.0));
    const double want = pa * log(pa / pb) + (1 - pa) * log((1 - pa) / (1 - pb));
    assert_close(eval_kl(a, b, 2), want, 1e-14, 0, "KL of two two-class distributions");
}

/* logits near 3000: exp overflows double without the max subtracted; the
 * values are those of the same rows shifted by an exactly representable
 * 3000 (softmax does not change) */
static void t_large_logits(void **s) {
    (void)s;
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {5, 4, 3, 2, 1}, A[5], B[5];
    for (int i = 0; i < 5; i++) A[i] = a[i] + 3000, B[i] = b[i] + 3000;
    assert_close(eval_kl(A, B, 5), ref_kl(a, b, 5), 1e-12, 0, "KL near 3000");
    assert_close(eval_logsumexp(A, 5) - A[2], ref_nll(a, 5, 2), 1e-12, 0, "nll near 3000");
    assert_true(isfinite(eval_logsumexp(A, 5)));
}

/* uniform logits: every nll is log V, the perplexity V */
static void t_uniform_perplexity(void **s) {
    (void)s;
    enum { V = 49152 };
    static float z[V];
    for (int i = 0; i < V; i++) z[i] = 0.25f;
    eval_acc acc = {0};
    for (int t = 0; t < 10; t++) eval_acc_add(&acc, z, z, V, t * 1000);
    assert_int_equal(acc.n, 10);
    assert_close(eval_acc_ppl(&acc), V, 1e-12, 0, "perplexity of uniform logits");
    assert_close(eval_acc_kl(&acc), 0, 0, 0, "KL of a row to itself");
    assert_close(eval_acc_top1(&acc), 1, 0, 0, "agreement of a row with itself");
}

/* the accumulator: mean KL, its largest, agreement and perplexity of rows
 * against a reference, each checked against the float64 references */
static void t_accumulator(void **s) {
    (void)s;
    enum { V = 64, N = 12 };
    static float ref[N][V], z[N][V];
    test_rng r = {11};
    double nll = 0, kl = 0, klmax = 0;
    int agree = 0;
    eval_acc acc = {0};
    for (int t = 0; t < N; t++) {
        for (int i = 0; i < V; i++) {
            ref[t][i] = (float)test_rng_range(&r, -4, 4);
            z[t][i] = ref[t][i] + (float)(0.3 * test_rng_normal(&r));
        }
        const int target = (int)(test_rng_u32(&r) % V);
        eval_acc_add(&acc, z[t], ref[t], V, target);
        nll += ref_nll(z[t], V, target);
        const double k = ref_kl(ref[t], z[t], V);
        kl += k;
        if (k > klmax) klmax = k;
        int am = 0, bm = 0;
        for (int i = 1; i < V; i++) {
            if (ref[t][i] > ref[t][am]) am = i;
            if (z[t][i] > z[t][bm]) bm = i;
        }
        agree += am == bm;
    }
    assert_true(agree > 0 && agree < N); /* the case tests both outcomes */
    assert_close(eval_acc_ppl(&acc), exp(nll / N), 1e-12, 0, "perplexity");
    assert_close(eval_acc_kl(&acc), kl / N, 1e-9, 0, "mean KL");
    assert_close(acc.kl_max, klmax, 1e-9, 0, "largest KL");
    assert_close(eval_acc_top1(&acc), (double)agree / N, 0, 0, "top-1 agreement");
    eval_acc none = {0};
    assert_true(isnan(eval_acc_ppl(&none)) && isnan(eval_acc_kl(&none)) && isnan(eval_acc_top1(&none)));
}

static void t_argmax_ties(void **s) {
    (void)s;
    const float z[6] = {1, 3, 2, 3, -1, 3};
    assert_int_equal(eval_argmax(z, 6), 1);
    const float one[1] = {-5};
    assert_int_equal(eval_argmax(one, 1), 0);
}

static void t_cosine(void **s) {
    (void)s;
    const float a[3] = {1, 2, 2}, b[3] = {2, 4, 4}, c[3] = {-2, 1, 0}, d[3] = {0, 3, 4}, zero[3] = {0, 0, 0};
    assert_close(eval_cosine(a, b, 3), 1, 1e-15, 0, "parallel");
    assert_close(eval_cosine(a, c, 3), 0, 0, 1e-15, "orthogonal");
    assert_close(eval_cosine(a, d, 3), 14.0 / 15.0, 1e-15, 0, "cos = a.d / (3 * 5)");
    assert_close(eval_cosine(a, zero, 3), 0, 0, 0, "a zero vector");
}

/* the installed model (scripts/deps.sh models); fails the test with how to get it when absent */
static const char *model_path(const char *name) {
    const char *p = amp_models_path(name);
    struct stat sb;
    if (!p || stat(p, &sb) != 0)
        fail_msg("%s is not installed (%s): scripts/deps.sh models installs it", name, p ? p : amp_last_error());
    return p;
}

static void t_usage_errors(void **s) {
    (void)s;
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"eval --data x.txt", "--model FILE.gguf|DIR is required"},
        {"eval --model m.gguf", "--data FILE is required"},
        {"eval --model m.gguf --data x.txt --load-dtypes f32,q9_9", "'q9_9' is not a load dtype"},
        {"eval --model m.gguf --data x.txt --load-dtypes bf16,bf16", "'bf16' is named twice"},
        {"eval --model m.gguf --data x.txt --precision fp64", "--precision 'fp64' is not fp32, fp16 or bf16"},
        {"eval --model m.gguf --data x.txt --split test", "--split 'test' is not all or val"},
        {"eval --model m.gguf --data x.txt --tokens 64 --context 128", "--context 128 is more than --tokens 64"},
        {"eval --model m.gguf --data x.txt --tokens 1", "bad option or value: --tokens 1"},
        {"eval --model m.gguf --data x.txt --frobnicate 3", "bad option or value: --frobnicate 3"},
        {"eval --model m.gguf --data", "--data needs a value"},
        {"bench infer --load-dtypes f32,int3", "'int3' is not a load dtype"},
        {"bench infer --prompt-tokens 0", "bad option or value '--prompt-tokens' 0"},
        {"bench infer --peers --llamacpp ''", "--peers needs llama.cpp"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *err = NULL, *out = test_run_cli_expect(2, &err, "%s", cases[i].args);
        if (!strstr(err, cases[i].want)) fail_msg("amp %s: stderr lacks \"%s\":\n%s", cases[i].args, cases[i].want, err);
        free(out);
        free(err);
    }
    /* a missing model or text: runtime failures naming the path */
    char *err = NULL, *out = test_run_cli_expect(1, &err, "eval --model /nonexistent/m.gguf --data /nonexistent/x.txt");
    assert_non_null(strstr(err, "eval: --model /nonexistent/m.gguf: No such file or directory"));
    free(out);
    free(err);
    out = test_run_cli_expect(1, &err, "bench infer --no-bert --model-llama /nonexistent/m.gguf");
    assert_non_null(strstr(err, "bench infer: --model-llama /nonexistent/m.gguf: No such file or directory"));
    free(out);
    free(err);
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("JSON has no number '%s'", k);
    return v->valuedouble;
}

static const char TEXT[] =
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n"
    "First Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n\nAll:\nWe know't, we know't.\n\n"
    "First Citizen:\nLet us kill him, and we'll have corn at our own price.\nIs't a verdict?\n";

/* amp eval --model model --data <TEXT in a file> extra --threads 2 --json F: stdout in *out, the JSON */
static cJSON *run_eval(const char *model, const char *extra, char **out) {
    char *dir = test_mkdtemp(), data[600], json[600];
    snprintf(data, sizeof data, "%s/text.txt", dir);
    snprintf(json, sizeof json, "%s/eval.json", dir);
    test_write_file(data, TEXT, strlen(TEXT));
    *out = test_run_cli_expect(0, NULL, "eval --model %s --data %s %s --threads 2 --json %s", model, data, extra, json);
    char *text = test_read_file(json, NULL);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    assert_non_null(root);
    free(text);
    test_rmtree(dir);
    free(dir);
    return root;
}

static void t_decoder_run(void **s) {
    (void)s;
    char *out;
    cJSON *root = run_eval(model_path("SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
                           "--load-dtypes q8_0 --tokens 64 --context 32", &out);
    assert_non_null(strstr(out, "64 tokens in 2 windows of 32 (62 positions scored)"));
    assert_non_null(strstr(out, "| load dtype | weights MiB | perplexity | ppl vs f32 | mean KL vs f32 | max KL | top-1 = f32 | tokens/s |"));
    assert_non_null(strstr(out, "| f32 (reference) |"));
    assert_non_null(strstr(out, "| +0.00% | 0.000000 | 0.0000 | 100.00% |"));
    assert_non_null(strstr(out, "| q8_0 |"));
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "results");
    assert_int_equal(cJSON_GetArraySize(res), 2);
    const cJSON *f = cJSON_GetArrayItem(res, 0), *q = cJSON_GetArrayItem(res, 1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(f, "load_dtype")->valuestring, "f32");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(q, "load_dtype")->valuestring, "q8_0");
    assert_true(jnum(f, "mean_kl") == 0 && jnum(f, "top1_agreement") == 1);
    assert_int_equal((int)jnum(f, "positions"), 62);
    /* a real model on English text: far better than uniform over 49152 tokens */
    const double ppl = jnum(f, "perplexity");
    assert_true(ppl > 1 && ppl < 1000);
    /* q8_0's weights: about a quarter of f32's (34 bytes per 32 weights) plus the f32 norms */
    assert_true(jnum(q, "weight_bytes") < 0.3 * jnum(f, "weight_bytes"));
    const double kl = jnum(q, "mean_kl");
    if (!(kl > 0 && kl < 0.05)) fail_msg("q8_0's mean KL to f32 %g is not in (0, 0.05)", kl);
    assert_true(jnum(q, "top1_agreement") >= 0.8);
    assert_true(fabs(jnum(q, "perplexity") / ppl - 1) < 0.05);
    cJSON_Delete(root);
    free(out);
}

static void t_encoder_run(void **s) {
    (void)s;
    char *out;
    cJSON *root = run_eval(model_path("all-MiniLM-L6-v2"), "--load-dtypes bf16 --lines 8", &out);
    assert_non_null(strstr(out, ": 8 lines, compute fp32"));
    assert_non_null(strstr(out, "| f32 (reference) |"));
    assert_non_null(strstr(out, "| 1.00000000 | 1.00000000 | 0.00e+00 |"));
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "results");
    assert_int_equal(cJSON_GetArraySize(res), 2);
    const cJSON *b = cJSON_GetArrayItem(res, 1);
    const double c = jnum(b, "mean_cosine");
    if (!(c > 0.99 && c < 1)) fail_msg("bf16's mean cosine to f32 %.9f is not in (0.99, 1)", c);
    assert_true(jnum(b, "min_cosine") <= c);
    /* bf16 holds every parameter in 2 bytes: half of f32's */
    assert_close(jnum(b, "weight_bytes"), 0.5 * jnum(cJSON_GetArrayItem(res, 0), "weight_bytes"), 1e-12, 0, "bf16 weight bytes");
    cJSON_Delete(root);
    free(out);
}

AMP_TEST_MAIN(t_kl_random, t_kl_two_class, t_large_logits, t_uniform_perplexity, t_accumulator, t_argmax_ties, t_cosine,
              t_usage_errors, t_decoder_run, t_encoder_run)
