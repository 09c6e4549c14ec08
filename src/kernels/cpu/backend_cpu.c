/* The CPU backend (kernels/backend.h): its device interface, its
 * elementwise table, and amp_backend_cpu gathering the family tables that
 * the families' files define (backend_cpu.h). Host memory is counted and
 * cached by tensor/alloc.c directly, so the memory entries are trivial
 * (raw_alloc and the cache's are NULL). */
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/backend_cpu.h"
#include "kernels/cpu/elementwise.h"
#include "tensor/tensor_impl.h"

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

static const amp_device_iface cpu_dev = {
    .synchronize = cpu_sync,
    .to_host = cpu_to_host,
    .from_host = cpu_to_host,
    .memset_bytes = cpu_memset,
    .copy = cpu_copy,
    .fill = cpu_fill,
};

static const amp_ew_family cpu_ew_family = {.ew = cpu_ew};

const amp_backend amp_backend_cpu = {
    .name = "cpu",
    .device = AMP_DEVICE_CPU,
    .dev = &cpu_dev,
    .ew = &cpu_ew_family,
    .gemm = &amp__cpu_gemm_family,
    .reduce = &amp__cpu_reduce_family,
    .softmax = &amp__cpu_softmax_family,
    .norm = &amp__cpu_norm_family,
    .loss = &amp__cpu_loss_family,
    .gather = &amp__cpu_gather_family,
    .pool = &amp__cpu_pool_family,
    .conv = &amp__cpu_conv_family,
    .attention = &amp__cpu_attention_family,
    .rope = &amp__cpu_rope_family,
    .optim = &amp__cpu_optim_family,
    .scaler = &amp__cpu_scaler_family,
    .quant = &amp__cpu_quant_family,
};
