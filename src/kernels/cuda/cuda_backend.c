/* The CUDA backend (kernels/backend.h): its device interface and family
 * tables, and the host-side checks and descriptors around the launchers of
 * launch.h that are not in a family's own file. Each entry queues its work
 * on amp__cu.stream and returns without waiting. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_norm.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_optim.h"

/* cuda_ctx.c */
void *amp__cu_raw_alloc(size_t nbytes);
void amp__cu_raw_free(void *p, size_t nbytes);
void amp__cu_empty_cache(void);
void amp__cu_cache_stats(size_t *cached, size_t *reserved, uint64_t *driver_allocs);
amp_status amp__cu_synchronize(void);
amp_status amp__cu_to_host(void *host, const void *dev, size_t n);
amp_status amp__cu_from_host(void *dev, const void *host, size_t n);
amp_status amp__cu_memset(void *p, int byte, size_t n);

static amp_status cu_copy(const char *fn, amp_tensor *dst, const amp_tensor *src) {
    bool fsrc = amp_dtype_is_float(src->dtype), fdst = amp_dtype_is_float(dst->dtype);
    if (fsrc && !fdst)
        return amp_error(AMP_ERR_UNSUPPORTED, "%s: converting %s to %s is not implemented on cuda (convert on the CPU)", fn,
                         amp_dtype_name(src->dtype), amp_dtype_name(dst->dtype));
    amp_cu_tensor d = amp__cu_desc(dst), s = amp__cu_desc(src);
    amp_cu_tensor *ts[2] = {&d, &s};
    amp__cu_coalesce(ts, 2);
    return AMP_CU(fn, amp_cu_copy(amp__cu.stream, &d, &s));
}

static amp_status cu_fill(const char *fn, amp_tensor *t, double v) {
    unsigned char one[8] = {0};
    amp__store(one, t->dtype, v);
    uint64_t bits = 0;
    memcpy(&bits, one, amp_dtype_size(t->dtype));
    amp_cu_tensor d = amp__cu_desc(t);
    amp_cu_tensor *ts[1] = {&d};
    amp__cu_coalesce(ts, 1);
    return AMP_CU(fn, amp_cu_fill(amp__cu.stream, &d, bits));
}

static amp_status cu_check_index(const char *fn, const char *what, const amp_tensor *idx, int64_t n, int64_t ignore) {
    if (idx->dtype != AMP_I32 && idx->dtype != AMP_I64)
        return amp_error(AMP_ERR_DTYPE, "%s: %s has dtype %s; expected i32 or i64", fn, what, amp_dtype_name(idx->dtype));
    amp_cu_tensor d = amp__cu_desc(idx);
    return AMP_CU(fn, amp_cu_check_index(amp__cu.stream, &d, n, ignore, amp__cu.err_dev, amp__cu_err_code(fn, what)));
}

static amp_status cu_ew(const char *fn, amp_ew_op op, const amp_ew_params *p, int ndim, const int64_t *shape, void *out,
                        amp_dtype out_dtype, int nin, const amp_ew_operand *in) {
    if (nin < 0 || nin > AMP_EW_MAX_IN || ndim < 0 || ndim > AMP_MAX_DIMS)
        return amp_error(AMP_ERR_ARG, "%s: elementwise call with %d operands over %d dims", fn, nin, ndim);
    amp_cu_ew_args a;
    memset(&a, 0, sizeof a);
    a.op = (int)op;
    if (p) {
        a.s0 = p->s0;
        a.s1 = p->s1;
        a.seed = p->seed;
        a.offset = p->offset;
        a.thresh = p->thresh;
    }
    a.out = out;
    a.out_dtype = (int)out_dtype;
    a.nin = nin;
    /* coalesce the output's (contiguous) dims with the operands' */
    amp_cu_tensor o, ops[AMP_EW_MAX_IN];
    memset(&o, 0, sizeof o);
    o.ndim = ndim;
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        o.shape[d] = shape[d];
        o.stride[d] = s;
        s *= shape[d];
    }
    amp_cu_tensor *ts[AMP_EW_MAX_IN + 1] = {&o};
    for (int k = 0; k < nin; k++) {
        ops[k] = o;
        memcpy(ops[k].stride, in[k].stride, sizeof(int64_t) * (size_t)ndim);
        ts[k + 1] = &ops[k];
    }
    amp__cu_coalesce(ts, nin + 1);
    a.ndim = o.ndim;
    memcpy(a.shape, o.shape, sizeof a.shape);
    for (int k = 0; k < nin; k++) {
        a.in[k].p = in[k].data;
        a.in[k].dtype = (int)in[k].dtype;
        memcpy(a.in[k].stride, ops[k].stride, sizeof a.in[k].stride);
    }
    return AMP_CU(fn, amp_cu_ew(amp__cu.stream, &a));
}

static const amp_device_iface cu_dev = {
    .raw_alloc = amp__cu_raw_alloc,
    .raw_free = amp__cu_raw_free,
    .empty_cache = amp__cu_empty_cache,
    .cache_stats = amp__cu_cache_stats,
    .synchronize = amp__cu_synchronize,
    .to_host = amp__cu_to_host,
    .from_host = amp__cu_from_host,
    .memset_bytes = amp__cu_memset,
    .copy = cu_copy,
    .fill = cu_fill,
    .check_index = cu_check_index,
};

static const amp_ew_family cu_ew_family = {.ew = cu_ew};

static const amp_gemm_family cu_gemm_family = {.gemm = amp__cu_gemm, .bias_grad = amp__cu_bias_grad};

static const amp_reduce_family cu_reduce = {
    .sum = amp__cu_sum,
    .sum_backward = amp__cu_sum_backward,
    .sum_to_shape = amp__cu_sum_to_shape,
    .max = amp__cu_max,
    .max_backward = amp__cu_max_backward,
    .norm = amp__cu_norm,
    .norm_backward = amp__cu_norm_backward,
};

static const amp_softmax_family cu_softmax = {.softmax = amp__cu_softmax, .softmax_backward = amp__cu_softmax_backward};

static const amp_norm_family cu_norm = {
    .layer_norm = amp__cu_layer_norm,
    .layer_norm_backward = amp__cu_layer_norm_backward,
    .batch_norm = amp__cu_batch_norm,
    .batch_norm_backward = amp__cu_batch_norm_backward,
    .group_norm = amp__cu_group_norm,
    .group_norm_backward = amp__cu_group_norm_backward,
};

static const amp_loss_family cu_loss = {
    .class_loss = amp__cu_class_loss,
    .class_loss_backward = amp__cu_class_loss_backward,
};

static const amp_gather_family cu_gather = {
    .embedding = amp__cu_embedding,
    .embedding_backward = amp__cu_embedding_backward,
    .gather_flat = amp__cu_gather_flat,
    .gather_flat_backward = amp__cu_gather_flat_backward,
    .mask_fill = amp__cu_mask_fill,
};

static const amp_attention_family cu_attention = {
    .attention = amp__cu_attention,
    .attention_backward = amp__cu_attention_backward,
};

static const amp_optim_family cu_optim = {
    .optim_step = amp__cu_optim_step,
    .optim_sumsq = amp__cu_optim_sumsq,
    .optim_scale_grads = amp__cu_optim_scale_grads,
};

static const amp_scaler_family cu_scaler = {
    .optim_check = amp__cu_optim_check,
    .optim_unscale = amp__cu_optim_unscale,
    .scaler_new = amp__cu_scaler_new,
    .scaler_free = amp__cu_scaler_free,
    .scaler_scale = amp__cu_scaler_scale,
    .scaler_select = amp__cu_scaler_select,
    .scaler_reset_found = amp__cu_scaler_reset_found,
    .scaler_update = amp__cu_scaler_update,
    .scaler_set = amp__cu_scaler_set,
    .scaler_read = amp__cu_scaler_read,
    .copy_if_found = amp__cu_copy_if_found,
};

/* static data: listable without a GPU (amp__backend_tables) */
const amp_backend amp__cuda_table = {
    .name = "cuda",
    .device = AMP_DEVICE_CUDA,
    .dev = &cu_dev,
    .ew = &cu_ew_family,
    .gemm = &cu_gemm_family,
    .reduce = &cu_reduce,
    .softmax = &cu_softmax,
    .norm = &cu_norm,
    .loss = &cu_loss,
    .gather = &cu_gather,
    .attention = &cu_attention,
    .optim = &cu_optim,
    .scaler = &cu_scaler,
};
