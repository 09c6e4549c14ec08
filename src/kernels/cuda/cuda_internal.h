/* Internal: the CUDA backend's host state and helpers (C, CUDA runtime API).
 *
 * amp uses one device per process ($AMP_CUDA_DEVICE, default 0) and one
 * non-blocking stream on it: every kernel, copy and library call (cuBLASLt,
 * cuDNN, NCCL) is queued on that stream, so work runs in the order it was
 * issued and device memory freed by the host can be reused at once by work
 * issued later (the caching allocator relies on it). The host waits only in
 * amp__cu_sync (amp_cuda_synchronize, reads into host memory). */
#ifndef AMP_KERNELS_CUDA_INTERNAL_H
#define AMP_KERNELS_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "amp/cuda.h"
#include "kernels/backend.h"
#include "kernels/cache_alloc.h"
#include "kernels/cuda/launch.h"
#include "tensor/tensor_impl.h"

typedef struct {
    int device;
    cudaStream_t stream;
    struct cudaDeviceProp prop;
    amp_cache_alloc *cache;
    amp_cu_err_rec *err_host; /* mapped pinned memory the kernels write */
    amp_cu_err_rec *err_dev;
} amp_cu_ctx;

/* The state, valid after amp__cuda_backend succeeded. */
extern amp_cu_ctx amp__cu;

/* AMP_OK for cudaSuccess; else an error naming fn, the call and CUDA's
 * message (out of memory: AMP_ERR_NOMEM; a fault that leaves the context
 * unusable says so). Clears CUDA's non-sticky last error. */
amp_status amp__cu_check(const char *fn, cudaError_t e, const char *what);
#define AMP_CU(fn, call) amp__cu_check((fn), (call), #call)

/* Waits for the stream, then reports an error a kernel recorded. */
amp_status amp__cu_sync(const char *fn);
/* The id kernels write into amp_cu_err_rec.code for (fn, what). */
int amp__cu_err_code(const char *fn, const char *what);

/* Device memory for a backend's own scratch (uncounted by the categories;
 * through the caching allocator). */
void *amp__cu_scratch(size_t nbytes);
void amp__cu_scratch_free(void *p);

/* A tensor as a kernel descriptor. */
amp_cu_tensor amp__cu_desc(const amp_tensor *t);
/* Merges dims that are contiguous with each other in every given
 * descriptor (all of the same shape) and drops size-1 dims: fewer index
 * divisions per element. */
void amp__cu_coalesce(amp_cu_tensor **ts, int n);

#endif
