/* Internal: the optimizer and scaler kernels (optim_ieee.cu) as the CUDA
 * backend's host code (cuda_optim.c) sees them: plain descriptors and one
 * launcher per pass; each queues its kernels on `s` and returns
 * cudaGetLastError() without waiting (see launch.h).
 *
 * Multi-tensor passes (torch's multi_tensor_apply): the host writes a table
 * of the tensors (pointers, sizes, per-tensor constants) into device memory;
 * every tensor is cut into chunks of AMP_CU_OPTIM_CHUNK elements, chunk0 is
 * the first global chunk of each entry, and the blocks walk the global
 * chunks (a binary search finds the entry), so one launch covers every
 * parameter whatever their number and sizes. */
#ifndef AMP_KERNELS_CUDA_OPTIM_LAUNCH_H
#define AMP_KERNELS_CUDA_OPTIM_LAUNCH_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/cuda/launch.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_CU_OPTIM_CHUNK 65536
#define AMP_CU_SCALER_SLOTS 64

/* The device scaler's block (device memory). first_bad: INT32_MAX = none. */
typedef struct {
    float scale;
    int hysteresis_left;
    long long growth_tracker, num_skipped, consecutive;
    float found[AMP_CU_SCALER_SLOTS];
    int first_bad[AMP_CU_SCALER_SLOTS];
} amp_cu_scaler_blk;

/* Its settings (kernel arguments). */
typedef struct {
    double growth, backoff, floor, max_scale;
    long long interval;
    int hysteresis, static_scale, consecutive_hysteresis;
} amp_cu_scaler_cfg;

/* One tensor of a check / unscale pass. */
typedef struct {
    const void *src;
    void *dst; /* unscale only */
    int sdt, ddt;
    int index; /* reported as first_bad */
    int64_t n, chunk0;
} amp_cu_grad_item;

typedef struct {
    const amp_cu_grad_item *items; /* device */
    int nitems;
    int64_t nchunks;
    float inv_scale;     /* times (float)(1.0 / (double)*scale) when scale is given */
    const float *scale;  /* device, or NULL */
    float *found;        /* device flag (f32 0/1) */
    int *first_bad;      /* device (atomicMin), or NULL */
} amp_cu_grad_args;

cudaError_t amp_cu_optim_check(cudaStream_t s, const amp_cu_grad_args *a);
cudaError_t amp_cu_optim_unscale(cudaStream_t s, const amp_cu_grad_args *a);

/* One parameter of a fused step (amp_optim_item with device pointers). */
typedef struct {
    void *param, *grad;
    int pdt, gdt;
    float *master, *ea, *eas, *mom;
    int64_t n, chunk0, step;
    uint64_t sr_counter;
    int index, write_grad, first_mom;
    float wd, decay, neg_step, bc2s;
} amp_cu_step_item;

typedef struct {
    const amp_cu_step_item *items; /* device */
    int nitems;
    int64_t nchunks;
    int kind;
    float mom, omd, neg_lr;
    int nesterov;
    float w1, b2, omb2, eps;
    int rounding;
    uint64_t seed;
    double lr, beta1, beta2;
    /* the device counters (AMP_OPTIM_CNT_*) and powers, or NULL */
    long long *counts;
    const double *pow_tab;
    int64_t pow_n;
    uint64_t sr_span;
    float inv_scale;
    const float *scale;   /* device scale to unscale by, or NULL */
    const float *found;   /* skip flag, or NULL */
    const int *first_bad; /* the skip's parameter (report_skip) */
    int report_skip;
    int skip_unscales;
    amp_cu_err_rec *err;
    int code_skip, code_guard;
} amp_cu_step_args;

/* the update, then (with counts) the bookkeeping of a skipped or applied step */
cudaError_t amp_cu_optim_step(cudaStream_t s, const amp_cu_step_args *a);

/* sum over tensors of sum((g * f)^2) in double into *out (device) */
cudaError_t amp_cu_optim_sumsq(cudaStream_t s, const amp_cu_grad_args *a, double *out, double *partials, int nparts);
/* g *= f (f from *dev_f when given) for every tensor (dst = src) */
cudaError_t amp_cu_optim_scale_grads(cudaStream_t s, const amp_cu_grad_args *a, const float *dev_f);

/* ---- the scaler ---- */
cudaError_t amp_cu_scaler_reset(cudaStream_t s, amp_cu_scaler_blk *b, int slot);
cudaError_t amp_cu_scaler_update(cudaStream_t s, amp_cu_scaler_blk *b, amp_cu_scaler_cfg cfg, float *hist, int64_t idx);
/* out (contiguous, x's dtype) = x * scale */
cudaError_t amp_cu_scaler_scale(cudaStream_t s, const amp_cu_scaler_blk *b, const amp_cu_tensor *x, void *out);
/* nbytes from src to dst when some slot's flag is set */
cudaError_t amp_cu_copy_if_found(cudaStream_t s, const amp_cu_scaler_blk *b, void *dst, const void *src, int64_t nbytes);

#ifdef __cplusplus
}
#endif
#endif
