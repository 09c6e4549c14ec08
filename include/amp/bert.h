/* amp/bert.h — BERT encoders from Hugging Face model directories, and
 * sentence embeddings (sentence-transformers: mean pooling over the
 * attention mask, then L2 normalisation), e.g. all-MiniLM-L6-v2.
 *
 * The model is an ordinary module (amp/nn.h) whose state_dict names are
 * Hugging Face's BertModel names ("embeddings.word_embeddings.weight",
 * "encoder.layer.0.attention.self.query.weight", ...): post-LN blocks,
 * GELU (erf), attention through amp_scaled_dot_product_attention_ex with a
 * u8 key mask for padding. The pooler is not loaded (sentence embeddings do
 * not use it).
 *
 * The three dtypes (docs/pretrained.md): the file's (saved), the load dtype
 * (amp_bert_load_opts.load_dtype: keep = the file's, f32, f16, bf16 stores
 * every parameter in that dtype as torch_dtype= does; q8_0/q4_0/q4_1 keep
 * the linear layers' weights and the token embedding quantized
 * (amp_quantize of the f32 weights; amp_qlinear / amp_qembedding), norms,
 * biases and the position/type embeddings f32), and the compute precision:
 * the caller's autocast region (none: fp32 or the load dtype; fp16 / bf16
 * autocast as in training). */
#ifndef AMP_BERT_H
#define AMP_BERT_H

#include "amp/pretrained.h"
#include "amp/quant.h"
#include "amp/text.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    amp_load_dtype load_dtype; /* AMP_LOAD_DTYPE_KEEP: the file's */
} amp_bert_load_opts;
#define AMP_BERT_LOAD_DEFAULTS ((amp_bert_load_opts){AMP_LOAD_DTYPE_KEEP})

typedef struct {
    int64_t vocab_size, hidden_size, num_layers, num_heads, intermediate_size, max_position, type_vocab_size;
    double layer_norm_eps;
    amp_gelu_approx act;    /* hidden_act "gelu": AMP_GELU_NONE (erf); "gelu_new"/"gelu_pytorch_tanh": tanh */
    int64_t max_seq_length; /* sentence_bert_config.json's max_seq_length, else max_position */
    int64_t pad_id;         /* config's pad_token_id (0 when absent) */
    amp_load_dtype load_dtype; /* what it was loaded in (keep resolved to the file's dtype) */
} amp_bert_config;

/* Loads config.json (model_type "bert"), the weights (every shape checked
 * against the config before anything is allocated; names with or without
 * the "bert." prefix of BertFor* checkpoints) and sentence_bert_config.json
 * when present. o NULL: AMP_BERT_LOAD_DEFAULTS. The module is in eval mode. */
AMP_API amp_module *amp_bert_from_pretrained(const char *dir, const amp_bert_load_opts *o);
AMP_API amp_status amp_bert_get_config(const amp_module *m, amp_bert_config *out);
/* Last hidden state [B, T, hidden] of ids [B, T] (i64/i32); token_types
 * [B, T] (i64/i32, NULL: all 0); attn_mask [B, T] of 0/1 (u8, i32, i64; NULL:
 * every token counts). Float dtype: f32 from layer norm under autocast,
 * else the parameters'. */
AMP_API amp_tensor *amp_bert_forward(amp_module *m, amp_tensor *ids, amp_tensor *token_types, amp_tensor *attn_mask);

typedef struct {
    int64_t max_seq_length; /* tokens per text, [CLS] and [SEP] included; 0: the model's (256 for MiniLM) */
    int64_t batch_size;     /* texts per forward (sorted by length, padded to the longest); 0: 32 */
    bool normalize;         /* L2-normalise (sentence-transformers' Normalize) */
} amp_embed_opts;
#define AMP_EMBED_DEFAULTS ((amp_embed_opts){0, 32, true})

/* Sentence embeddings of n texts: *out a new f32 tensor [n, hidden] (row i
 * is texts[i]'s), computed in eval mode without autograd, in the caller's
 * autocast region. t: the model's tokenizer (amp_bert_tokenizer). */
AMP_API amp_status amp_bert_embed(amp_module *m, const amp_tokenizer *t, const char *const *texts, int n,
                                  const amp_embed_opts *o, amp_tensor **out);
/* The same from token ids ([CLS] ... [SEP] already added): ids[i] holds
 * lens[i] ids; sequences longer than max_seq_length are cut to it (the last
 * kept id replaced by the [SEP] id when the sequence ended with it, as the
 * tokenizer truncates). */
AMP_API amp_status amp_bert_embed_ids(amp_module *m, const int32_t *const *ids, const int64_t *lens, int n,
                                      const amp_embed_opts *o, amp_tensor **out);
/* The WordPiece tokenizer of a model directory: tokenizer.json when
 * present, else vocab.txt (lowercasing from tokenizer_config.json's
 * do_lower_case). */
AMP_API amp_tokenizer *amp_bert_tokenizer(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
