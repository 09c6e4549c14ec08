/* The CPU backend (kernels/backend.h): its device interface and its family
 * tables. Host memory is counted and cached by tensor/alloc.c directly, so
 * the memory entries are trivial (raw_alloc and the cache's are NULL). */
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/backend_cpu_conv.h"
#include "kernels/cpu/backend_cpu_gather.h"
#include "kernels/cpu/backend_cpu_gemm.h"
#include "kernels/cpu/backend_cpu_reduce.h"
#include "kernels/cpu/backend_cpu_optim.h"
#include "kernels/cpu/backend_cpu_pool.h"
#include "kernels/cpu/backend_cpu_norm.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "tensor/tensor_impl.h"

/* backend_cpu_attention.c */
amp_status amp__cpu_attention(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                              const amp_tensor *v, const amp_tensor *bias, amp_tensor *out, amp_tensor *lse);
amp_status amp__cpu_attention_backward(const char *fn, const amp_att_args *a, const amp_tensor *q, const amp_tensor *k,
                                       const amp_tensor *v, const amp_tensor *bias, const amp_tensor *out,
                                       const amp_tensor *lse, const amp_tensor *g, amp_tensor **gin);

static amp_status cpu_sync(void) { return AMP_OK; }

static amp_status cpu_to_host(void *dst, const void *src, size_t n) {
    if (n) memmove(dst, src, n);
    return AMP_OK;
}

static amp_status cpu_memset(void *p, int byte, size_t n) {
    if (n) memset(p, byte, n);
    return AMP_OK;
}

static amp_status cpu_copy(const char *fn, amp_tensor *dst, const amp_tensor *src) {
    AMP_UNUSED(fn);
    return amp__cpu_copy_convert(dst, src);
}

static amp_status cpu_fill(const char *fn, amp_tensor *t, double v) {
    AMP_UNUSED(fn);
    return amp_tensor_fill_(t, v);
}

static amp_status cpu_ew(const char *fn, amp_ew_op op, const amp_ew_params *p, int ndim, const int64_t *shape, void *out,
                         amp_dtype out_dtype, int nin, const amp_ew_operand *in) {
    AMP_UNUSED(fn);
    amp_ew_run(op, p, ndim, shape, out, out_dtype, nin, in);
    return AMP_OK;
}

/* amp_gemm, then the epilogue as one more elementwise pass over C */
static amp_status cpu_gemm(const char *fn, const amp_gemm_args *g) {
    AMP_UNUSED(fn);
    if (g->epilogue == AMP_GEMM_EPI_NONE) return amp_gemm(g);
    amp_gemm_args a = *g;
    a.epilogue = AMP_GEMM_EPI_NONE;
    a.epi_aux = NULL;
    amp_status st = amp_gemm(&a);
    if (st != AMP_OK) return st;
    if (g->epilogue != AMP_GEMM_EPI_GELU_TANH)
        return amp_error(AMP_ERR_ARG, "amp_gemm: epilogue %d is not known", (int)g->epilogue);
    size_t es = amp_dtype_size(g->c_dtype);
    int64_t batch = g->batch > 0 ? g->batch : 1, mn = g->m * g->n;
    /* the pre-activation values, packed [m, n] per batch item: into epi_aux
     * when asked for, else a workspace; then C = gelu(them), row by row */
    char *pre = g->epi_aux ? (char *)g->epi_aux : amp__ws_alloc((size_t)(mn ? mn : 1) * es);
    if (!pre) return amp_last_status();
    for (int64_t b = 0; b < batch; b++) {
        char *c = (char *)g->c + (size_t)(b * g->stride_c) * es;
        char *pb = g->epi_aux ? pre + (size_t)(b * mn) * es : pre;
        amp_ew_operand in;
        memset(&in, 0, sizeof in);
        int64_t shape[2] = {g->m, g->n};
        in.data = c;
        in.dtype = g->c_dtype;
        in.stride[0] = g->ldc;
        in.stride[1] = 1;
        amp_ew_run(AMP_EW_COPY, NULL, 2, shape, pb, g->c_dtype, 1, &in);
        for (int64_t r = 0; r < g->m; r++) {
            amp_ew_operand row;
            memset(&row, 0, sizeof row);
            row.data = pb + (size_t)(r * g->n) * es;
            row.dtype = g->c_dtype;
            row.stride[0] = 1;
            amp_ew_run(AMP_EW_GELU_TANH, NULL, 1, &g->n, c + (size_t)(r * g->ldc) * es, g->c_dtype, 1, &row);
        }
    }
    if (!g->epi_aux) amp__ws_free(pre, (size_t)(mn ? mn : 1) * es);
    return AMP_OK;
}

static const amp_device_iface cpu_dev = {
    .synchronize = cpu_sync,
    .to_host = cpu_to_host,
    .from_host = cpu_to_host,
    .memset_bytes = cpu_memset,
    .copy = cpu_copy,
    .fill = cpu_fill,
};

static const amp_ew_family cpu_ew_family = {.ew = cpu_ew};

static const amp_gemm_family cpu_gemm_family = {.gemm = cpu_gemm, .bias_grad = amp__cpu_bias_grad};

static const amp_reduce_family cpu_reduce = {
    .sum = amp__cpu_sum,
    .sum_backward = amp__cpu_sum_backward,
    .sum_to_shape = amp__cpu_sum_to_shape,
    .prod = amp__cpu_prod,
    .prod_backward = amp__cpu_prod_backward,
    .cumsum = amp__cpu_cumsum,
    .max = amp__cpu_max,
    .max_backward = amp__cpu_max_backward,
    .norm = amp__cpu_norm,
    .norm_backward = amp__cpu_norm_backward,
};

static const amp_softmax_family cpu_softmax = {.softmax = amp__cpu_softmax, .softmax_backward = amp__cpu_softmax_backward};

static const amp_norm_family cpu_norm = {
    .layer_norm = amp__cpu_layer_norm,
    .layer_norm_backward = amp__cpu_layer_norm_backward,
    .batch_norm = amp__cpu_batch_norm,
    .batch_norm_backward = amp__cpu_batch_norm_backward,
    .group_norm = amp__cpu_group_norm,
    .group_norm_backward = amp__cpu_group_norm_backward,
};

static const amp_loss_family cpu_loss = {
    .class_loss = amp__cpu_class_loss,
    .class_loss_backward = amp__cpu_class_loss_backward,
    .pw_loss = amp__cpu_pw_loss,
    .pw_loss_backward = amp__cpu_pw_loss_backward,
};

static const amp_gather_family cpu_gather = {
    .embedding = amp__cpu_embedding,
    .embedding_backward = amp__cpu_embedding_backward,
    .gather_flat = amp__cpu_gather_flat,
    .gather_flat_backward = amp__cpu_gather_flat_backward,
    .mask_fill = amp__cpu_mask_fill,
};

static const amp_pool_family cpu_pool = {
    .max_pool2d = amp__cpu_max_pool2d,
    .max_pool2d_backward = amp__cpu_max_pool2d_backward,
    .avg_pool2d = amp__cpu_avg_pool2d,
    .avg_pool2d_backward = amp__cpu_avg_pool2d_backward,
};

static const amp_conv_family cpu_conv = {.conv = amp__cpu_conv, .conv_backward = amp__cpu_conv_backward};

static const amp_attention_family cpu_attention = {
    .attention = amp__cpu_attention,
    .attention_backward = amp__cpu_attention_backward,
};

static const amp_optim_family cpu_optim = {
    .optim_step = amp__cpu_optim_step,
    .optim_sumsq = amp__cpu_optim_sumsq,
    .optim_scale_grads = amp__cpu_optim_scale_grads,
    .optim_clamp_grad = amp__cpu_optim_clamp_grad,
};

/* the CPU's scaler is host arithmetic (src/amp/scaler.c): only the check and the unscale */
static const amp_scaler_family cpu_scaler = {
    .optim_check = amp__cpu_optim_check,
    .optim_unscale = amp__cpu_optim_unscale,
};

const amp_backend amp_backend_cpu = {
    .name = "cpu",
    .device = AMP_DEVICE_CPU,
    .dev = &cpu_dev,
    .ew = &cpu_ew_family,
    .gemm = &cpu_gemm_family,
    .reduce = &cpu_reduce,
    .softmax = &cpu_softmax,
    .norm = &cpu_norm,
    .loss = &cpu_loss,
    .gather = &cpu_gather,
    .pool = &cpu_pool,
    .conv = &cpu_conv,
    .attention = &cpu_attention,
    .optim = &cpu_optim,
    .scaler = &cpu_scaler,
};
