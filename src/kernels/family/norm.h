/* Internal: the normalisation family: layer, batch, group and RMS norm and
 * their backwards. Contract: kernels/backend.h's. */
#ifndef AMP_KERNELS_FAMILY_NORM_H
#define AMP_KERNELS_FAMILY_NORM_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"

/* Normalisation geometry. layer_norm: x seen as [M, D] (D = the normalized
 * dims). batch_norm / group_norm: x seen as (N, C, L). */
typedef struct {
    int64_t M, D;          /* layer_norm, rms_norm */
    int k;                 /* layer_norm, rms_norm: the normalized dims (x's last k; the shape of w, b and their gradients) */
    int64_t N, C, L, G;    /* batch_norm (G unused), group_norm */
    double eps;
    bool training;         /* batch_norm */
    double momentum;       /* batch_norm running statistics */
} amp_norm_args;

#define AMP_NORM_ENTRIES(X, a) \
    X(a, layer_norm) X(a, layer_norm_backward) X(a, batch_norm) X(a, batch_norm_backward) X(a, group_norm) \
    X(a, group_norm_backward) X(a, rms_norm) X(a, rms_norm_backward)

/* mean and rstd are new f32 tensors the caller made ([M], [C] or [N*G]);
 * gin[0..2] = (x, weight, bias) gradients where need[i] */
typedef struct amp_norm_family {
    amp_status (*layer_norm)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                             const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd);
    amp_status (*layer_norm_backward)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                      const bool *need, amp_tensor **gin);
    /* training: batch statistics into mean/rstd and, with running_* given,
     * the running statistics updated in place (unless not finite; after
     * amp_tensor_will_modify); eval: the running statistics used */
    amp_status (*batch_norm)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                             const amp_tensor *b, amp_tensor *running_mean, amp_tensor *running_var, amp_tensor *y,
                             amp_tensor *mean, amp_tensor *rstd);
    amp_status (*batch_norm_backward)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                      const bool *need, amp_tensor **gin);
    amp_status (*group_norm)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                             const amp_tensor *b, amp_tensor *y, amp_tensor *mean, amp_tensor *rstd);
    amp_status (*group_norm_backward)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                      const amp_tensor *mean, const amp_tensor *rstd, const amp_tensor *g,
                                      const bool *need, amp_tensor **gin);
    /* y = x * rstd * w over x's last k dims (w may be NULL), rstd [M] =
     * 1/sqrt(mean(x^2) + eps); gin[0..1] = (x, weight) gradients where need[i] */
    amp_status (*rms_norm)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                           amp_tensor *y, amp_tensor *rstd);
    amp_status (*rms_norm_backward)(const char *fn, const amp_norm_args *a, const amp_tensor *x, const amp_tensor *w,
                                    const amp_tensor *rstd, const amp_tensor *g, const bool *need, amp_tensor **gin);
} amp_norm_family;

#endif
