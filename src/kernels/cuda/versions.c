/* Library versions for amp_cuda_get_info (cuDNN and NCCL are optional, and
 * loaded at run time: 0 when absent). */
#include <string.h>

#include "amp/cuda.h"
#include "kernels/backend.h"
#include "kernels/cuda/dl.h"

int amp__cu_cudnn_version(void);
int amp__cu_nccl_version(void);

int amp__cu_cudnn_version(void) {
#ifdef AMP_HAVE_CUDNN
    if (amp__cudnn_loaded) return (int)AMP_DNN(cudnnGetVersion)();
#endif
    return 0;
}

int amp__cu_nccl_version(void) {
#ifdef AMP_HAVE_NCCL
    int v = 0;
    if (amp__nccl_loaded && AMP_NCCL(ncclGetVersion)(&v) == ncclSuccess) return v;
#endif
    return 0;
}

/* kernels/backend.h: what the dynamic loading found (tests/test_cuda_libs.c
 * checks it on machines without a GPU too: the libraries load before the
 * device is looked for). */
int amp__cu_lt_version(void); /* gemm_cublaslt.c */
bool amp__cuda_libs(amp_cuda_libs *out) {
    memset(out, 0, sizeof *out);
    (void)amp_cuda_device_count(); /* starts the backend once: loads the libraries, then looks for a device */
    out->lt_loaded = amp__lt.cublasLtGetVersion != NULL && amp__lt.cublasLtMatmul != NULL;
    out->lt_version = out->lt_loaded ? amp__cu_lt_version() : 0;
#ifdef AMP_HAVE_CUDNN
    out->cudnn_built = true;
#endif
#ifdef AMP_HAVE_NCCL
    out->nccl_built = true;
#endif
    out->cudnn_loaded = amp__cudnn_loaded;
    out->nccl_loaded = amp__nccl_loaded;
    out->cudnn_version = amp__cu_cudnn_version();
    out->nccl_version = amp__cu_nccl_version();
    return out->lt_loaded;
}
