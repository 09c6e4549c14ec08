/* amp/tensor.h — tensors, the counting allocator, scopes, random generators.
 *
 * Ownership, in one paragraph. Every function returning a new amp_tensor*
 * hands out one reference. Inside a scope (amp_scope_begin) that reference
 * belongs to the innermost scope and is dropped by amp_scope_end unless the
 * caller took it with amp_tensor_keep. Outside any scope the caller owns it
 * and drops it with amp_tensor_free: run ops inside a scope, or free every
 * result. amp_module_forward frees the intermediates it does not return
 * either way (the graph keeps what backward needs), so a model run outside a
 * scope leaks nothing. Views share storage; storage lives as long as any
 * tensor (or saved autograd state) uses it. A tensor is not to be used after
 * its scope ended or it was freed: with AMP_DEBUG=1 (amp_debug_enabled) such
 * a use is an error naming the call (amp/base.h). */
#ifndef AMP_TENSOR_H
#define AMP_TENSOR_H

#include "amp/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AMP_MAX_DIMS 8
/* Shape literal: amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(3, 4)) */
#define AMP_SHAPE(...) ((const int64_t[]){__VA_ARGS__})

typedef struct amp_tensor amp_tensor;

/* ---- devices -----------------------------------------------------------------
 * A tensor lives on one device: the CPU, or the CUDA GPU (one per process:
 * $AMP_CUDA_DEVICE, default 0; amp/cuda.h). The creation functions below
 * make CPU tensors (amp_tensor_empty_on and friends take a device);
 * amp_tensor_to copies a tensor to another device (differentiable: the
 * gradient comes back). An op computes on the device of its inputs and
 * refuses a mix ("amp_add: a is on cuda, b on cpu: move them to one device
 * with amp_tensor_to"), as torch does. A CUDA tensor's memory is GPU memory:
 * amp_tensor_data returns the device pointer (for the user's own kernels;
 * not readable from the host); amp_tensor_item, _get, _set, _copy_out and
 * _print copy through the host and wait for the GPU. */
typedef enum { AMP_DEVICE_CPU = 0, AMP_DEVICE_CUDA = 1, AMP_DEVICE_COUNT } amp_device;

/* "cpu", "cuda"; "invalid-device" otherwise. */
AMP_API const char *amp_device_name(amp_device d);
/* Accepts "cpu", "cuda", "cuda:0" (the process's GPU) and "gpu". */
AMP_API amp_status amp_device_parse(const char *s, amp_device *out);
/* AMP_OK when tensors can be made on d now; else an error saying why: "amp
 * was built without CUDA (no NVIDIA GPU was found when it was configured, ...)"
 * or "no CUDA device: cudaGetDeviceCount: CUDA driver version is insufficient ...". */
AMP_API amp_status amp_device_check(amp_device d);

/* ---- memory accounting --------------------------------------------------- */
typedef enum {
    AMP_MEM_PARAM = 0,  /* model parameters (and their half copies) */
    AMP_MEM_GRAD,       /* .grad of leaf tensors */
    AMP_MEM_OPTIM,      /* optimizer state, fp32 master weights */
    AMP_MEM_ACTIVATION, /* forward intermediates (kept for backward) */
    AMP_MEM_CAST_CACHE, /* autocast's casts of fp32 parameters */
    AMP_MEM_WORKSPACE,  /* kernel scratch, backward temporaries */
    AMP_MEM_DATA,       /* tensors the user created (inputs, labels, ...) */
    AMP_MEM_CATEGORY_COUNT
} amp_mem_category;

typedef struct {
    size_t live[AMP_MEM_CATEGORY_COUNT]; /* bytes in use now */
    size_t peak[AMP_MEM_CATEGORY_COUNT]; /* max of live[c] since last reset */
    size_t live_total, peak_total;       /* peak_total: max of the sum */
    uint64_t allocs, frees;
    size_t cached; /* freed blocks kept for reuse (not in live/peak) */
    /* A device's caching allocator (amp_memory_stats_device): bytes it holds
     * from the driver (live + cached + rounding), and how many times it asked
     * the driver (cudaMalloc): constant over the steady-state steps of a
     * training loop. 0 for the CPU. */
    size_t reserved;
    uint64_t device_mallocs;
} amp_mem_stats;

/* The CPU's counters (host memory). */
AMP_API amp_mem_stats amp_memory_stats(void);
/* The counters of one device's memory, in the same categories (torch's
 * torch.cuda.memory_stats). amp_memory_stats_device(AMP_DEVICE_CPU) equals
 * amp_memory_stats(); a device amp cannot use gives zeros. */
AMP_API amp_mem_stats amp_memory_stats_device(amp_device d);
/* Return the cached free blocks to the system (torch's empty_cache), on
 * every device. The CPU cache holds at most $AMP_CACHE_MB MiB (default 1024;
 * 0 disables it); a GPU's cache keeps what it was given until it is emptied
 * or an allocation would otherwise fail. */
AMP_API void amp_memory_empty_cache(void);
/* Peaks := live values, on every device. */
AMP_API void amp_memory_reset_peak(void);
AMP_API const char *amp_mem_category_name(amp_mem_category c);
/* Category for tensors created on this thread until the matching pop (nests).
 * Without one, user-created tensors count as DATA and op outputs as
 * ACTIVATION; the autograd engine uses WORKSPACE for backward temporaries. */
AMP_API void amp_mem_push_category(amp_mem_category c);
AMP_API void amp_mem_pop_category(void);
/* Move a tensor's storage to another category (e.g. a model marks params). */
AMP_API amp_status amp_tensor_set_category(amp_tensor *t, amp_mem_category c);

/* ---- creation ------------------------------------------------------------
 * A double given for an integer dtype (full, full_on, arange here; set and
 * fill_ below) must be a value it holds: NaN, an infinity or a value outside
 * its range (u8 [0, 255], i32, i64) fails with AMP_ERR_RANGE naming the value
 * and why, as torch refuses them; a fraction is truncated toward zero. */
AMP_API amp_tensor *amp_tensor_empty(amp_dtype dt, int ndim, const int64_t *shape);
AMP_API amp_tensor *amp_tensor_zeros(amp_dtype dt, int ndim, const int64_t *shape);
AMP_API amp_tensor *amp_tensor_ones(amp_dtype dt, int ndim, const int64_t *shape);
AMP_API amp_tensor *amp_tensor_full(amp_dtype dt, int ndim, const int64_t *shape, double value);
/* [start, end) with step, like torch.arange; 1-D. */
AMP_API amp_tensor *amp_tensor_arange(double start, double end, double step, amp_dtype dt);
/* Copies data (laid out contiguously, row-major, in dtype dt). */
AMP_API amp_tensor *amp_tensor_from_data(const void *data, amp_dtype dt, int ndim, const int64_t *shape);
/* Wraps user memory without copying; the caller keeps it alive and
 * unchanged-in-size for the tensor's lifetime. Not counted by the allocator. */
AMP_API amp_tensor *amp_tensor_borrow(void *data, amp_dtype dt, int ndim, const int64_t *shape);
/* On a device: uninitialised / zeros / a constant. */
AMP_API amp_tensor *amp_tensor_empty_on(amp_device d, amp_dtype dt, int ndim, const int64_t *shape);
AMP_API amp_tensor *amp_tensor_zeros_on(amp_device d, amp_dtype dt, int ndim, const int64_t *shape);
AMP_API amp_tensor *amp_tensor_full_on(amp_device d, amp_dtype dt, int ndim, const int64_t *shape, double value);

/* A copy of t on device d (a new contiguous tensor; t itself, as a new
 * reference that shares its data, when t is already there: torch's
 * Tensor.to). Differentiable: the gradient is copied back to t's device. */
AMP_API amp_tensor *amp_tensor_to(amp_tensor *t, amp_device d);
/* Moves t's data to device d in place, keeping the tensor (what
 * Module.to(device) does to parameters: optimizers and modules holding t see
 * it on d). Only for leaves (no grad_fn); a .grad is moved with it. Views of
 * the old storage keep the old data. */
AMP_API amp_status amp_tensor_move_(amp_tensor *t, amp_device d);

/* ---- random ----------------------------------------------------------------
 * Counter-based (Philox4x32-10): element i of a call uses counter offset+i, so
 * results do not depend on the number of threads. Each call advances the
 * generator's offset by the number of values drawn. */
typedef struct {
    uint64_t seed;
    uint64_t offset;
} amp_generator;

AMP_API amp_generator amp_generator_make(uint64_t seed);
/* The default generator (per process) used when a NULL generator is passed. */
AMP_API amp_generator *amp_default_generator(void);
AMP_API void amp_manual_seed(uint64_t seed);
AMP_API amp_tensor *amp_tensor_randn(amp_dtype dt, int ndim, const int64_t *shape, amp_generator *g);
AMP_API amp_tensor *amp_tensor_uniform(amp_dtype dt, int ndim, const int64_t *shape, double lo, double hi, amp_generator *g);
AMP_API amp_tensor *amp_tensor_bernoulli(amp_dtype dt, int ndim, const int64_t *shape, double p, amp_generator *g);
/* Fill an existing tensor in place (no autograd): uniform / normal. */
AMP_API amp_status amp_tensor_uniform_(amp_tensor *t, double lo, double hi, amp_generator *g);
AMP_API amp_status amp_tensor_normal_(amp_tensor *t, double mean, double std, amp_generator *g);
/* A random permutation of 0..n-1 (Fisher-Yates driven by the generator). */
AMP_API amp_status amp_randperm(int64_t n, int64_t *out, amp_generator *g);

/* ---- ownership ------------------------------------------------------------- */
AMP_API void amp_tensor_free(amp_tensor *t);            /* drop the caller's reference */
AMP_API amp_tensor *amp_tensor_keep(amp_tensor *t);     /* take it out of its scope; returns t */
AMP_API amp_tensor *amp_tensor_retain(amp_tensor *t);   /* one more reference (free it too) */

typedef struct amp_scope amp_scope;
/* Tensors created on this thread until the matching end belong to the scope. */
AMP_API amp_scope *amp_scope_begin(void);
/* Drops every reference the scope holds. Must be the innermost open scope.
 * AMP_ERR_STATE (after dropping them) when the autocast depth changed inside
 * the scope: regions left open by an amp_autocast_enter without its exit are
 * closed, so a loop that forgot the exit does not nest one more each time. */
AMP_API amp_status amp_scope_end(amp_scope *s);
/* Ends s like amp_scope_end, except that t (when s holds it) moves to the
 * enclosing scope, or to the caller when there is none: how a function that
 * opened a scope for its temporaries returns its result (a module's forward
 * frees what backward does not need, as soon as it returns). t may be NULL
 * or a tensor s does not hold (returned as is). Returns t; NULL with an
 * error when s is not the innermost scope (then nothing ends). */
AMP_API amp_tensor *amp_scope_end_keep(amp_scope *s, amp_tensor *t);

/* ---- inspection ------------------------------------------------------------ */
AMP_API amp_dtype amp_tensor_dtype(const amp_tensor *t);
AMP_API int amp_tensor_ndim(const amp_tensor *t);
AMP_API int64_t amp_tensor_dim(const amp_tensor *t, int i); /* negative i counts from the end */
AMP_API const int64_t *amp_tensor_shape(const amp_tensor *t);
AMP_API const int64_t *amp_tensor_strides(const amp_tensor *t); /* in elements */
AMP_API int64_t amp_tensor_numel(const amp_tensor *t);
AMP_API size_t amp_tensor_nbytes(const amp_tensor *t);     /* numel * element size */
AMP_API bool amp_tensor_is_contiguous(const amp_tensor *t);
AMP_API amp_device amp_tensor_device(const amp_tensor *t);
/* Pointer to element [0,...,0]. Use with amp_tensor_strides for views. */
AMP_API void *amp_tensor_data(const amp_tensor *t);
/* Value of a one-element tensor / of the element at idx, as double. */
AMP_API double amp_tensor_item(const amp_tensor *t);
AMP_API double amp_tensor_get(const amp_tensor *t, const int64_t *idx);
AMP_API amp_status amp_tensor_set(amp_tensor *t, const int64_t *idx, double v);
/* Copy all elements out, row-major, converted to dt (RNE for narrow floats). */
AMP_API amp_status amp_tensor_copy_out(const amp_tensor *t, void *dst, amp_dtype dt);
/* Shape as text, "[4,3]", into buf; returns buf. */
AMP_API char *amp_shape_str(const amp_tensor *t, char *buf, size_t n);
AMP_API void amp_tensor_print(const amp_tensor *t, const char *label);

/* ---- version counter --------------------------------------------------------
 * torch's t._version: every in-place change of a tensor's data through amp
 * (fill_, zero_, copy_, set, uniform_, normal_, an optimizer step, loading
 * weights) adds one; views and aliases share the count with their base. An op
 * that saves a tensor for backward records its version, and amp_backward
 * fails, naming the op and the tensor, when it changed since: the gradient
 * would have used the new values. Writes through amp_tensor_data are
 * invisible to amp: call amp_tensor_mark_modified(t) after them. */
AMP_API uint64_t amp_tensor_version(const amp_tensor *t);
AMP_API amp_status amp_tensor_mark_modified(amp_tensor *t);
/* Call right before a forward changes a buffer in place through
 * amp_tensor_data (BatchNorm's running statistics and batch count do): it
 * counts the change, and on a thread where a GradScaler is live it keeps
 * the old contents until amp_scaler_update, which puts them back when the
 * step is skipped, so a skipped step leaves every buffer as it was. */
AMP_API amp_status amp_tensor_will_modify(amp_tensor *t);

/* ---- in-place, not recorded by autograd (but counted: see above) ----------
 * Writing into an expanded view (a dim of size > 1 and stride 0, whose
 * elements share memory) is refused, as torch does, for fill_, zero_, copy_
 * (dst), uniform_ and normal_. */
AMP_API amp_status amp_tensor_fill_(amp_tensor *t, double v);
AMP_API amp_status amp_tensor_zero_(amp_tensor *t);
/* dst[...] = src[...] converted to dst's dtype; src broadcast to dst's shape. */
AMP_API amp_status amp_tensor_copy_(amp_tensor *dst, const amp_tensor *src);

#ifdef __cplusplus
}
#endif
#endif
