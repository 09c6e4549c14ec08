/* Internal: llama.cpp's block formats (ggml-common.h's layouts, byte for
 * byte), the quantized matrix behind amp_qtensor, and the reference
 * quantize/dequantize of one row (numeric/quant.c). Scales are IEEE
 * binary16 bit patterns, little-endian as in the files. */
#ifndef AMP_NUMERIC_QUANT_IMPL_H
#define AMP_NUMERIC_QUANT_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "amp/quant.h"

#define AMP_QK 32    /* values per q8_0/q4_0/q4_1 block */
#define AMP_QK_K 256 /* values per k-quant super-block */

typedef struct { uint16_t d; int8_t qs[AMP_QK]; } amp_block_q8_0;            /* x = d q */
typedef struct { uint16_t d; uint8_t qs[AMP_QK / 2]; } amp_block_q4_0;       /* x = d (q - 8) */
typedef struct { uint16_t d, m; uint8_t qs[AMP_QK / 2]; } amp_block_q4_1;    /* x = d q + m */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[AMP_QK_K / 2]; } amp_block_q4_k;
typedef struct { uint8_t ql[AMP_QK_K / 2]; uint8_t qh[AMP_QK_K / 4]; int8_t scales[AMP_QK_K / 16]; uint16_t d; } amp_block_q6_k;
/* The activation block of the integer kernels (ggml's block_q8_1 in f32):
 * x ~ d q, s = d * sum(q) (for q4_1's min term). */
typedef struct { float d, s; int8_t qs[AMP_QK]; } amp_block_q8_1f;

_Static_assert(sizeof(amp_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(amp_block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(amp_block_q4_1) == 20, "q4_1 block is 20 bytes");
_Static_assert(sizeof(amp_block_q4_k) == 144, "q4_k block is 144 bytes");
_Static_assert(sizeof(amp_block_q6_k) == 210, "q6_k block is 210 bytes");

struct amp_qtensor {
    amp_qtype type;
    int64_t rows, cols;
    const void *data;
    size_t nbytes, row_bytes;
    void (*release)(void *owner);
    void *owner;
    atomic_int refs;
};

/* Bytes of one row of cols values (cols a multiple of the block). */
static inline size_t amp__qrow_bytes(amp_qtype t, int64_t cols) {
    return (size_t)(cols / amp_qtype_block_elems(t)) * amp_qtype_block_bytes(t);
}
/* ggml's quantize_row_<t>_ref: k values (k % 32 == 0) into k/32 blocks;
 * q8_0, q4_0, q4_1 only; x finite. */
void amp__quantize_row_ref(amp_qtype t, const float *x, void *y, int64_t k);
/* ggml's dequantize_row_<t>: every qtype, k a multiple of its block. */
void amp__dequantize_row(amp_qtype t, const void *x, float *y, int64_t k);

#endif
