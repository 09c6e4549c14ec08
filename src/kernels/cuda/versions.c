/* Library versions for amp_cuda_get_info (cuDNN and NCCL are optional, and
 * loaded at run time: 0 when absent). */
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
