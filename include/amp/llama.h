/* amp/llama.h — a Llama decoder (Llama 2/3, SmolLM2, TinyLlama...) as an
 * ordinary module over the public API, loaded from a GGUF file or a
 * Hugging Face model directory in the dtype you choose, with a KV cache and
 * text generation.
 *
 * The model (Hugging Face's LlamaForCausalLM, whose module tree and
 * parameter names it has: model.embed_tokens, model.layers.N.self_attn.
 * {q,k,v,o}_proj, model.layers.N.mlp.{gate,up,down}_proj,
 * model.layers.N.{input,post_attention}_layernorm, model.norm, lm_head):
 *   x = embed_tokens(idx)
 *   per layer:  h = x + o_proj(attn(rope(q_proj(n1(x))), rope(k_proj(n1(x))), v_proj(n1(x))))
 *               x = h + down_proj(silu(gate_proj(n2(h))) * up_proj(n2(h)))
 *   logits = lm_head(norm(x))
 * n1, n2, norm: RMSNorm (eps from the file); attention: causal, grouped-query
 * (n_head query heads read n_head_kv key/value heads, head h reads kv head
 * h / (n_head / n_head_kv)), no biases; RoPE with base rope_theta on every
 * head dimension, in the layout the weights were written for: GGUF files
 * (llama.cpp's converter permuted Q and K) rotate adjacent pairs
 * (x[2i], x[2i+1]), Hugging Face files rotate halves (x[i], x[i + D/2]).
 * lm_head is tied to embed_tokens when the file has no separate head.
 *
 * The three dtypes (saved / loaded / computed in):
 *  - saved: the file's (a GGUF's Q4_1 matrices and Q8_0 embedding, F32 norms);
 *  - loaded: amp_load_dtype (amp/quant.h): keep the file's types (quantized
 *    matrices stay quantized over the mmap'ed file, no copy), f32/f16/bf16
 *    (dequantized once at load), or q8_0/q4_0/q4_1 (quantized from the
 *    dequantized values; a matrix already of that type keeps its bytes).
 *    Norm weights are always f32. A quantized linear is amp_qlinear, a
 *    quantized embedding amp_qembedding;
 *  - computed in: the residual stream has the embedding's output dtype (f32
 *    for f32 and quantized loads; f16/bf16 for a half load, with f32 norm
 *    statistics), and an autocast region around the forward (the caller's)
 *    runs the matrix products in its dtype, as for training.
 */
#ifndef AMP_LLAMA_H
#define AMP_LLAMA_H

#include "amp/gguf.h"
#include "amp/nn.h"
#include "amp/quant.h"
#include "amp/text.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t n_layer, n_embd, n_ff, n_head, n_head_kv, vocab_size;
    int64_t context_length; /* positions the model was trained for (the KV cache's largest capacity) */
    double rope_theta, rms_eps;
    amp_rope_layout rope_layout; /* AMP_ROPE_INTERLEAVED (GGUF) or AMP_ROPE_HALVES (Hugging Face) */
    bool tied;                   /* lm_head is embed_tokens */
} amp_llama_config;

/* A Llama of configuration c with random weights N(0, 0.02), norms 1, in
 * f32 (tests, training from scratch). Sizes: every count >= 1, n_embd =
 * n_head * head_dim with head_dim even, n_head % n_head_kv == 0,
 * rope_theta > 0, rms_eps in (0, 1); g NULL: the default generator. */
AMP_API amp_module *amp_llama_new(const amp_llama_config *c, amp_generator *g);

/* The configuration a GGUF file describes (general.architecture "llama",
 * the llama.* keys), every value and every tensor's type and shape checked
 * against it, before anything is allocated: the error names the key or the
 * tensor and the sizes. */
AMP_API amp_status amp_llama_config_from_gguf(const amp_gguf *f, amp_llama_config *out);
/* A Llama from a GGUF file (llama.cpp's tensor names: token_embd,
 * blk.N.attn_{norm,q,k,v,output}, blk.N.ffn_{norm,gate,up,down},
 * output_norm, output (absent: tied)) in load dtype ld. The file's
 * tokenizer comes with it (amp_llama_tokenizer). */
AMP_API amp_module *amp_llama_from_gguf(const char *path, amp_load_dtype ld);
/* A Llama from a Hugging Face model directory (config.json with
 * model_type "llama", model.safetensors or its shards) in load dtype ld. */
AMP_API amp_module *amp_llama_from_pretrained(const char *dir, amp_load_dtype ld);
AMP_API amp_status amp_llama_get_config(const amp_module *m, amp_llama_config *out);
/* The dtype the model was loaded in, and the bytes of its weights (what
 * one decode step reads: matrices, embedding rows aside, and norms). */
AMP_API amp_load_dtype amp_llama_load_dtype(const amp_module *m);
AMP_API int64_t amp_llama_weight_bytes(const amp_module *m);
/* The model's tokenizer (a GGUF file's: amp_tokenizer_from_gguf); borrowed:
 * valid while the model lives. NULL with an error when the model has none
 * (amp_llama_new, a Hugging Face directory: its tokenizer.json is a BPE
 * amp_tokenizer_from_hf_json does not read). */
AMP_API const amp_tokenizer *amp_llama_tokenizer(const amp_module *m);
/* The chat template the file carries (GGUF tokenizer.chat_template), or
 * NULL (no error) when it has none; valid while the model lives. */
AMP_API const char *amp_llama_chat_template(const amp_module *m);
/* The default stop tokens (amp_llama_generate_opts): *ids (valid while the
 * model lives) and their count (-1 with an error for a bad model). */
AMP_API int amp_llama_stop_tokens(const amp_module *m, const int64_t **ids);

/* ---- the KV cache ------------------------------------------------------------
 * Per layer the keys and values [batch, n_head_kv, capacity, head_dim] of
 * the positions seen so far (after RoPE), in the dtype of the first forward
 * that fills them (the compute dtype). capacity 0: the model's
 * context_length; at most context_length. Memory is allocated at the first
 * forward. */
typedef struct amp_llama_cache amp_llama_cache;
AMP_API amp_llama_cache *amp_llama_cache_new(amp_module *m, int64_t batch, int64_t capacity);
AMP_API void amp_llama_cache_free(amp_llama_cache *c);
AMP_API void amp_llama_cache_reset(amp_llama_cache *c);
AMP_API int64_t amp_llama_cache_length(const amp_llama_cache *c);   /* positions held */
AMP_API int64_t amp_llama_cache_capacity(const amp_llama_cache *c);

/* Logits [B, T, V] of idx (i64/i32 [B, T], tokens < vocab_size). c NULL:
 * the full forward of positions 0 .. T-1 (autograd as any module: it can be
 * trained; amp_module_forward does the same). With a cache: positions
 * length .. length + T - 1 attending to the cached ones, appended to the
 * cache; no grad, eval semantics. */
AMP_API amp_tensor *amp_llama_forward(amp_module *m, amp_tensor *idx, amp_llama_cache *c);
/* The same with the head applied to the last position only: [B, 1, V]
 * (prefill without the [T, V] product of every other position). */
AMP_API amp_tensor *amp_llama_forward_last(amp_module *m, amp_tensor *idx, amp_llama_cache *c);

/* ---- generation ------------------------------------------------------------------ */
typedef struct {
    double prefill_s, decode_s;      /* seconds: the prompt's forward; the steps after it */
    int64_t prefill_tokens, decode_tokens;
} amp_llama_gen_stats;

typedef struct {
    int64_t max_new_tokens;
    double temperature;  /* 0: greedy (argmax) */
    int64_t top_k;       /* 0: all tokens */
    double top_p;        /* nucleus: the smallest set of most likely tokens whose probability reaches top_p; 1: all */
    amp_generator *generator; /* sampling (NULL: the default generator) */
    /* Stop after generating one of these (the token is kept in out). NULL and
     * n_stop 0: the model's end-of-sequence tokens (eos, and <|im_end|> /
     * <|eot_id|> / <|end_of_text|> where the vocabulary has them); n_stop < 0:
     * never stop early. */
    const int64_t *stop_tokens;
    int n_stop;
    /* Called after each new token (streaming); returning false stops. May be NULL. */
    bool (*on_token)(void *user, int64_t token);
    void *user;
    bool use_kv_cache;   /* false: every token recomputes its whole context (the reference) */
    amp_llama_gen_stats *stats; /* filled when not NULL */
} amp_llama_generate_opts;
#define AMP_LLAMA_GENERATE_DEFAULTS ((amp_llama_generate_opts){128, 0.0, 0, 1.0, NULL, NULL, 0, NULL, NULL, true, NULL})

/* Continues the prompt (n >= 1 tokens) by up to max_new_tokens tokens into
 * out (capacity >= max_new_tokens); *n_out receives the count. Eval
 * semantics, no grad, under the caller's autocast state (threads may share
 * the model, each with its own generator). Sampling: logits / temperature,
 * then the top_k largest, then the nucleus of top_p (Hugging Face's order),
 * one uniform draw per token from the generator. Stops at a stop token, when
 * on_token returns false, or at the context length (prompt + new tokens <=
 * context_length: more is an error before step 1). Logits that are not
 * finite are an error naming the step (AMP_ERR_RANGE, *n_out the tokens
 * made so far). */
AMP_API amp_status amp_llama_generate(amp_module *m, const int64_t *prompt, int64_t n, int64_t *out, int64_t *n_out,
                                      const amp_llama_generate_opts *o);

#ifdef __cplusplus
}
#endif
#endif
