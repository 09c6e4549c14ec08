/* Internal: what the library knows of a tokenizer beyond amp/text.h. */
#ifndef AMP_IO_TOKENIZER_IMPL_H
#define AMP_IO_TOKENIZER_IMPL_H

#include <stdint.h>

#include "amp/text.h"

/* A 128-bit digest of everything that decides the tokens (the kind; for
 * GPT-2 the bytes of encoder.json and vocab.bpe): two tokenizers with the
 * same digest encode every text alike. The token cache's key. */
void amp__tokenizer_digest(const amp_tokenizer *t, uint64_t out[2]);

#endif
