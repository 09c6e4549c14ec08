/* Checked size arithmetic: every product or sum of sizes, strides, offsets
 * and caller-given parameters (shapes, slice bounds, kernel, stride,
 * padding, dilation, counts) in the library goes through these, so that an
 * int64 overflow becomes an error naming the op and the argument instead of
 * a wrapped size (a tensor whose shape lies about its memory, a negative
 * size, a loop that never ends).
 *
 *   amp_ck c = AMP_CK("amp_reshape", "shape");
 *   int64_t n = amp_ck_numel(&c, ndim, shape);
 *   int64_t o = amp_ck_add(&c, amp_ck_mul(&c, 2, pad), in);
 *   if (!c.ok) return NULL;   // amp_last_error(): "amp_reshape: shape: 4611686018427387910 * 4 overflows int64"
 *
 * The first overflow records the error (AMP_ERR_ARG) and makes every later
 * call on the same amp_ck return 0; check c.ok once after the expression.
 * Sizes of an existing tensor need no check among themselves: creation
 * bounds numel * element size by 2^62 (amp__check_shape), and views are
 * bounded by their base or checked where they are made. */
#ifndef AMP_CORE_CHECKED_H
#define AMP_CORE_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    const char *fn;   /* the public op, first in the message */
    const char *what; /* the argument or quantity */
    bool ok;
} amp_ck;

#define AMP_CK(fn, what) ((amp_ck){(fn), (what), true})

/* Records "fn: what: a OP b overflows int64" (first failure only). */
void amp_ck_fail(amp_ck *c, int64_t a, char op, int64_t b);

/* The result r of a OP b, or 0 when c has failed before or a OP b
 * overflowed (then recorded in c). */
static inline int64_t amp_ck_result(amp_ck *c, bool overflowed, int64_t a, char op, int64_t b, int64_t r) {
    if (!c->ok) return 0;
    if (overflowed) {
        amp_ck_fail(c, a, op, b);
        return 0;
    }
    return r;
}

/* amp_ck_add, amp_ck_sub, amp_ck_mul: a OP b through amp_ck_result */
#define AMP_CK_OP(name, overflow, op)                             \
    static inline int64_t name(amp_ck *c, int64_t a, int64_t b) { \
        int64_t r;                                                \
        const bool over = overflow(a, b, &r);                     \
        return amp_ck_result(c, over, a, op, b, r);               \
    }
AMP_CK_OP(amp_ck_add, __builtin_add_overflow, '+')
AMP_CK_OP(amp_ck_sub, __builtin_sub_overflow, '-')
AMP_CK_OP(amp_ck_mul, __builtin_mul_overflow, '*')
#undef AMP_CK_OP

/* Product of n sizes (1 for n = 0). */
static inline int64_t amp_ck_numel(amp_ck *c, int n, const int64_t *shape) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p = amp_ck_mul(c, p, shape[i]);
    return p;
}

/* Fails unless lo <= v <= hi ("fn: what: v is outside [lo, hi]"). */
bool amp_ck_range(amp_ck *c, int64_t v, int64_t lo, int64_t hi);

#endif
