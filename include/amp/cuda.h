/* amp/cuda.h — the CUDA backend: whether it is there, the device, waiting
 * for it.
 *
 * amp uses one GPU per process (the CUDA device $AMP_CUDA_DEVICE, default
 * 0) and one stream on it: every kernel amp launches is queued in order on
 * that stream, so the host never waits for the GPU except where it reads a
 * result (amp_tensor_item, _copy_out, amp_tensor_to(..., AMP_DEVICE_CPU),
 * amp_scaler_get_scale, ...) or calls amp_cuda_synchronize. Errors the GPU
 * finds on its own (an out-of-range class target or embedding index found
 * inside a kernel) are recorded on the device and reported, naming the op
 * and the element, by the next of those calls, as torch's device-side
 * asserts are. See docs/cuda.md. */
#ifndef AMP_CUDA_H
#define AMP_CUDA_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* amp was compiled with the CUDA backend (AMP_CUDA=AUTO found nvcc and a GPU at
 * configure time, or -DAMP_CUDA=ON: docs/cuda.md). */
AMP_API bool amp_cuda_built(void);
/* Built with it, and a CUDA device can be used: amp_device_check(AMP_DEVICE_CUDA) == AMP_OK. */
AMP_API bool amp_cuda_available(void);
/* The number of CUDA devices the driver reports (0 without a driver or GPU,
 * or when amp was built without CUDA). */
AMP_API int amp_cuda_device_count(void);

typedef struct {
    char name[256];          /* "NVIDIA H100 80GB HBM3" */
    int device;              /* the CUDA device index amp uses */
    int cc_major, cc_minor;  /* compute capability (9.0 for Hopper) */
    int sm_count;
    size_t total_memory;     /* bytes */
    int runtime_version, driver_version; /* CUDA's, as 13000 for 13.0 */
    int cublaslt_version, cudnn_version; /* 0 when amp was built without cuDNN */
    int nccl_version;                    /* 0 when built without NCCL */
} amp_cuda_info;

/* The device amp uses (initialises it). */
AMP_API amp_status amp_cuda_get_info(amp_cuda_info *out);
/* Waits until the GPU has finished everything amp queued; reports an error
 * a kernel recorded meanwhile (amp_last_error names the op). */
AMP_API amp_status amp_cuda_synchronize(void);

#ifdef __cplusplus
}
#endif
#endif
