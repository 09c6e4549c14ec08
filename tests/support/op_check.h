/* Helpers for operator tests: inputs from the test's own PRNG, values as
 * double, comparison against float64 reference loops written in the test, and
 * gradient checks against central finite differences of that reference. */
#ifndef AMP_TEST_OP_CHECK_H
#define AMP_TEST_OP_CHECK_H

#include "test_support.h"

/* A tensor of normal(0, scale) values (test PRNG, exact in dt: values are
 * generated in double and rounded to dt; read them back with tc_values). */
amp_tensor *tc_randn(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, double scale);
/* Uniform in [lo, hi). */
amp_tensor *tc_uniform(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, double lo, double hi);
/* A new CPU tensor of dtype dt holding v (row-major doubles, rounded to dt once). */
amp_tensor *tc_from_values(amp_dtype dt, int ndim, const int64_t *shape, const double *v);
/* All elements, row-major, as double (malloc'd; free it). */
double *tc_values(const amp_tensor *t);
/* tc_randn / tc_uniform, then amp_tensor_set_requires_grad(t, true) when
 * rg (asserted to succeed). */
amp_tensor *tc_randn_grad(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, double scale, bool rg);
amp_tensor *tc_uniform_grad(test_rng *r, amp_dtype dt, int ndim, const int64_t *shape, double lo, double hi, bool rg);

/* Elements of a shape; v rounded to dt (as a one-element tensor of dt holds it). */
int64_t tc_numel(int ndim, const int64_t *shape);
double tc_round_to(amp_dtype dt, double v);

/* Relative tolerance for results stored in dt: f32 1e-5, f16 ~1e-3, bf16 ~8e-3
 * (one rounding of the output) times factor. */
double tc_rtol(amp_dtype dt, double factor);

/* Asserts |got[i] - want[i]| <= atol + rtol*|want[i]| for all i; the message
 * names what, the index and both values. */
void tc_assert_close_n(const double *got, const double *want, int64_t n, double rtol, double atol, const char *what);
/* Compare a tensor's values with a double array. */
void tc_assert_tensor(const amp_tensor *t, const double *want, double rtol, double atol, const char *what);
void tc_assert_shape(const amp_tensor *t, int ndim, const int64_t *shape, const char *what);

/* Reference forward: inputs[k] holds input k's values as double (row-major),
 * writes out_numel values to out. */
typedef void (*tc_ref_fn)(const double *const *inputs, double *out, void *ctx);

/* Gradient check. out was computed by amp from inputs[0..n) (those that
 * require grad are checked). A random upstream gradient R (seeded) is pushed
 * through amp_backward_ex; each checked input's .grad is compared with the
 * central difference of sum(ref(x) * R) in double (step h relative to |x|).
 * Clears the inputs' grads afterwards. */
void tc_gradcheck(amp_tensor *out, amp_tensor *const *inputs, int n, tc_ref_fn ref, void *ctx, double rtol, double atol,
                  const char *what);

/* No op leaks: runs body(r) three times, each inside its own amp_scope, and
 * fails unless the live bytes after the third equal those after the second
 * (the first is a warm-up that fills per-thread caches). */
void tc_assert_no_leaks(void (*body)(test_rng *r), test_rng *r);

/* Asserts that op returned NULL and that amp_last_error() mentions needle
 * (e.g. the op name). Clears the error. */
#define tc_assert_fails(expr, needle) tc_assert_fails_impl((expr) == NULL, needle, #expr, __FILE__, __LINE__)
void tc_assert_fails_impl(bool was_null, const char *needle, const char *expr, const char *file, int line);

#endif
