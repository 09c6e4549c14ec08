/* Internal: the CPU backend's gathering entries (backend_cpu_gather.c), for
 * its table (backend_cpu.c). Signatures of kernels/backend.h. */
#ifndef AMP_KERNELS_CPU_BACKEND_CPU_GATHER_H
#define AMP_KERNELS_CPU_BACKEND_CPU_GATHER_H

#include "kernels/backend.h"

amp_status amp__cpu_embedding(const char *fn, const amp_tensor *weight, const amp_tensor *idx, amp_tensor *out);
amp_status amp__cpu_embedding_backward(const char *fn, const amp_tensor *idx, const amp_tensor *g, int64_t V, int64_t D,
                                       amp_dtype wdtype, amp_tensor **gw);
amp_status amp__cpu_gather_flat(const char *fn, const amp_tensor *x, const amp_tensor *src, amp_tensor *out);
amp_status amp__cpu_gather_flat_backward(const char *fn, const amp_tensor *src, const amp_tensor *g, int ndim,
                                         const int64_t *xshape, amp_tensor **gx);
amp_status amp__cpu_mask_fill(const char *fn, const amp_tensor *x, int kind, int64_t diagonal, const amp_tensor *mask,
                              double value, amp_tensor *out);

#endif
