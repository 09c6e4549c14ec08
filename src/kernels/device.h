/* Internal: the device interface (ggml's buffer interface): what the tensor
 * layer needs of a device -- raw memory, the caching allocator's
 * statistics, synchronisation, host/device copies, memset, and the three
 * data entries every tensor operation relies on (copy with conversion,
 * fill, index checks). src/tensor/ includes this header and nothing else
 * from src/kernels/; the compute entries are the kernel families
 * (kernels/family/, gathered by kernels/backend.h).
 *
 * Contract: as kernels/backend.h's (tensors on the interface's device,
 * errors name `fn`); entries that hand values to the host (to_host,
 * synchronize) wait for the device's queued work, the others may return
 * before it finishes. */
#ifndef AMP_KERNELS_DEVICE_H
#define AMP_KERNELS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "amp/tensor.h"

/* The entries' names in order, as X(a, entry) (every family header has one
 * such list, AMP_<FAMILY>_ENTRIES; tests/test_backend_families.c lists what
 * each backend fills with them). */
#define AMP_DEVICE_ENTRIES(X, a) \
    X(a, raw_alloc) X(a, raw_free) X(a, empty_cache) X(a, cache_stats) X(a, synchronize) X(a, to_host) \
    X(a, from_host) X(a, memset_bytes) X(a, copy) X(a, fill) X(a, check_index)

typedef struct amp_device_iface {
    /* memory: raw blocks (uncounted; tensor/alloc.c counts them). NULL on
     * the CPU, whose host memory tensor/alloc.c allocates and caches itself. */
    void *(*raw_alloc)(size_t nbytes);            /* NULL + error when out of memory */
    void (*raw_free)(void *p, size_t nbytes);
    void (*empty_cache)(void);
    void (*cache_stats)(size_t *cached, size_t *reserved, uint64_t *driver_allocs);
    amp_status (*synchronize)(void);
    /* bytes between the device and host memory (host pointer on the other side) */
    amp_status (*to_host)(void *host_dst, const void *dev_src, size_t n);
    amp_status (*from_host)(void *dev_dst, const void *host_src, size_t n);
    /* n bytes of device memory set to `byte` (debug mode's poison) */
    amp_status (*memset_bytes)(void *p, int byte, size_t n);

    /* tensor data */
    /* dst[i] = src[i] converted to dst's dtype (RNE); same shape; any strides
     * on either side (src may broadcast with 0 strides); dst not overlapping src */
    amp_status (*copy)(const char *fn, amp_tensor *dst, const amp_tensor *src);
    amp_status (*fill)(const char *fn, amp_tensor *t, double v);
    /* Reports (fn, element, value) of the first index in idx (i32/i64, any
     * strides) outside [0, n) that is not `ignore` (pass INT64_MIN for none).
     * The CPU checks now (NULL: the callers check on the host); a GPU records
     * it on the device and reports it at the next synchronisation. */
    amp_status (*check_index)(const char *fn, const char *what, const amp_tensor *idx, int64_t n, int64_t ignore);
} amp_device_iface;

/* The interface of device d, starting the device on first use; NULL with an
 * error naming fn when it cannot be used (kernels/backend.c). */
const amp_device_iface *amp__device_iface(const char *fn, amp_device d);
/* The interface of d when the device is already started (never starts it,
 * no error): for freeing, statistics and the cache. */
const amp_device_iface *amp__device_iface_if_started(amp_device d);

#endif
