/* Internal: a 128-bit content digest for keys that must change whenever the
 * content does (the token cache's key: the text and the tokenizer's files).
 * Not cryptographic: it guards against accidental reuse (two different
 * inputs colliding by chance has probability about 2^-128), not against an
 * adversary forging a collision. Streaming: update may be called with any
 * split of the input and gives the same digest. */
#ifndef AMP_CORE_HASH128_H
#define AMP_CORE_HASH128_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t h[2];
    uint64_t len;
    unsigned char buf[16];
    size_t nbuf;
} amp__hash128;

/* A 64-bit finalizer: every input bit affects every output bit. */
static inline uint64_t amp__mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

void amp__hash128_init(amp__hash128 *s);
void amp__hash128_update(amp__hash128 *s, const void *p, size_t n);
/* The digest of everything passed to update; s may be updated further. */
void amp__hash128_final(const amp__hash128 *s, uint64_t out[2]);

#endif
