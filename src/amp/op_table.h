/* Internal: the one table of ops and their autocast categories.
 * docs/autocast.md is generated from this table (amp_autocast_write_docs) and
 * a test fails when the committed file is stale. */
#ifndef AMP_OP_TABLE_H
#define AMP_OP_TABLE_H

#include "amp/autocast.h"

/* X(id, name, cuda-style category (the seeds' / default table), PyTorch CPU category) */
#define AMP_OP_LIST(X)                                                              \
    /* lower precision: matrix products and convolutions */                         \
    X(MATMUL, "matmul", AMP_CAST_LOWER, AMP_CAST_LOWER)                             \
    X(MM, "mm", AMP_CAST_LOWER, AMP_CAST_LOWER)                                     \
    X(BMM, "bmm", AMP_CAST_LOWER, AMP_CAST_LOWER)                                   \
    X(LINEAR, "linear", AMP_CAST_LOWER, AMP_CAST_LOWER)                             \
    X(QLINEAR, "qlinear", AMP_CAST_LOWER, AMP_CAST_LOWER)                           \
    X(ADDMM, "addmm", AMP_CAST_LOWER, AMP_CAST_LOWER)                               \
    X(BADDBMM, "baddbmm", AMP_CAST_LOWER, AMP_CAST_LOWER)                           \
    X(CONV1D, "conv1d", AMP_CAST_LOWER, AMP_CAST_LOWER)                             \
    X(CONV2D, "conv2d", AMP_CAST_LOWER, AMP_CAST_LOWER)                             \
    X(PRELU, "prelu", AMP_CAST_LOWER, AMP_CAST_LOWER)                               \
    X(SDPA, "scaled_dot_product_attention", AMP_CAST_LOWER, AMP_CAST_LOWER)          \
    /* fp32: range-sensitive math, reductions, normalisation, losses */            \
    X(EXP, "exp", AMP_CAST_FP32, AMP_CAST_NONE)                                     \
    X(LOG, "log", AMP_CAST_FP32, AMP_CAST_NONE)                                     \
    X(LOG1P, "log1p", AMP_CAST_FP32, AMP_CAST_NONE)                                 \
    X(EXPM1, "expm1", AMP_CAST_FP32, AMP_CAST_NONE)                                 \
    X(POW, "pow", AMP_CAST_FP32, AMP_CAST_NONE)                                     \
    X(RSQRT, "rsqrt", AMP_CAST_FP32, AMP_CAST_NONE)                                 \
    X(RECIPROCAL, "reciprocal", AMP_CAST_FP32, AMP_CAST_NONE)                       \
    X(SOFTPLUS, "softplus", AMP_CAST_FP32, AMP_CAST_NONE)                           \
    X(SOFTMAX, "softmax", AMP_CAST_FP32, AMP_CAST_NONE)                             \
    X(LOG_SOFTMAX, "log_softmax", AMP_CAST_FP32, AMP_CAST_NONE)                     \
    X(LAYER_NORM, "layer_norm", AMP_CAST_FP32, AMP_CAST_NONE)                       \
    X(RMS_NORM, "rms_norm", AMP_CAST_FP32, AMP_CAST_NONE)                           \
    X(GROUP_NORM, "group_norm", AMP_CAST_FP32, AMP_CAST_NONE)                       \
    X(SUM, "sum", AMP_CAST_FP32, AMP_CAST_NONE)                                     \
    X(PROD, "prod", AMP_CAST_FP32, AMP_CAST_FP32)                                   \
    X(CUMSUM, "cumsum", AMP_CAST_FP32, AMP_CAST_NONE)                               \
    X(NORM, "norm", AMP_CAST_FP32, AMP_CAST_NONE)                                   \
    X(CROSS_ENTROPY, "cross_entropy", AMP_CAST_FP32, AMP_CAST_FP32)                 \
    X(NLL_LOSS, "nll_loss", AMP_CAST_FP32, AMP_CAST_FP32)                           \
    X(MSE_LOSS, "mse_loss", AMP_CAST_FP32, AMP_CAST_FP32)                           \
    X(L1_LOSS, "l1_loss", AMP_CAST_FP32, AMP_CAST_FP32)                             \
    X(SMOOTH_L1_LOSS, "smooth_l1_loss", AMP_CAST_FP32, AMP_CAST_FP32)               \
    X(BCE_WITH_LOGITS, "binary_cross_entropy_with_logits", AMP_CAST_FP32, AMP_CAST_FP32) \
    X(KL_DIV, "kl_div", AMP_CAST_FP32, AMP_CAST_FP32)                               \
    /* promote: run in the widest input float type */                               \
    X(CAT, "cat", AMP_CAST_PROMOTE, AMP_CAST_PROMOTE)                               \
    X(STACK, "stack", AMP_CAST_PROMOTE, AMP_CAST_PROMOTE)                           \
    X(ADDCMUL, "addcmul", AMP_CAST_PROMOTE, AMP_CAST_NONE)                          \
    X(ROPE, "rope", AMP_CAST_PROMOTE, AMP_CAST_NONE)                                \
    X(ADDCDIV, "addcdiv", AMP_CAST_PROMOTE, AMP_CAST_NONE)                          \
    X(DOT, "dot", AMP_CAST_PROMOTE, AMP_CAST_NONE)                                  \
    /* everything else: inputs' dtype with ordinary type promotion */              \
    X(ADD, "add", AMP_CAST_NONE, AMP_CAST_NONE)                                     \
    X(SUB, "sub", AMP_CAST_NONE, AMP_CAST_NONE)                                     \
    X(MUL, "mul", AMP_CAST_NONE, AMP_CAST_NONE)                                     \
    X(DIV, "div", AMP_CAST_NONE, AMP_CAST_NONE)                                     \
    X(SQRT, "sqrt", AMP_CAST_NONE, AMP_CAST_NONE)                                   \
    X(NEG, "neg", AMP_CAST_NONE, AMP_CAST_NONE)                                     \
    X(ABS, "abs", AMP_CAST_NONE, AMP_CAST_NONE)                                     \
    X(CLAMP, "clamp", AMP_CAST_NONE, AMP_CAST_NONE)                                 \
    X(MEAN, "mean", AMP_CAST_NONE, AMP_CAST_NONE)                                   \
    X(MAX, "max", AMP_CAST_NONE, AMP_CAST_NONE)                                     \
    X(RELU, "relu", AMP_CAST_NONE, AMP_CAST_NONE)                                   \
    X(GELU, "gelu", AMP_CAST_NONE, AMP_CAST_NONE)                                   \
    X(SILU, "silu", AMP_CAST_NONE, AMP_CAST_NONE)                                   \
    X(SWIGLU, "swiglu", AMP_CAST_NONE, AMP_CAST_NONE)                               \
    X(SIGMOID, "sigmoid", AMP_CAST_NONE, AMP_CAST_NONE)                             \
    X(TANH, "tanh", AMP_CAST_NONE, AMP_CAST_NONE)                                   \
    X(DROPOUT, "dropout", AMP_CAST_NONE, AMP_CAST_NONE)                             \
    X(MAX_POOL2D, "max_pool2d", AMP_CAST_NONE, AMP_CAST_NONE)                       \
    X(AVG_POOL2D, "avg_pool2d", AMP_CAST_NONE, AMP_CAST_NONE)                       \
    X(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d", AMP_CAST_NONE, AMP_CAST_NONE)     \
    X(BATCH_NORM, "batch_norm", AMP_CAST_NONE, AMP_CAST_NONE)                       \
    X(EMBEDDING, "embedding", AMP_CAST_NONE, AMP_CAST_NONE)                         \
    X(INDEX_SELECT, "index_select", AMP_CAST_NONE, AMP_CAST_NONE)                   \
    X(GATHER, "gather", AMP_CAST_NONE, AMP_CAST_NONE)                               \
    X(TRIL, "tril", AMP_CAST_NONE, AMP_CAST_NONE)                                   \
    X(TRIU, "triu", AMP_CAST_NONE, AMP_CAST_NONE)                                   \
    X(MASKED_FILL, "masked_fill", AMP_CAST_NONE, AMP_CAST_NONE)

typedef enum {
#define AMP_OP_ENUM(id, name, cuda, cpu) AMP_OP_##id,
    AMP_OP_LIST(AMP_OP_ENUM)
#undef AMP_OP_ENUM
    AMP_OP_COUNT
} amp_op_id;

typedef struct {
    const char *name;
    amp_cast_category category[2]; /* [AMP_AUTOCAST_TABLE_DEFAULT], [AMP_AUTOCAST_TABLE_CPU] */
} amp_op_info;

extern const amp_op_info amp__op_table[]; /* AMP_OP_COUNT rows (checked where it is defined) */

/* Applies the active autocast region to an op's inputs, in place: each
 * replaced in[i] is a new reference (a differentiable cast) that the caller
 * gives back with amp__autocast_done. Returns the mask of replaced entries,
 * or -1 on error (message set). NULL entries are left alone. */
int amp__autocast(amp_op_id op, amp_tensor **in, int n);
/* The innermost region's options on this thread (outside any region:
 * enabled false, f16, the default table). Custom functions record it. */
void amp__autocast_current(amp_autocast_opts *o);
void amp__autocast_done(amp_tensor **in, int n, int mask);
/* amp__autocast for an op that computes through its tensors' device's
 * backend (kernels/backend.h): instead of refusing non-CPU tensors it checks
 * that the non-NULL inputs share one device (an error naming the op
 * otherwise) and returns it in *dev (the CPU when all are NULL). The casts
 * are made on that device. */
int amp__autocast_dev(amp_op_id op, amp_tensor **in, int n, amp_device *dev);
/* The category op has in the active region (AMP_CAST_NONE when autocast is
 * off or inside the engine): for ops that widen half inputs in their kernel
 * instead of casting them (cross_entropy's row path). */
amp_cast_category amp__autocast_category(amp_op_id op);

#endif
