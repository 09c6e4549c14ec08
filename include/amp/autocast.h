/* amp/autocast.h — automatic casting of op inputs, as torch.autocast.
 *
 * Inside a region, each op casts its inputs according to its category:
 *   LOWER    float inputs cast to the region's dtype (f16 or bf16):
 *            matmul, mm, bmm, addmm, baddbmm, linear, conv1d/2d, prelu
 *   FP32     half inputs cast to f32, output f32: exp, log, pow, softmax,
 *            log_softmax, layer_norm, group_norm, sum, prod, norms, losses ...
 *   PROMOTE  inputs cast to the widest float dtype among them: cat, stack,
 *            addcmul, addcdiv, dot
 *   NONE     inputs' dtype with ordinary type promotion: relu, add, ...
 * f64 and integer tensors are never cast. docs/autocast.md lists every op.
 *
 * Regions nest and are per thread. An inner region with enabled = false turns
 * casting off until it exits. Casts of f32 leaf tensors that require grad
 * (parameters) are cached for the outermost region and reused, so a weight
 * used by several ops is cast once; the cache empties when the outermost
 * region exits. Casts are differentiable: the gradient of a cast is the cast
 * back, so an f32 parameter gets an f32 .grad. */
#ifndef AMP_AUTOCAST_H
#define AMP_AUTOCAST_H

#include <stdio.h>

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    AMP_CAST_NONE = 0,
    AMP_CAST_LOWER,
    AMP_CAST_FP32,
    AMP_CAST_PROMOTE,
    AMP_CAST_DEFAULT = -1 /* for amp_autocast_set_op_policy: back to the table */
} amp_cast_category;

typedef enum {
    AMP_AUTOCAST_TABLE_DEFAULT = 0, /* PyTorch's CUDA lists (what the seeds teach) */
    AMP_AUTOCAST_TABLE_CPU = 1      /* PyTorch's CPU lists, for CPU parity */
} amp_autocast_table;

typedef struct {
    bool enabled;
    amp_dtype dtype; /* AMP_F16 or AMP_BF16 */
    bool cache_enabled;
    amp_autocast_table table;
} amp_autocast_opts;

#define AMP_AUTOCAST_OPTS(dt) ((amp_autocast_opts){true, (dt), true, AMP_AUTOCAST_TABLE_DEFAULT})

/* Enabled with dtype dt (AMP_F16 or AMP_BF16); cache_enabled and table
 * follow the enclosing region (as torch), else cache on and default table. */
AMP_API amp_status amp_autocast_enter(amp_dtype dt);
AMP_API amp_status amp_autocast_enter_opts(const amp_autocast_opts *o);
AMP_API amp_status amp_autocast_exit(void);
AMP_API bool amp_autocast_is_enabled(void);   /* innermost region casts */
AMP_API amp_dtype amp_autocast_dtype(void);   /* innermost region's dtype (f32 outside) */
AMP_API int amp_autocast_depth(void);         /* open regions on this thread */

/* Process-wide override of one op's category ("matmul", "softmax", ...);
 * AMP_CAST_DEFAULT restores the table. Unknown names are an error. */
AMP_API amp_status amp_autocast_set_op_policy(const char *op, amp_cast_category c);
/* Category of op under the given table, overrides applied; -2 if unknown. */
AMP_API int amp_autocast_op_policy(const char *op, amp_autocast_table table);
AMP_API const char *amp_cast_category_name(amp_cast_category c);

/* Statistics for this thread: casts performed by autocast (a cache hit does
 * not count) and the cached casts held now. */
AMP_API uint64_t amp_autocast_cast_count(void);
AMP_API size_t amp_autocast_cache_entries(void);

/* Writes docs/autocast.md's content (every op by category, both tables). */
AMP_API amp_status amp_autocast_write_docs(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
