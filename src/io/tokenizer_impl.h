/* Internal: what the library knows of a tokenizer beyond amp/text.h, shared
 * by the files of src/io/tokenizer*.c (tokenizer.c: the common parts, byte
 * and byte-level BPE (GPT-2's files, or arrays); tokenizer_wordpiece.c: BERT;
 * tokenizer_bpe.c: a GGUF file's BPE; tokenizer_chat.c: chat templates). */
#ifndef AMP_IO_TOKENIZER_IMPL_H
#define AMP_IO_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/text.h"

#define TOK_BYTE 0
#define TOK_GPT2 1
#define TOK_WORDPIECE 2

/* byte-level BPE pre-tokenizers (GGUF tokenizer.ggml.pre) */
enum { AMP__PRE_GPT2 = 0, AMP__PRE_SMOLLM, AMP__PRE_LLAMA3 };

typedef struct {
    uint64_t key; /* (a << 32 | b) + 1; 0 = empty */
    int32_t rank, merged;
} pair_slot;

typedef struct {
    const char *s; /* into the token arena */
    uint32_t len;
    int32_t id;    /* -1 = empty */
} str_slot;

struct amp_tokenizer {
    int kind;
    int64_t vocab;
    int32_t eot;
    uint64_t digest[2]; /* of the kind and the files' bytes (amp__tokenizer_digest) */
    /* token strings (gpt2, wordpiece) */
    char *arena;
    size_t arena_len;
    uint32_t *off, *len; /* token id -> bytes in arena */
    str_slot *strs;      /* bytes -> id */
    size_t nstr_cap;
    /* byte-level BPE */
    const char *name;    /* "gpt2", "bpe" */
    int pre;             /* AMP__PRE_* */
    bool ignore_merges;  /* a pre-token that is a token is not merged (Llama 3) */
    bool add_bos, add_eos;
    int32_t byte_id[256]; /* -1: the byte has no token (dropped) */
    pair_slot *pairs;
    size_t npair_cap;
    /* special tokens: bos, eos, ... (amp_tok_special order; -1 none) */
    int32_t special[AMP_TOK_MASK + 1];
    /* added tokens: their text in the input becomes their id (encode_ex's parse_special), longest first */
    int32_t *added;
    size_t nadded;
    bool any_always;
    unsigned char *added_always; /* per added token: matched without parse_special too (GGUF USER_DEFINED) */
    unsigned char added_first[32]; /* bitmap of their first bytes */
    /* wordpiece */
    bool wp_clean, wp_lower, wp_strip, wp_cjk;
    int32_t wp_max_chars; /* longer words are [UNK] */
    char wp_prefix[16];   /* continuation prefix, "##" */
    size_t wp_prefix_len;
};

/* A 128-bit digest of everything that decides the tokens (the kind; for
 * GPT-2 the bytes of encoder.json and vocab.bpe): two tokenizers with the
 * same digest encode every text alike. The token cache's key. */
void amp__tokenizer_digest(const amp_tokenizer *t, uint64_t out[2]);
/* Sets t->digest from the kind and two byte strings (each length-prefixed). */
void amp__tok_digest_of(amp_tokenizer *t, const void *a, size_t na, const void *b, size_t nb);

/* A tokenizer of kind with room for vocab tokens of arena_bytes bytes in all
 * (token table, string hash, specials -1); NULL with the error naming fn. */
amp_tokenizer *amp__tok_new(const char *fn, int kind, int64_t vocab, size_t arena_bytes);
/* Token id gets the bytes s[0:n] (copied to the arena, added to the hash);
 * false if those bytes are already a token. */
bool amp__tok_set(amp_tokenizer *t, int32_t id, const char *s, size_t n);
/* Id of the token with bytes s[0:n], or -1. */
int32_t amp__tok_find(const amp_tokenizer *t, const char *s, size_t n);
/* Registers the added tokens (ids, any order: sorted longest first here); false: out of memory. */
bool amp__tok_set_added(amp_tokenizer *t, const int32_t *ids, size_t n);
/* The same, each with a flag: matched even without parse_special. */
bool amp__tok_set_added_always(amp_tokenizer *t, const int32_t *ids, const unsigned char *always, size_t n);

/* A byte-level BPE vocabulary (GPT-2's files, a GGUF file's arrays). Token
 * strings are in GPT-2's byte-to-unicode alphabet except those of type
 * CONTROL (3), USER_DEFINED (4) and UNKNOWN (2), which are raw text and
 * become added tokens (CONTROL and UNKNOWN matched with parse_special,
 * USER_DEFINED always, as llama.cpp). Merges are "a b" (one space), highest
 * priority first; each must name two tokens whose concatenation is a token. */
typedef struct {
    const char *s;
    size_t n;
} amp__str;
typedef struct {
    const amp__str *tokens;
    int64_t ntokens;
    const int32_t *types;   /* GGUF token types (1 normal ... 6 byte); NULL: all normal */
    const amp__str *merges;
    int64_t nmerges;
    const int64_t *merge_line; /* for messages: the line of each merge in its file; NULL: "merge i" */
    const char *tokens_src, *merges_src; /* names in messages */
    const char *pre;        /* "gpt2", "smollm", "llama3", "llama-bpe", ... */
    int64_t special[AMP_TOK_MASK + 1]; /* -1: none */
    bool add_bos, add_eos;
    bool all_bytes; /* every byte must be a token (GPT-2); else a byte without one is dropped, as llama.cpp
                     * and Hugging Face do (SmolLM2 lacks 21 of them: 0x04, 0xc0, 0xff, ...) */
} amp__bpe_spec;
amp_tokenizer *amp__tokenizer_bpe(const char *fn, const amp__bpe_spec *sp);

/* Decodes one UTF-8 sequence at s[i] (n bytes total): code point and length.
 * Invalid or truncated sequences, overlongs and surrogates give one byte
 * with code point 0x110000 + byte. */
uint32_t amp__utf8_next(const unsigned char *s, size_t n, size_t i, int *len);
/* Appends the UTF-8 of code point c (< 0x110000) to out; returns its length. */
int amp__utf8_put(uint32_t c, char *out);
bool amp__in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c);

typedef struct {
    int32_t *v;
    size_t n, cap;
} amp__ivec;
bool amp__ivec_push(amp__ivec *a, int32_t x);

/* WordPiece (tokenizer_wordpiece.c): the ids of text s[0:n] (no added tokens in it) appended to out. */
amp_status amp__wordpiece_encode(const char *fn, const amp_tokenizer *t, const unsigned char *s, size_t n,
                                 amp__ivec *out);
/* WordPiece decode: tokens joined as Hugging Face's WordPiece decoder (cleanup on). */
amp_status amp__wordpiece_decode(const char *fn, const amp_tokenizer *t, const int32_t *ids, size_t count,
                                 char **text, size_t *n);

#endif
