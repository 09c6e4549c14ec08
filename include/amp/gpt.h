/* amp/gpt.h — GPT-2 (nanoGPT's model), built on the module mechanism of
 * amp/nn.h like any user model: training, PyTorch state_dicts, a KV cache
 * for generation, activation checkpointing.
 *
 * The model: token embedding wte [V, C] and learned positions wpe
 * [block_size, C], dropout, n_layer pre-LayerNorm blocks
 *   x = x + attn(ln_1(x))      causal self-attention: one c_attn Linear
 *                              C -> 3C (q, k, v), n_head heads through the
 *                              fused scaled_dot_product_attention, c_proj
 *                              C -> C, residual dropout
 *   x = x + mlp(ln_2(x))       c_fc C -> 4C, tanh GELU, c_proj 4C -> C, dropout
 * then ln_f and the LM head, whose weight IS wte's (tied): logits [B, T, V].
 * LayerNorm eps 1e-5.
 *
 * Parameter names are nanoGPT's state_dict keys (transformer.wte.weight,
 * transformer.h.0.attn.c_attn.weight, ..., transformer.ln_f.bias,
 * lm_head.weight = transformer.wte.weight), so amp_model_save writes what
 * nanoGPT's model.state_dict() holds and amp_model_load reads it back;
 * amp_gpt_load also reads Hugging Face's GPT2LMHeadModel layout (names
 * without "transformer.", Conv1D weights stored [in, out]).
 *
 * Initialisation (nanoGPT's, GPT-2's): Linear and Embedding weights
 * N(0, 0.02), biases 0, LayerNorm 1 / 0, and each residual projection
 * (attn.c_proj and mlp.c_proj weights) N(0, 0.02 / sqrt(2 n_layer)). */
#ifndef AMP_GPT_H
#define AMP_GPT_H

#include "amp/checkpoint.h"
#include "amp/nn.h"
#include "amp/optim.h"
#include "amp/pretrained.h"
#include "amp/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t n_layer, n_head, n_embd, block_size, vocab_size;
    double dropout; /* embedding, attention-weight, residual and MLP dropout (training only) */
    bool bias;      /* biases in the Linears and LayerNorms (GPT-2: true) */
} amp_gpt_config;

/* GPT-2 small, 124M parameters. */
#define AMP_GPT_CONFIG_GPT2 ((amp_gpt_config){12, 12, 768, 1024, 50257, 0.0, true})

/* A new GPT with nanoGPT's initialisation drawn from g (NULL: the default
 * generator). g is also the dropout generator: it must outlive the model
 * (save it in checkpoints for a bit-exact resume). n_embd must divide by
 * n_head; every size > 0; dropout in [0, 1). */
AMP_API amp_module *amp_gpt_new(const amp_gpt_config *c, amp_generator *g);
/* The configuration of a model made by amp_gpt_new (error otherwise). */
AMP_API amp_status amp_gpt_get_config(const amp_module *m, amp_gpt_config *out);
/* Sets the dropout generator (after loading a model, or to share one). */
AMP_API amp_status amp_gpt_set_generator(amp_module *m, amp_generator *g);

/* amp_module_forward(gpt, idx): idx i64/i32 [B, T] (T <= block_size,
 * tokens < vocab_size) -> logits [B, T, V]. In training mode dropout is on.
 *
 * The mean cross-entropy of the logits against targets [B, T] (entries -1
 * are ignored, as nanoGPT's ignore_index=-1), an f32 scalar whatever the
 * logits' dtype (half logits are widened inside the loss kernel, never
 * copied to f32); *logits (may be NULL) receives the logits. */
AMP_API amp_tensor *amp_gpt_loss(amp_module *m, amp_tensor *idx, amp_tensor *targets, amp_tensor **logits);

/* Activation checkpointing: each block's forward runs without keeping its
 * activations and is recomputed during backward (amp_activation_checkpoint,
 * with the model's dropout generator restored, under the forward's autocast
 * state), giving bit-identical gradients for about one block's activations
 * plus the residual stream between blocks. */
AMP_API amp_status amp_gpt_set_activation_checkpointing(amp_module *m, bool on);
AMP_API bool amp_gpt_activation_checkpointing(const amp_module *m);

/* Weight-decay groups. decays: parameters whose name is a Linear weight
 * (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj): the 2-D matrices of the
 * blocks; not decayed: biases, LayerNorm weights, and the embeddings wte
 * (= lm_head) and wpe, as the issue, minGPT and nanoGPT before 2023 group
 * them. With decay_embeddings (today's nanoGPT: every parameter with
 * dim >= 2) the embeddings decay too. Sets each parameter's weight decay in
 * the optimizers (amp_optim_set_param_weight_decay): weight_decay or 0. The
 * optimizers may hold any subset of m's parameters (O2's half and f32
 * optimizers); other parameters are an error. */
AMP_API amp_status amp_gpt_apply_weight_decay(amp_module *m, amp_optim *const *optims, int n_optims, double weight_decay,
                                      bool decay_embeddings);

/* Loads a safetensors state_dict written by amp_model_save, nanoGPT
 * (torch: state_dict() saved with safetensors) or Hugging Face's
 * GPT2LMHeadModel (h.0.attn.c_attn.weight [C, 3C], ...: names mapped and
 * Conv1D weights transposed). lm_head.weight may be absent (tied) or equal
 * to the embedding; the causal-mask buffers (attn.bias, attn.masked_bias)
 * are ignored. Every
 * parameter must be present with its shape (amp_gpt_check_state_dict) and
 * finite values (the first that is not is named); nothing changes unless
 * all check. */
AMP_API amp_status amp_gpt_load(amp_module *m, const char *path);
/* ---- load dtypes (the seeds' three dtypes: the file's, the load's, the compute's) ----------
 * amp_gpt_load, then amp_gpt_set_load_dtype(m, ld); AMP_LOAD_DTYPE_KEEP
 * keeps the file's dtype (an F32 file f32, a BF16 one bf16; other float
 * types f32). ld is checked before the file is read. */
AMP_API amp_status amp_gpt_load_ex(amp_module *m, const char *path, amp_load_dtype ld);
/* Converts a model's weights in place, once, into the load dtype:
 *   f32 / f16 / bf16: every parameter but the LayerNorms (kept f32 and
 *     keep-f32, amp_module_to(m, dt, true)), so a bf16 model under a bf16
 *     autocast region casts no weight at any token (tests/test_gpt_load.c
 *     counts). f16: every weight is checked first; one beyond f16's range
 *     (65504) is named with its element and nothing changes.
 *   q8_0 / q4_0 / q4_1 (amp/quant.h): the 2-D matrices of the blocks
 *     (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) and the token
 *     embedding wte, which is also the LM head (as llama.cpp quantizes
 *     GPT-2's token_embd), quantized with amp_quantize (n_embd a multiple
 *     of 32); the blocks' Linears run amp_qlinear, the head amp_qlinear on
 *     the same blocks, the embedding lookup amp_qembedding (rows
 *     dequantized to f32). Biases, LayerNorms and wpe stay f32 (a half
 *     model is first widened). The quantized matrices' parameters become
 *     0-element placeholders (their memory is freed; the parameter names
 *     stay): loading into or converting such a model again is refused
 *     (AMP_ERR_STATE: quantizing is one-way), and a state_dict saved from
 *     it holds the placeholders, which amp_gpt_load refuses by shape.
 *   keep: nothing changes.
 * The forward is the same code for every load dtype (each Linear either
 * multiplies its float weight or its quantized one). */
AMP_API amp_status amp_gpt_set_load_dtype(amp_module *m, amp_load_dtype ld);
/* The dtype the model's weights are held in: AMP_LOAD_FLOAT with the
 * blocks' weight dtype, or AMP_LOAD_QUANT with the qtype. */
AMP_API amp_status amp_gpt_get_load_dtype(const amp_module *m, amp_load_dtype *out);

/* GPT-2 from a Hugging Face directory (amp/pretrained.h: config.json and
 * model.safetensors, or its shards and index), loaded in ld. config.json:
 * model_type "gpt2"; n_layer, n_head, n_embd, n_positions (block_size),
 * vocab_size; layer_norm_epsilon (default 1e-5); activation_function
 * gelu_new, gelu_pytorch_tanh or gelu_fast (tanh GELU) or gelu (erf);
 * n_inner null or 4 n_embd; scale_attn_weights true,
 * scale_attn_by_inverse_layer_idx and add_cross_attention false (others are
 * refused by name). Weights: GPT2LMHeadModel's names with or without
 * "transformer.", Conv1D matrices [in, out] (transposed at load), the
 * causal-mask buffers ignored, lm_head.weight absent or equal to wte (tied);
 * biases when h.0.ln_1.bias is there. Every tensor is checked against the
 * config (amp_gpt_check_state_dict's rules) before the model is allocated.
 * Dropout 0; the default generator. */
AMP_API amp_module *amp_gpt_from_pretrained(const char *dir, amp_load_dtype ld);

/* Whether a state_dict (amp_gpt_load's layouts) holds a GPT of
 * configuration c, from the header alone, before any model is made: c
 * valid (amp_gpt_new's rules), every parameter present with its shape and a
 * float dtype, nothing else but the causal-mask buffers (attn.bias,
 * attn.masked_bias) and lm_head.weight, which must be the tied head: the
 * embedding's shape, dtype and bytes. amp's GPT, as GPT-2 and nanoGPT, has
 * no separate LM head, so a different one is refused rather than dropped.
 * The error names the tensor and the sizes of c that make its shape. */
AMP_API amp_status amp_gpt_check_state_dict(const amp_safetensors *f, const amp_gpt_config *c);
/* The configuration a state_dict holds, from its shapes: vocab_size and
 * n_embd from wte, block_size from wpe, n_layer the blocks h.0, h.1, ...,
 * bias whether h.0.ln_1.bias is there, dropout 0, n_head as given (the
 * shapes do not tell it); then amp_gpt_check_state_dict, so that a file
 * whose shapes disagree is refused before amp_gpt_new allocates anything. */
AMP_API amp_status amp_gpt_config_from_state_dict(const amp_safetensors *f, int64_t n_head, amp_gpt_config *out);

/* ---- generation ---------------------------------------------------------------
 * A KV cache: per layer the keys and values [B, n_head, block_size, hs] of
 * the positions seen so far, in the model's dtype (or the autocast dtype of
 * the region the first forward runs in). */
typedef struct amp_gpt_cache amp_gpt_cache;
AMP_API amp_gpt_cache *amp_gpt_cache_new(amp_module *m, int64_t batch);
AMP_API void amp_gpt_cache_free(amp_gpt_cache *c);
AMP_API void amp_gpt_cache_reset(amp_gpt_cache *c);
AMP_API int64_t amp_gpt_cache_length(const amp_gpt_cache *c); /* positions held */
/* Forward of idx [B, T'] at positions length .. length + T' - 1 (at most
 * block_size in all), attending to the cached keys and values (each new
 * token costs O(length), not O(length^2)); appends the new keys and values.
 * Returns logits [B, T', V]. No grad (inference): dropout is off whatever
 * the model's mode, which is not changed. */
AMP_API amp_tensor *amp_gpt_forward_cached(amp_module *m, amp_tensor *idx, amp_gpt_cache *c);

typedef struct {
    int64_t max_new_tokens;
    double temperature;  /* 0: greedy (argmax); else logits / temperature */
    int64_t top_k;       /* 0: all tokens; else sample among the k largest */
    amp_generator *generator; /* sampling (NULL: the default generator) */
    bool use_kv_cache;   /* false: every token recomputes its whole context (the reference) */
    int64_t stop_token;  /* stop after generating it (-1: none) */
} amp_gpt_generate_opts;
#define AMP_GPT_GENERATE_DEFAULTS ((amp_gpt_generate_opts){100, 1.0, 0, NULL, true, -1})

/* Continues the prompt (n tokens, n >= 1) by up to max_new_tokens tokens
 * into out (capacity >= max_new_tokens); *n_out receives the count. The
 * model runs in eval semantics (dropout off) without its training flag
 * being written (an eval scope, amp_module_eval_begin), under the caller's
 * autocast state: threads sharing one
 * model may generate at once (docs/threads.md), each with its own
 * generator for reproducible text. Context: the last block_size tokens. When the
 * cache is full, its newest block_size / 2 positions are kept by
 * re-encoding those tokens from position 0 (one forward of block_size / 2
 * tokens), so every token sees at least block_size / 2 tokens of context;
 * the uncached path applies the same windows (and so gives the same
 * tokens). Sampling: softmax of logits / temperature over the top_k
 * largest, one uniform draw per token from the generator (counter-based:
 * the same seed gives the same text); the logits are scaled as
 * (logit - max) / temperature, which cannot overflow, so a temperature so
 * small that the quotient does (1e-310) gives the greedy token, the limit
 * of temperature -> 0. Non-finite values are refused (AMP_ERR_RANGE, *n_out
 * the tokens made so far): before the first step a parameter that is not
 * finite, named with the element (one pass over the weights per call; an
 * f16 model holds inf where a weight exceeded 65504 when it was
 * converted), and at each step logits that are not finite, naming the step
 * and the weights' and autocast dtypes. */
AMP_API amp_status amp_gpt_generate(amp_module *m, const int64_t *prompt, int64_t n, int64_t *out, int64_t *n_out,
                            const amp_gpt_generate_opts *o);

#ifdef __cplusplus
}
#endif
#endif
