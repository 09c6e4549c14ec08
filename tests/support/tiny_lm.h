/* A user-defined model written with the public module API only, as a user
 * would: a small GPT-style language model (token and position embeddings,
 * pre-LayerNorm residual blocks with causal multi-head self-attention built
 * from public ops, a 4x GELU MLP, a final LayerNorm and an LM head whose
 * weight is tied to the token embedding). Names follow nanoGPT's state_dict:
 * wte.weight, wpe.weight, h.0.ln_1.weight, h.0.attn.c_attn.weight, ...,
 * ln_f.weight, lm_head.weight (= wte.weight).
 *
 * Used by the module, amp_initialize and thread tests. */
#ifndef AMP_TEST_TINY_LM_H
#define AMP_TEST_TINY_LM_H

#include "amp/amp.h"

typedef struct {
    int64_t vocab, block, d, heads, layers;
} tiny_lm_cfg;

/* The causal self-attention layer alone: x [B,T,D] -> [B,T,D]. */
amp_module *tiny_attention_new(int64_t d, int64_t heads, int64_t block, amp_generator *g);
/* One pre-LN residual block: x + attn(ln_1(x)), then + mlp(ln_2(x)). */
amp_module *tiny_block_new(int64_t d, int64_t heads, int64_t block, amp_generator *g);
/* The model: idx [B,T] (i64) -> logits [B,T,vocab]. */
amp_module *tiny_lm_new(const tiny_lm_cfg *c, amp_generator *g);

#endif
