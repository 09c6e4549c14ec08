/* Internal: a caching allocator for device memory, PyTorch's
 * CUDACachingAllocator design in plain C, independent of the device: it
 * asks a backing allocator (cudaMalloc / cudaFree for the CUDA backend; a
 * host malloc in the tests) for large segments and hands out blocks carved
 * from them, so a training loop whose steps allocate the same sizes reaches
 * a steady state in which no step calls the backing allocator at all.
 *
 *  - Sizes are rounded up to 512 bytes. Requests up to 1 MiB come from the
 *    small pool (2 MiB segments); larger ones from the large pool (segments
 *    of 20 MiB for requests below 10 MiB, else the request rounded up to
 *    2 MiB).
 *  - A free block is found best-fit (smallest size >= the request, then the
 *    lowest address) in its pool; a block larger than the request by at
 *    least 512 bytes (small pool) or 1 MiB (large pool) is split and the
 *    remainder stays free (torch's default, without max_split_size).
 *  - Freeing merges a block with free neighbours of its segment.
 *  - When the backing allocator fails, segments with no block in use are
 *    returned (empty_cache) and the request is tried once more.
 *  - One stream: the device runs its work in order, so a block freed by the
 *    host can be reused at once by later work on the same stream (work
 *    queued earlier that used it runs before). A backend using several
 *    streams must record that a block was used on another stream before
 *    freeing it; amp's CUDA backend uses one.
 * Thread-safe (one mutex). */
#ifndef AMP_KERNELS_CACHE_ALLOC_H
#define AMP_KERNELS_CACHE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef struct amp_cache_alloc amp_cache_alloc;

typedef struct {
    /* the backing allocator: NULL when it cannot give `bytes` (no error set) */
    void *(*raw_alloc)(void *ctx, size_t bytes);
    void (*raw_free)(void *ctx, void *p, size_t bytes);
    void *ctx;
} amp_cache_backing;

typedef struct {
    size_t allocated;       /* bytes in blocks handed out (rounded sizes) */
    size_t reserved;        /* bytes in segments held from the backing allocator */
    size_t peak_reserved;
    uint64_t raw_allocs;    /* successful backing allocations */
    uint64_t raw_frees;
    uint64_t raw_failures;  /* backing allocations that failed (before a retry) */
    uint64_t blocks_in_use;
    uint64_t segments;
} amp_cache_stats;

amp_cache_alloc *amp_cache_alloc_new(amp_cache_backing b);
/* Returns every segment to the backing allocator (blocks still in use are
 * the caller's leak: their segments are freed too). */
void amp_cache_alloc_free(amp_cache_alloc *a);
/* NULL when the backing allocator cannot provide it even after the cache
 * was emptied. size 0 gives a distinct 512-byte block. */
void *amp_cache_malloc(amp_cache_alloc *a, size_t size);
/* p from amp_cache_malloc (NULL ignored). */
void amp_cache_release(amp_cache_alloc *a, void *p);
/* Returns the segments with no block in use; the number of bytes returned. */
size_t amp_cache_empty(amp_cache_alloc *a);
amp_cache_stats amp_cache_get_stats(amp_cache_alloc *a);
/* The rounded size a request of `size` takes (for tests and accounting). */
size_t amp_cache_round(size_t size);

#endif
