/* Internal: the backend interface (ggml's backend tables, PyTorch's
 * dispatch keys). A backend is a device interface (kernels/device.h:
 * memory, copies, fills) plus one table of entry points per kernel family
 * (kernels/family/<family>.h: the family's argument blocks, its entries and
 * their contracts): src/kernels/cpu/ fills them for the CPU,
 * src/kernels/cuda/ for a CUDA GPU. A family a backend lacks is NULL, as is
 * an entry it lacks; AMP_KCALL refuses both by name. Everything above
 * src/kernels/ reaches tensor data only through these entries, so an op is
 * checks + autocast + one backend call per forward (and one per backward) +
 * the graph node, and a new device is a new folder here.
 *
 * Contract of every entry:
 *  - Tensors passed in are on the table's device (the caller checked:
 *    amp__same_device); data pointers inside descriptors (amp_ew_operand,
 *    amp_gemm_args) point into that device's memory.
 *  - Inputs may have any strides unless the entry says otherwise; a backend
 *    stages (copies, widens) internally as it needs. Outputs the caller
 *    passes are new contiguous tensors of the stated dtype; tensors an entry
 *    returns through amp_tensor ** are new references made with
 *    amp__tensor_new_on (unscoped, category from the context, as backward
 *    results are), and the caller owns them.
 *  - Arithmetic: products may be half, sums are f32 (global sums in double
 *    where the CPU's are); half inputs are widened exactly; each result is
 *    rounded once to its dtype. Where a backend reorders sums (a GPU's tree
 *    reductions) its results differ from the CPU's by rounding only; the
 *    CUDA tests state the bounds.
 *  - Errors: AMP_OK, or an amp_status with amp_last_error naming `fn` (the
 *    public op) and the problem. A NULL family or entry means "not on this
 *    device": AMP_KCALL (amp__backend_missing) words the error.
 *  - Asynchrony: a device backend may return before its kernels finish
 *    (queued in order on its stream); entries that hand values to the host
 *    (to_host, synchronize) wait. */
#ifndef AMP_KERNELS_BACKEND_H
#define AMP_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "amp/tensor.h"
#include "kernels/device.h"
#include "kernels/family/attention.h"
#include "kernels/family/conv.h"
#include "kernels/family/ew.h"
#include "kernels/family/gemm.h"
#include "kernels/family/gather.h"
#include "kernels/family/loss.h"
#include "kernels/family/norm.h"
#include "kernels/family/optim.h"
#include "kernels/family/pool.h"
#include "kernels/family/quant.h"
#include "kernels/family/reduce.h"
#include "kernels/family/rope.h"
#include "kernels/family/scaler.h"
#include "kernels/family/softmax.h"

/* The families, in the table's order: X(member, struct type, entry list);
 * `entry list(Y, a)` calls Y(a, entry) for each of the family's entries. */
#define AMP_BACKEND_FAMILIES(X) \
    X(ew, amp_ew_family, AMP_EW_ENTRIES) \
    X(gemm, amp_gemm_family, AMP_GEMM_ENTRIES) \
    X(reduce, amp_reduce_family, AMP_REDUCE_ENTRIES) \
    X(softmax, amp_softmax_family, AMP_SOFTMAX_ENTRIES) \
    X(norm, amp_norm_family, AMP_NORM_ENTRIES) \
    X(loss, amp_loss_family, AMP_LOSS_ENTRIES) \
    X(gather, amp_gather_family, AMP_GATHER_ENTRIES) \
    X(pool, amp_pool_family, AMP_POOL_ENTRIES) \
    X(conv, amp_conv_family, AMP_CONV_ENTRIES) \
    X(attention, amp_attention_family, AMP_ATTENTION_ENTRIES) \
    X(rope, amp_rope_family, AMP_ROPE_ENTRIES) \
    X(optim, amp_optim_family, AMP_OPTIM_ENTRIES) \
    X(scaler, amp_scaler_family, AMP_SCALER_ENTRIES) \
    X(quant, amp_quant_family, AMP_QUANT_ENTRIES)

/* ---- the table --------------------------------------------------------------- */
typedef struct amp_backend {
    const char *name;   /* "cpu", "cuda" */
    amp_device device;
    const amp_device_iface *dev;   /* never NULL */
    /* the kernel families (NULL: none on this device) */
#define AMP_BACKEND_FAMILY_MEMBER_(member, type, entries) const type *member;
    AMP_BACKEND_FAMILIES(AMP_BACKEND_FAMILY_MEMBER_)
#undef AMP_BACKEND_FAMILY_MEMBER_
} amp_backend;

/* ---- the registry (kernels/backend.c) -------------------------------------- */
/* The table of device d, initialising it on first use; NULL with an error
 * naming fn when the device cannot be used ("fn: amp was built without
 * CUDA" / "fn: no CUDA device: ..."). */
const amp_backend *amp__backend(const char *fn, amp_device d);
/* The table of d when it is already started (never starts it, no error). */
const amp_backend *amp__backend_if_started(amp_device d);
/* The table of t's device (t not NULL). */
const amp_backend *amp__backend_of(const char *fn, const amp_tensor *t);
/* "fn: <what> is not implemented on <device> yet (docs/cuda.md lists what
 * is)" (AMP_ERR_UNSUPPORTED). */
amp_status amp__backend_missing(const char *fn, const amp_backend *be, const char *what);
/* The CPU table (always there). */
extern const amp_backend amp_backend_cpu;
/* The tables compiled in, CPU first, whether or not their device can be
 * started (static data: tests/test_backend_families.c lists them without a
 * GPU); *n gets their count. */
const amp_backend *const *amp__backend_tables(int *n);
#ifdef AMP_HAVE_CUDA
/* The CUDA table after bringing up the device, or NULL with an error. */
const amp_backend *amp__cuda_backend(const char *fn);
/* Why CUDA cannot be used (or NULL when it can), without an error. */
const char *amp__cuda_unavailable_reason(void);
int amp__cuda_count(void);
#endif

/* What the CUDA backend's dynamic loading found (kernels/cuda/dl.h):
 * cuBLASLt (required), cuDNN and NCCL (when built with them), and their
 * versions. Starts the backend (the libraries load before the device is
 * looked for, so this answers on a machine without a GPU); false when
 * cuBLASLt did not load or amp was built without CUDA. */
typedef struct {
    bool lt_loaded, cudnn_built, cudnn_loaded, nccl_built, nccl_loaded;
    int lt_version, cudnn_version, nccl_version;
} amp_cuda_libs;
bool amp__cuda_libs(amp_cuda_libs *out);

/* Calls a family's entry: `AMP_KCALL(be, family, entry, fn, args...)`
 * returns the entry's status, or "fn: family.entry is not implemented on
 * <device> yet" when the backend lacks the family or the entry. */
#define AMP_KCALL(be, fam, entry, fn, ...)                                                     \
    ((be)->fam && (be)->fam->entry ? (be)->fam->entry(fn, __VA_ARGS__)                       \
                                   : amp__backend_missing(fn, (be), #fam "." #entry))

#endif
