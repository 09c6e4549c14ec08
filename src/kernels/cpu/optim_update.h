/* Internal: the optimizer's per-tile update, one build per CPU path. The
 * loops are written so the compiler vectorises them with each file's target
 * flags; no FMA contraction happens (C11 mode: -ffp-contract=off), so every
 * path gives bit-identical results in torch's operation order. */
#ifndef AMP_KERNELS_OPTIM_UPDATE_H
#define AMP_KERNELS_OPTIM_UPDATE_H

#include <stdint.h>

#include "amp/base.h"

typedef struct {
    int kind; /* amp_optim_kind */
    float inv_scale;
    /* SGD */
    float wd, mom, one_minus_damp, neg_lr;
    int nesterov, first_mom;
    /* Adam(W) */
    float w1, b2, omb2, neg_step, bc2s, eps, decay;
} amp_optim_consts;

/* g *= inv_scale (when != 1) and, when gsave is not NULL, the unscaled
 * gradient is stored there (torch leaves unscaled values in .grad); then w
 * (and ea/eas or buf) are updated for m elements. g is scratch. Returns
 * nonzero when any value written to w, ea, eas or buf is inf or nan (the
 * caller restores the tile: a non-finite value never stays in the weights
 * or the optimizer state). */
typedef int (*amp_optim_tile_fn)(const amp_optim_consts *c, int64_t m, float *w, float *g, float *ea, float *eas,
                                 float *buf, float *gsave);
int amp_optim_tile_scalar(const amp_optim_consts *c, int64_t m, float *w, float *g, float *ea, float *eas, float *buf,
                          float *gsave);
int amp_optim_tile_avx2(const amp_optim_consts *c, int64_t m, float *w, float *g, float *ea, float *eas, float *buf,
                        float *gsave);
int amp_optim_tile_avx512(const amp_optim_consts *c, int64_t m, float *w, float *g, float *ea, float *eas, float *buf,
                          float *gsave);

/* The skip decision: nonzero when some g[k] * inv_scale -- the unscaled
 * gradient, the same f32 product the tile update computes -- is inf or
 * nan (inv_scale == 1: g itself). Read-only. */
typedef int (*amp_optim_check_fn)(float inv_scale, int64_t m, const float *g);
int amp_optim_check_scalar(float inv_scale, int64_t m, const float *g);
int amp_optim_check_avx2(float inv_scale, int64_t m, const float *g);
int amp_optim_check_avx512(float inv_scale, int64_t m, const float *g);

/* sum of (g[k] * f)^2 over m values (gradient norms): the f32 products
 * squared and summed in double over 16 fixed lanes; the same bits on every
 * path. inf/nan when a product is. */
typedef double (*amp_optim_sumsq_fn)(float f, int64_t m, const float *g);
double amp_optim_sumsq_scalar(float f, int64_t m, const float *g);
double amp_optim_sumsq_avx2(float f, int64_t m, const float *g);
double amp_optim_sumsq_avx512(float f, int64_t m, const float *g);

#endif
