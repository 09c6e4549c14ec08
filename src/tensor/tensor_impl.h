/* Internal: the tensor and storage structs and the helpers every layer above
 * uses (allocation with accounting, element access, strided iteration). */
#ifndef AMP_TENSOR_IMPL_H
#define AMP_TENSOR_IMPL_H

#include <stdatomic.h>

#include "amp/tensor.h"
#include "core/checked.h"
#include "core/error.h"

struct amp_node;
struct amp_scope;
struct amp_grad_hooks;

typedef struct amp_storage {
    void *data;
    size_t nbytes;
    atomic_int refcount;
    amp_mem_category cat;
    bool borrowed; /* user memory: not freed, not counted */
    amp_device device;
    /* torch's version counter, shared by every view and alias of the
     * storage: each in-place change adds one (amp__bump_version). Autograd
     * records it when an op saves a tensor for backward and refuses the
     * backward if it moved (autograd/node.h). */
    atomic_uint_fast64_t version;
} amp_storage;

struct amp_tensor {
    amp_dtype dtype;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t stride[AMP_MAX_DIMS]; /* elements */
    int64_t offset;               /* elements from storage->data */
    amp_storage *storage;
    atomic_int refcount;
    bool requires_grad;
    amp_tensor *grad;         /* owned, leaf tensors */
    struct amp_node *grad_fn; /* owned reference; NULL for leaves */
    int out_index;
    struct amp_scope *scope; /* scope holding the creation reference */
    int64_t scope_slot;
    uint32_t flags;
    /* debug mode (AMP_DEBUG=1): a released tensor's struct is kept a while,
     * marked dead with the call that freed it, so a later use is an error
     * naming the call instead of a read of freed memory */
    uint32_t magic;       /* AMP_T_LIVE, or AMP_T_DEAD */
    uint64_t gen;         /* handle generation: which tensor this was */
    const char *freed_by; /* the public call that released it */
    struct amp_grad_hooks *hooks; /* post-accumulate-grad hooks (leaves; autograd/engine.c) */
};

#define AMP_T_LIVE 0x4556494cu
#define AMP_T_DEAD 0x44414544u

/* ---- debug mode ---------------------------------------------------------------
 * AMP_DEBUG=1 (read before the first tensor is made): freed tensors are
 * poisoned (their data filled with 0xff bytes, NaN in every float type,
 * before it returns to the allocator; the struct kept in a quarantine of the
 * last 65536, pointing at a one-element NaN) and every public call checks its
 * tensor arguments with amp__live, so a tensor used after its scope ended,
 * or freed twice, gives "fn: tensor ... was freed (by amp_scope_end) and
 * used again". Off, the check is one load of a global. */
extern bool amp__debug;
extern _Thread_local const char *amp__freer; /* the public call releasing tensors now */
void amp__dead_error(const char *fn, const amp_tensor *t);
static inline bool amp__live(const char *fn, const amp_tensor *t) {
    if (!amp__debug || !t || t->magic == AMP_T_LIVE) return true;
    amp__dead_error(fn, t);
    return false;
}
/* AMP_OK, or AMP_ERR_ARG naming fn when t is an expanded view (a dim of size
 * > 1 with stride 0): an in-place write there is ambiguous. */
amp_status amp__check_writable(const char *fn, const amp_tensor *t);
/* amp_scope_end calls this (set by autocast) when the autocast depth grew
 * inside the scope, to close the regions left open down to `depth`. Per
 * thread, like the depth: each amp_autocast_enter sets its own thread's
 * (a process-wide pointer written by every enter was a data race between
 * threads, found by ThreadSanitizer), and only a thread that entered a
 * region can find its depth grown. */
extern _Thread_local void (*amp__autocast_unwind)(int depth);
extern _Thread_local int amp__autocast_depth; /* regions open on this thread (autocast.c keeps it) */

/* tensor flags */
#define AMP_TF_NONE 0u

/* ---- allocation (alloc.c) ---------------------------------------------- */
/* 64-byte aligned, counted under c. NULL + error on failure. */
void *amp__alloc(size_t nbytes, amp_mem_category c);
void amp__free(void *p, size_t nbytes, amp_mem_category c);
void amp__mem_move(size_t nbytes, amp_mem_category from, amp_mem_category to);
/* The same on a device (device memory from its backend, counted per device). */
void *amp__alloc_dev(amp_device d, size_t nbytes, amp_mem_category c);
void amp__free_dev(amp_device d, void *p, size_t nbytes, amp_mem_category c);
void amp__mem_move_dev(amp_device d, size_t nbytes, amp_mem_category from, amp_mem_category to);
/* Category for the next allocation: the pushed one, else fallback. */
amp_mem_category amp__mem_current(amp_mem_category fallback);
/* Scratch memory counted as WORKSPACE. */
static inline void *amp__ws_alloc(size_t nbytes) { return amp__alloc(nbytes, AMP_MEM_WORKSPACE); }
static inline void amp__ws_free(void *p, size_t nbytes) { amp__free(p, nbytes, AMP_MEM_WORKSPACE); }

/* ---- creation (tensor.c) -------------------------------------------------
 * amp__tensor_new: contiguous, uninitialised, category c; registered in the
 * current scope unless the thread is inside the autograd engine or
 * AMP_NEW_UNSCOPED is given. fn names the public caller for errors. */
#define AMP_NEW_UNSCOPED 1u
amp_tensor *amp__tensor_new(const char *fn, amp_dtype dt, int ndim, const int64_t *shape, amp_mem_category c,
                            unsigned flags);
/* The same on device d. */
amp_tensor *amp__tensor_new_on(const char *fn, amp_device d, amp_dtype dt, int ndim, const int64_t *shape,
                               amp_mem_category c, unsigned flags);
/* New op output: category = pushed category or ACTIVATION (WORKSPACE inside
 * the engine); on the CPU, or on device d. */
amp_tensor *amp__empty_out(const char *fn, amp_dtype dt, int ndim, const int64_t *shape);
amp_tensor *amp__empty_out_on(const char *fn, amp_device d, amp_dtype dt, int ndim, const int64_t *shape);
/* Same shape and device as t. */
amp_tensor *amp__empty_like(const char *fn, const amp_tensor *t, amp_dtype dt);
/* The device of a tensor. */
static inline amp_device amp__dev(const amp_tensor *t) { return t->storage->device; }
/* AMP_OK when t (may be NULL) is in host memory; else AMP_ERR_UNSUPPORTED
 * "fn: name is on cuda, and fn computes on the CPU only so far ...": the
 * guard of every entry that reads tensor data on the host before (or
 * without) an op's device dispatch (index and mask checks, optimizers). */
amp_status amp__cpu_only(const char *fn, const amp_tensor *t, const char *name);
/* AMP_OK when the n tensors (NULL entries skipped) are on one device, else
 * "fn: a is on cuda, b on cpu: ..." (names from names[], or "input k");
 * *dev (may be NULL) gets the device (the CPU when all are NULL). */
amp_status amp__same_device(const char *fn, const amp_tensor *const *t, const char *const *names, int n, amp_device *dev);
/* A view of t's storage with its own shape/strides/offset (no autograd). */
amp_tensor *amp__view(const amp_tensor *t, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset);
/* A detached alias sharing storage, unscoped (used for saved tensors). */
amp_tensor *amp__alias(const amp_tensor *t);
void amp__release(amp_tensor *t);        /* drop one reference (internal) */
/* Change a contiguous leaf's dtype in place: new storage in the same memory
 * category, values converted (RNE); drops its grad. Views of the old storage
 * keep the old data. */
amp_status amp__tensor_change_dtype(amp_tensor *t, amp_dtype dt);
void amp__scope_register(amp_tensor *t); /* give the creation ref to the scope */
void amp__scope_forget(amp_tensor *t);   /* take it back (keep / free) */
/* Thread state: >0 while the autograd engine runs (no scoping, no grad). */
extern _Thread_local int amp__engine_depth;

/* The autograd layer's release of a tensor's history (its grad_fn and
 * hooks), called when the last reference goes. The tensor layer does not
 * call autograd: autograd registers this before it first sets either field
 * (they are NULL until then), so a program that never records a graph never
 * registers it. */
typedef void (*amp_history_release_fn)(amp_tensor *t);
void amp__tensor_set_history_release(amp_history_release_fn f);

/* ---- version counter (see amp_storage.version) ---------------------------- */
static inline void amp__bump_version(const amp_tensor *t) {
    if (t && t->storage) atomic_fetch_add_explicit(&t->storage->version, 1, memory_order_relaxed);
}
static inline uint64_t amp__version(const amp_tensor *t) {
    return atomic_load_explicit(&t->storage->version, memory_order_relaxed);
}

/* ---- buffer journal (journal.c) ----------------------------------------------
 * A forward that changes a buffer in place (BatchNorm's running statistics,
 * its batch count) calls amp_tensor_will_modify(t) right before each change:
 * amp__journal_record(t) then one version bump. On a thread armed by a live GradScaler
 * the first call keeps t's old contents; amp_scaler_update commits (forgets
 * them) after a clean step and rolls back after a skipped one, so a skipped
 * step leaves every buffer as it was. A tensor changed by anything else
 * since (its version moved further) keeps that change. */
void amp__journal_record(amp_tensor *t);
void amp__journal_commit(void);
void amp__journal_rollback(void);
size_t amp__journal_size(void); /* entries recorded on this thread (0: nothing to roll back) */
void amp__journal_arm(void);    /* amp_scaler_new */
void amp__journal_disarm(void); /* amp_scaler_free; the last one commits */

/* ---- random generators ------------------------------------------------------ */
/* Reserves n consecutive Philox counters of g and returns the first; atomic,
 * so threads may draw from one generator (the default one included): each
 * call gets its own block of the stream, in whatever order the calls come. */
static inline uint64_t amp__gen_reserve(amp_generator *g, uint64_t n) {
    return __atomic_fetch_add(&g->offset, n, __ATOMIC_RELAXED);
}

/* ---- shapes ---------------------------------------------------------------- */
int64_t amp__numel(int ndim, const int64_t *shape);
void amp__contig_strides(int ndim, const int64_t *shape, int64_t *stride);
bool amp__same_shape(const amp_tensor *a, const amp_tensor *b);
/* Validate a shape for a public creation function: ndim in [0,8], sizes >= 0,
 * byte count at most AMP_MAX_BYTES (checked arithmetic, core/checked.h). */
amp_status amp__check_shape(const char *fn, int ndim, const int64_t *shape, amp_dtype dt);
/* The same byte-count bound for a view's shape (sizes >= 0 already), with
 * each size counted at least once; the message names fn and what. Every
 * tensor and view obeys it, so products of one tensor's own sizes and
 * strides never overflow. */
#define AMP_MAX_BYTES ((int64_t)1 << 62)
amp_status amp__check_extent(const char *fn, const char *what, int ndim, const int64_t *shape, amp_dtype dt);
/* Normalise a possibly negative dim for a tensor of rank ndim; error names fn. */
amp_status amp__norm_dim(const char *fn, int dim, int ndim, int *out);
/* "[4,3]" */
char *amp__shape_fmt(int ndim, const int64_t *shape, char *buf, size_t n);
#define AMP_SHAPE_BUF 160

/* ---- element access -------------------------------------------------------- */
static inline void *amp__data(const amp_tensor *t) {
    return (char *)t->storage->data + (size_t)t->offset * amp_dtype_size(t->dtype);
}
double amp__load(const void *p, amp_dtype dt);
void amp__store(void *p, amp_dtype dt, double v);
/* AMP_OK when a caller's value v can be stored in dtype dt: any value in a
 * float dtype; in an integer dtype a finite value inside its range (a fraction
 * is truncated toward zero, as torch). Otherwise AMP_ERR_RANGE naming fn, the
 * value, the dtype and why (NaN, an infinity, outside [lo, hi]), as torch's
 * checked_convert refuses them; amp__store would clamp them silently. */
amp_status amp__check_value(const char *fn, amp_dtype dt, double v);
/* Flat row-major index -> element pointer for any strides. */
void *amp__elem_ptr(const amp_tensor *t, int64_t flat);

/* Copy src into dst elementwise, converting dtype (RNE). Shapes equal. Any
 * strides on either side; any devices (through the host when they differ). */
amp_status amp__copy_convert(amp_tensor *dst, const amp_tensor *src);
/* The CPU's strided copy (both tensors in host memory): the CPU backend's copy. */
amp_status amp__cpu_copy_convert(amp_tensor *dst, const amp_tensor *src);
/* A tensor header *tmp, with t's shape and contiguous strides, over the
 * host memory `data` of dtype dt (storage *st, zeroed but for its data):
 * a plain buffer seen as a tensor, for amp__copy_convert. */
void amp__buffer_tensor(amp_tensor *tmp, amp_storage *st, amp_dtype dt, void *data, const amp_tensor *t);
/* Change a leaf's device in place (amp_tensor_move_ without the checks). */
amp_status amp__tensor_change_device(amp_tensor *t, amp_device d);
/* Contiguous f32 buffer with t's values (WORKSPACE; free with amp__ws_free
 * and nbytes numel*4). For an f32 contiguous t, still a copy. */
float *amp__to_f32(const amp_tensor *t);
/* Read-only f32 view: t's data pointer if t is contiguous f32 (*owned = false),
 * else a converted copy (*owned = true). Release with amp__f32_done. */
const float *amp__f32_view(const amp_tensor *t, bool *owned);
void amp__f32_done(const amp_tensor *t, const float *p, bool owned);
/* Write n = numel(out) f32 values into contiguous out, rounding to its dtype. */
void amp__from_f32(amp_tensor *out, const float *src);

#endif
