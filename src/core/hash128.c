/* The 128-bit content digest (hash128.h): two 64-bit lanes, each taking one
 * 8-byte word of every 16-byte block through a multiply and a rotation and
 * feeding the other lane, so a change anywhere reaches both; the tail is
 * padded with zeros, the length mixed in at the end, and each lane passed
 * through amp__mix64 with the other. */
#include "core/hash128.h"

#include <string.h>

#define K0 0x9e3779b97f4a7c15ULL
#define K1 0xbf58476d1ce4e5b9ULL
#define K2 0x94d049bb133111ebULL

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t load64(const unsigned char *p) { /* little-endian, whatever the host */
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static void block(uint64_t h[2], const unsigned char *p) {
    uint64_t a = load64(p) * K1, b = load64(p + 8) * K2;
    h[0] = (rotl(h[0] ^ rotl(a, 31), 27) + h[1]) * K0 + 0x52dce729;
    h[1] = (rotl(h[1] ^ rotl(b, 33), 31) + h[0]) * K0 + 0x38495ab5;
}

void amp__hash128_init(amp__hash128 *s) {
    memset(s, 0, sizeof *s);
    s->h[0] = K1;
    s->h[1] = K2;
}

void amp__hash128_update(amp__hash128 *s, const void *data, size_t n) {
    const unsigned char *p = data;
    s->len += n;
    if (s->nbuf) {
        size_t take = 16 - s->nbuf < n ? 16 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf < 16) return;
        block(s->h, s->buf);
        s->nbuf = 0;
    }
    for (; n >= 16; p += 16, n -= 16) block(s->h, p);
    memcpy(s->buf, p, n);
    s->nbuf = n;
}

void amp__hash128_final(const amp__hash128 *s, uint64_t out[2]) {
    uint64_t h[2] = {s->h[0], s->h[1]};
    unsigned char tail[16] = {0};
    memcpy(tail, s->buf, s->nbuf);
    block(h, tail);
    h[0] ^= s->len;
    h[1] ^= rotl(s->len, 32) * K0;
    out[0] = amp__mix64(h[0] + h[1]);
    out[1] = amp__mix64(h[1] + out[0]);
}
