/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11): a counter-based generator. The output for (key, counter) depends on
 * nothing else, so any element of a random stream can be computed by any
 * thread: results never depend on the thread count. */
#ifndef AMP_NUMERIC_PHILOX_H
#define AMP_NUMERIC_PHILOX_H

#include <stdint.h>

#include "core/hd.h"

typedef struct {
    uint32_t v[4];
} amp_philox_u32x4;

AMP_HD uint32_t amp_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* 10 rounds of Philox4x32 on a 128-bit counter with a 64-bit key. */
AMP_HD amp_philox_u32x4 amp_philox4x32(uint64_t key, uint64_t ctr_lo, uint64_t ctr_hi) {
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    uint32_t c0 = (uint32_t)ctr_lo, c1 = (uint32_t)(ctr_lo >> 32);
    uint32_t c2 = (uint32_t)ctr_hi, c3 = (uint32_t)(ctr_hi >> 32);
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = amp_philox_mulhilo(0xD2511F53u, c0, &hi0);
        uint32_t lo1 = amp_philox_mulhilo(0xCD9E8D57u, c2, &hi1);
        uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    amp_philox_u32x4 out = {{c0, c1, c2, c3}};
    return out;
}

/* One 32-bit random word for element i of stream (seed, counter): four
 * consecutive elements share one Philox block. */
AMP_HD uint32_t amp_philox_u32_at(uint64_t seed, uint64_t index) {
    amp_philox_u32x4 r = amp_philox4x32(seed, index >> 2, 0);
    return r.v[index & 3];
}

/* Uniform in [0,1) with 24 random bits. */
AMP_HD float amp_philox_uniform(uint32_t bits) { return (float)(bits >> 8) * (1.0f / 16777216.0f); }

#endif
