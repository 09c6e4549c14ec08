/* Internal: the environment variables amp reads, parsed strictly once.
 *   AMP_CACHE_MB  MiB of freed blocks the allocator keeps (0 disables it)
 *   AMP_DEBUG     1: debug mode (freed tensors poisoned and checked, see
 *                 tensor/tensor_impl.h); 0 or unset: off
 *   AMP_ADAPTIVE_THREADS  0: kernels always use OpenMP's thread count; 1 or
 *                 unset: fewer while other processes keep cores busy (threads.h)
 * A malformed value is not ignored: amp_init() fails naming the variable,
 * and the default is used meanwhile. */
#ifndef AMP_CORE_ENV_H
#define AMP_CORE_ENV_H

#include <stdbool.h>

/* The cache size in MiB (default when unset or malformed). */
long amp__env_cache_mb(long dflt);
/* AMP_DEBUG as a flag. */
bool amp__env_debug(void);
/* AMP_ADAPTIVE_THREADS as a flag (true unless "0"). */
bool amp__env_adaptive_threads(void);
/* AMP_OK, or the error naming the first malformed variable (for amp_init). */
int amp__env_check(char *msg, unsigned long n);

#endif
