/* Internal: cuBLASLt, cuDNN and NCCL are loaded when the CUDA backend
 * starts (dlopen), not linked: a program using amp on the CPU does not load
 * them (they are hundreds of megabytes: a trivial program linked against
 * the three starts in ~100 ms instead of ~1 ms), and libamp runs on machines
 * that lack them. The
 * CUDA runtime itself is linked statically (libcudart_static), which loads
 * the driver only at the first CUDA call.
 *
 * Each library's functions are pointers in a struct with the functions'
 * own names and types (__typeof__ of the header's prototypes); code calls
 * them as AMP_LT(cublasLtMatmul)(...). Where to look: the directories the
 * build found them in (AMP_CUDA_LIB_DIRS, baked in), then the dynamic
 * loader's search (LD_LIBRARY_PATH, ldconfig). */
#ifndef AMP_KERNELS_CUDA_DL_H
#define AMP_KERNELS_CUDA_DL_H

#include <stdbool.h>

#include <cublasLt.h>
#ifdef AMP_HAVE_CUDNN
#include <cudnn.h>
#endif
#ifdef AMP_HAVE_NCCL
#include <nccl.h>
#endif

#define AMP_LT_FUNCS(X)                                                                                                  \
    X(cublasLtCreate)                                                                                                    \
    X(cublasLtGetVersion)                                                                                                \
    X(cublasLtGetStatusName)                                                                                             \
    X(cublasLtGetStatusString)                                                                                           \
    X(cublasLtMatmulDescCreate)                                                                                          \
    X(cublasLtMatmulDescDestroy)                                                                                         \
    X(cublasLtMatmulDescSetAttribute)                                                                                    \
    X(cublasLtMatrixLayoutCreate)                                                                                        \
    X(cublasLtMatrixLayoutDestroy)                                                                                       \
    X(cublasLtMatrixLayoutSetAttribute)                                                                                  \
    X(cublasLtMatmulPreferenceCreate)                                                                                    \
    X(cublasLtMatmulPreferenceDestroy)                                                                                   \
    X(cublasLtMatmulPreferenceSetAttribute)                                                                              \
    X(cublasLtMatmulAlgoGetHeuristic)                                                                                    \
    X(cublasLtMatmulAlgoConfigGetAttribute)                                                                              \
    X(cublasLtMatmul)

#define AMP_DL_PTR(f) __typeof__(f) *f;
typedef struct {
    AMP_LT_FUNCS(AMP_DL_PTR)
} amp_lt_api;

#ifdef AMP_HAVE_CUDNN
#define AMP_CUDNN_FUNCS(X)                                                                                               \
    X(cudnnGetVersion)                                                                                                   \
    X(cudnnGetErrorString)                                                                                               \
    X(cudnnCreate)                                                                                                       \
    X(cudnnSetStream)                                                                                                    \
    X(cudnnCreateTensorDescriptor)                                                                                       \
    X(cudnnDestroyTensorDescriptor)                                                                                      \
    X(cudnnSetTensor4dDescriptorEx)                                                                                      \
    X(cudnnCreateFilterDescriptor)                                                                                       \
    X(cudnnDestroyFilterDescriptor)                                                                                      \
    X(cudnnSetFilter4dDescriptor)                                                                                        \
    X(cudnnCreateConvolutionDescriptor)                                                                                  \
    X(cudnnDestroyConvolutionDescriptor)                                                                                 \
    X(cudnnSetConvolution2dDescriptor)                                                                                   \
    X(cudnnSetConvolutionGroupCount)                                                                                     \
    X(cudnnSetConvolutionMathType)                                                                                       \
    X(cudnnGetConvolutionForwardAlgorithm_v7)                                                                            \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                                                                       \
    X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)                                                                     \
    X(cudnnGetConvolutionForwardWorkspaceSize)                                                                           \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize)                                                                      \
    X(cudnnGetConvolutionBackwardFilterWorkspaceSize)                                                                    \
    X(cudnnConvolutionForward)                                                                                           \
    X(cudnnConvolutionBackwardData)                                                                                      \
    X(cudnnConvolutionBackwardFilter)
typedef struct {
    AMP_CUDNN_FUNCS(AMP_DL_PTR)
} amp_cudnn_api;
extern amp_cudnn_api amp__cudnn;
#define AMP_DNN(f) (amp__cudnn.f)
#endif

#ifdef AMP_HAVE_NCCL
#define AMP_NCCL_FUNCS(X)                                                                                                \
    X(ncclGetVersion)                                                                                                    \
    X(ncclGetErrorString)                                                                                                \
    X(ncclGetUniqueId)                                                                                                   \
    X(ncclCommInitRank)                                                                                                  \
    X(ncclCommDestroy)                                                                                                   \
    X(ncclCommAbort)                                                                                                     \
    X(ncclCommGetAsyncError)                                                                                             \
    X(ncclAllReduce)                                                                                                     \
    X(ncclBroadcast)                                                                                                     \
    X(ncclReduceScatter)                                                                                                 \
    X(ncclAllGather)                                                                                                     \
    X(ncclGroupStart)                                                                                                    \
    X(ncclGroupEnd)
typedef struct {
    AMP_NCCL_FUNCS(AMP_DL_PTR)
} amp_nccl_api;
extern amp_nccl_api amp__nccl;
#define AMP_NCCL(f) (amp__nccl.f)
#endif

extern amp_lt_api amp__lt;
#define AMP_LT(f) (amp__lt.f)

/* Loads cuBLASLt (required: false with a reason), then cuDNN and NCCL when
 * built with them (optional: their *_loaded flags say). */
bool amp__cu_dl_load(char *reason, size_t n);
extern bool amp__cudnn_loaded, amp__nccl_loaded;

#endif
