/* Reader for golden-data files written by tools/golden/golden_format.py
 * (PyTorch reference outputs). Format documented there. */
#ifndef AMP_TEST_GOLDEN_H
#define AMP_TEST_GOLDEN_H

#include "amp/amp.h"

typedef struct golden_file golden_file;

/* Loads tests/data/<name> (AMP_TEST_DATA_DIR); fails the test on error. */
golden_file *golden_open(const char *name);
void golden_close(golden_file *g);
/* A new tensor (caller frees) holding the record's values; fails the test
 * when the record is missing. */
amp_tensor *golden_tensor(golden_file *g, const char *record);
bool golden_has(golden_file *g, const char *record);
/* golden_tensor of the record named by printf(fmt, ...). */
amp_tensor *golden_tensorf(golden_file *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Number of records and the i-th record's name. */
int golden_count(golden_file *g);
/* Fails the test unless t's values match record `name` (|t-w| <= atol + rtol|w|). */
void golden_assert(golden_file *g, const char *name, const amp_tensor *t, double rtol, double atol);
/* Backward from out with the upstream gradient stored as "<case>/r", or with
 * ones (amp_backward) when the case has no such record. */
void golden_backward(golden_file *g, const char *case_name, amp_tensor *out);
const char *golden_name(golden_file *g, int i);
/* The usual case: out against "<case>/out", golden_backward(g, case, out),
 * then x's gradient against "<case>/gx"; within rtol and atol both. */
void golden_assert_out_gx(golden_file *g, const char *case_name, amp_tensor *out, const amp_tensor *x, double rtol,
                          double atol);

/* One op's case replayed against PyTorch's records, named "<case>.<suffix>":
 * inputs in0, in1, ... (nin of them; 0: as many as the file holds, at most
 * 3), each made to require grad; the output of call(case, in, &idx, ctx)
 * checked against the record `out` for dtype, shape (a [1] record stands for
 * a 0-d output) and values; where the file has an "idx" record, idx against
 * it exactly; then backward with the record `gout` as the upstream gradient
 * and each input's gradient against g0, g1, ... tol(in0 dtype, out record
 * dtype, t) sets the tolerances t = {rtol, atol} of the output and
 * {grad rtol, grad atol} of the gradients. Everything it makes is freed. */
typedef struct {
    const char *out, *gout; /* e.g. "out" and "gout", or "y" and "gy" */
    int nin;
    amp_tensor *(*call)(const char *case_name, amp_tensor **in, amp_tensor **idx, void *ctx);
    void *ctx;
    void (*tol)(amp_dtype in0, amp_dtype out, double t[4]);
} golden_op_case;
void golden_replay(golden_file *g, const char *case_name, const golden_op_case *c);
/* golden_replay of each of the n cases named, from tests/data/<file>. */
void golden_replay_all(const char *file, const char *const *names, size_t n, const golden_op_case *c);
/* Tolerances for golden_op_case.tol. bf16_ulp: f32 1e-5; a bf16 output (PyTorch's
 * kernels round the same f32 sums once, but may sum in another order) one
 * bf16 ulp, rtol 8e-3 and atol 4e-3; output and gradients alike. rounded:
 * the output within one rounding to the input's dtype (tc_rtol(dt, 1), atol
 * 1e-6); gradients 1e-5 in f32, in halves tc_rtol(dt, 4) and tc_rtol(dt, 2)
 * (torch's reference kept f32 intermediates; amp may reuse the rounded
 * output). */
void golden_tol_bf16_ulp(amp_dtype in0, amp_dtype out, double t[4]);
void golden_tol_rounded(amp_dtype in0, amp_dtype out, double t[4]);

#endif
