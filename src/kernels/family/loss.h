/* Internal: the loss family: class-index losses (cross_entropy, nll_loss)
 * and the pointwise losses. out is the reduced (0-d) or per-sample loss the
 * caller made. Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_LOSS_H
#define AMP_KERNELS_FAMILY_LOSS_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/ops.h"
#include "amp/tensor.h"

/* Class-index losses (cross_entropy, nll_loss): input seen as (N, C, L),
 * targets (i32/i64, N*L of them) already checked against [0, C) except
 * ignore_index on the host, or (device targets) by the device's check_index
 * (kernels/device.h) before the call. */
typedef struct {
    int64_t N, C, L;
    int64_t ignore_index;
    double smoothing;      /* cross_entropy only */
    amp_reduction reduction;
    bool ce;               /* logits (cross_entropy) vs log-probabilities (nll_loss) */
    bool rows;             /* the row path: [N, C] logits, no weights or smoothing, gradient in x's dtype */
} amp_cls_args;

/* Pointwise losses: the kinds of src/ops/loss.c. */
typedef enum { AMP_PW_MSE = 0, AMP_PW_L1, AMP_PW_SMOOTH_L1, AMP_PW_BCE, AMP_PW_KL } amp_pw_kind;
typedef struct {
    amp_pw_kind kind;
    amp_reduction reduction;
    double beta;      /* smooth_l1 */
    bool log_target;  /* kl_div */
    int ndim;
    int64_t shape[AMP_MAX_DIMS]; /* the broadcast shape */
} amp_pw_args;

#define AMP_LOSS_ENTRIES(X, a) \
    X(a, class_loss) X(a, class_loss_backward) X(a, pw_loss) X(a, pw_loss_backward)

typedef struct amp_loss_family {
    /* wsum: a new 0-d f64 tensor receiving the summed weight of the
     * non-ignored targets (the 'mean' divisor, read by the backward) */
    amp_status (*class_loss)(const char *fn, const amp_cls_args *a, const amp_tensor *x, const amp_tensor *target,
                             const amp_tensor *weight, amp_tensor *out, amp_tensor *wsum);
    amp_status (*class_loss_backward)(const char *fn, const amp_cls_args *a, const amp_tensor *x,
                                      const amp_tensor *target, const amp_tensor *weight, const amp_tensor *wsum,
                                      const amp_tensor *g, amp_tensor **gx);
    amp_status (*pw_loss)(const char *fn, const amp_pw_args *a, const amp_tensor *x, const amp_tensor *y,
                          const amp_tensor *pos_weight, amp_tensor *out);
    amp_status (*pw_loss_backward)(const char *fn, const amp_pw_args *a, const amp_tensor *x, const amp_tensor *y,
                                   const amp_tensor *pos_weight, const amp_tensor *g, const bool *need,
                                   amp_tensor **gin);
} amp_loss_family;

#endif
