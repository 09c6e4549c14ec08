/* A GPT-style model as a user writes it with amp/nn.h (see tiny_lm.h). */
#include "tiny_lm.h"

#include <math.h>
#include <string.h>

typedef struct {
    int64_t d, heads, block;
} attn_cfg;

/* x [B,T,D] -> [B,T,D] */
static amp_tensor *attn_forward(amp_module *m, amp_tensor *x) {
    const attn_cfg *c = amp_module_data(m);
    int64_t B = amp_tensor_dim(x, 0), T = amp_tensor_dim(x, 1), D = c->d, H = c->heads, hd = D / H;
    if (T > c->block) return NULL;
    amp_tensor *qkv = amp_module_forward(amp_module_get_child(m, "c_attn"), x); /* [B,T,3D] */
    amp_tensor *parts[3];
    for (int i = 0; i < 3; i++) {
        amp_tensor *p = amp_slice(qkv, 2, i * D, (i + 1) * D, 1);                        /* [B,T,D] */
        p = amp_reshape(p, 4, AMP_SHAPE(B, T, H, hd));                                  /* [B,T,H,hd] */
        parts[i] = amp_permute(p, (const int[]){0, 2, 1, 3});                           /* [B,H,T,hd] */
    }
    amp_tensor *att = amp_matmul(parts[0], amp_transpose(parts[1], -2, -1)); /* [B,H,T,T] */
    att = amp_mul_scalar(att, 1.0 / sqrt((double)hd));
    amp_tensor *mask = amp_module_get_buffer(m, "mask"); /* [block,block]: 0 on and below the diagonal, -inf above */
    mask = amp_slice(amp_slice(mask, 0, 0, T, 1), 1, 0, T, 1);
    att = amp_softmax(amp_add(att, mask), -1);
    amp_tensor *y = amp_matmul(att, parts[2]);                         /* [B,H,T,hd] */
    y = amp_reshape(amp_permute(y, (const int[]){0, 2, 1, 3}), 3, AMP_SHAPE(B, T, D));
    return amp_module_forward(amp_module_get_child(m, "c_proj"), y);
}

static void attn_repr(const amp_module *m, char *b, size_t n) {
    const attn_cfg *c = amp_module_data(m);
    snprintf(b, n, "d=%lld, heads=%lld", (long long)c->d, (long long)c->heads);
}

static const amp_module_class attn_class = {.name = "CausalSelfAttention", .forward = attn_forward, .extra_repr = attn_repr};

amp_module *tiny_attention_new(int64_t d, int64_t heads, int64_t block, amp_generator *g) {
    if (heads <= 0 || d % heads) return NULL;
    amp_module *m = amp_module_new(&attn_class, sizeof(attn_cfg));
    if (!m) return NULL;
    *(attn_cfg *)amp_module_data(m) = (attn_cfg){d, heads, block};
    amp_tensor *mask = amp_tensor_zeros(AMP_F32, 2, AMP_SHAPE(block, block));
    if (mask)
        for (int64_t i = 0; i < block; i++)
            for (int64_t j = i + 1; j < block; j++) amp_tensor_set(mask, AMP_SHAPE(i, j), -INFINITY);
    if (!amp_module_register_module(m, "c_attn", amp_nn_linear(d, 3 * d, true, g)) ||
        !amp_module_register_module(m, "c_proj", amp_nn_linear(d, d, true, g)) ||
        !amp_module_register_buffer(m, "mask", mask, false)) {
        amp_module_free(m);
        return NULL;
    }
    return m;
}

static amp_tensor *block_forward(amp_module *m, amp_tensor *x) {
    amp_tensor *a = amp_module_forward(amp_module_get_child(m, "attn"), amp_module_forward(amp_module_get_child(m, "ln_1"), x));
    x = amp_add(x, a);
    amp_tensor *h = amp_module_forward(amp_module_get_child(m, "ln_2"), x);
    h = amp_module_forward(amp_module_get_child(m, "mlp.c_fc"), h);
    h = amp_gelu(h, AMP_GELU_TANH);
    h = amp_module_forward(amp_module_get_child(m, "mlp.c_proj"), h);
    return amp_add(x, h);
}

static const amp_module_class block_class = {.name = "Block", .forward = block_forward};
static const amp_module_class mlp_class = {.name = "MLP"}; /* a container: the block calls its layers */

amp_module *tiny_block_new(int64_t d, int64_t heads, int64_t block, amp_generator *g) {
    amp_module *m = amp_module_new(&block_class, 0);
    if (!m) return NULL;
    amp_module *mlp = amp_module_new(&mlp_class, 0);
    if (!amp_module_register_module(m, "ln_1", amp_nn_layernorm(d, 1e-5)) ||
        !amp_module_register_module(m, "attn", tiny_attention_new(d, heads, block, g)) ||
        !amp_module_register_module(m, "ln_2", amp_nn_layernorm(d, 1e-5)) || !amp_module_register_module(m, "mlp", mlp) ||
        !amp_module_register_module(mlp, "c_fc", amp_nn_linear(d, 4 * d, true, g)) ||
        !amp_module_register_module(mlp, "c_proj", amp_nn_linear(4 * d, d, true, g))) {
        amp_module_free(m);
        return NULL;
    }
    return m;
}

static amp_tensor *lm_forward(amp_module *m, amp_tensor *idx) {
    const tiny_lm_cfg *c = amp_module_data(m);
    int64_t T = amp_tensor_dim(idx, 1);
    amp_tensor *pos = amp_tensor_arange(0, (double)T, 1, AMP_I64);
    amp_tensor *x = amp_add(amp_module_forward(amp_module_get_child(m, "wte"), idx),
                            amp_module_forward(amp_module_get_child(m, "wpe"), pos)); /* [B,T,D] + [T,D] */
    amp_module *h = amp_module_get_child(m, "h");
    for (int64_t i = 0; i < c->layers && x; i++) x = amp_module_forward(amp_module_child_at(h, (int)i, NULL), x);
    x = amp_module_forward(amp_module_get_child(m, "ln_f"), x);
    return amp_module_forward(amp_module_get_child(m, "lm_head"), x);
}

static const amp_module_class lm_class = {.name = "TinyLM", .forward = lm_forward};

amp_module *tiny_lm_new(const tiny_lm_cfg *c, amp_generator *g) {
    amp_module *m = amp_module_new(&lm_class, sizeof *c);
    if (!m) return NULL;
    *(tiny_lm_cfg *)amp_module_data(m) = *c;
    amp_module *h = amp_nn_module_list();
    bool ok = amp_module_register_module(m, "wte", amp_nn_embedding(c->vocab, c->d, g)) &&
              amp_module_register_module(m, "wpe", amp_nn_embedding(c->block, c->d, g)) && amp_module_register_module(m, "h", h);
    for (int64_t i = 0; ok && i < c->layers; i++) ok = amp_module_append(h, tiny_block_new(c->d, c->heads, c->block, g)) == AMP_OK;
    ok = ok && amp_module_register_module(m, "ln_f", amp_nn_layernorm(c->d, 1e-5)) &&
         amp_module_register_module(m, "lm_head", amp_nn_linear(c->d, c->vocab, false, g));
    /* weight tying, as GPT-2: the head uses the token embedding's matrix */
    ok = ok && amp_module_set_parameter(m, "lm_head.weight", amp_tensor_retain(amp_module_get_parameter(m, "wte.weight"))) == AMP_OK;
    if (!ok) {
        amp_module_free(m);
        return NULL;
    }
    return m;
}
