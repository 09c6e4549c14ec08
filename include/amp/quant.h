/* amp/quant.h — quantized weights (llama.cpp's block formats) and the
 * weight-only quantized linear.
 *
 * Block formats, byte for byte ggml's (ggml-common.h), so a GGUF file's
 * tensors are used without conversion and a matrix amp quantizes holds the
 * bytes llama.cpp's quantize_row_*_ref would write:
 *   q8_0  32 values, 34 B: f16 scale d, 32 int8 q;            x = d q
 *   q4_0  32 values, 18 B: f16 d, 16 B of nibbles;            x = d (q - 8)
 *   q4_1  32 values, 20 B: f16 d, f16 min m, 16 B of nibbles; x = d q + m
 *         (nibbles: byte j holds value j in its low half and value j + 16 in
 *         its high half)
 *   q4_k 256 values, 144 B and q6_k 256 values, 210 B: ggml's k-quants
 *         (dequantize only; quantize is AMP_ERR_UNSUPPORTED).
 *
 * The three dtypes of a model (the dtype it is saved in, loaded in and
 * computes in): amp_load_dtype is the second; the compute precision is the
 * autocast region's (amp/autocast.h). */
#ifndef AMP_QUANT_H
#define AMP_QUANT_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { AMP_Q8_0 = 0, AMP_Q4_0, AMP_Q4_1, AMP_Q4_K, AMP_Q6_K, AMP_QTYPE_COUNT } amp_qtype;
AMP_API const char *amp_qtype_name(amp_qtype t);              /* "q8_0" "q4_0" "q4_1" "q4_k" "q6_k" */
AMP_API amp_status amp_qtype_parse(const char *s, amp_qtype *out); /* case-insensitive, also "Q4_K"... */
AMP_API int64_t amp_qtype_block_elems(amp_qtype t);           /* 32, 32, 32, 256, 256 */
AMP_API size_t amp_qtype_block_bytes(amp_qtype t);            /* 34, 18, 20, 144, 210 (ggml's layouts exactly) */
/* ggml's GGML_TYPE_* number of a qtype (8, 2, 3, 12, 14) and back: the GGUF reader maps with these. */
AMP_API uint32_t amp_qtype_ggml_id(amp_qtype t);
AMP_API amp_status amp_qtype_from_ggml_id(uint32_t id, amp_qtype *out);

/* A quantized matrix [rows, cols], row-major, each row a run of blocks along cols (ggml's layout:
 * cols % block_elems == 0). Read-only, reference counted. */
typedef struct amp_qtensor amp_qtensor;
/* Wraps blocks without copying (e.g. an mmap'ed GGUF file); release(owner) is called when the last
 * reference goes (release may be NULL). nbytes must equal rows * cols / block_elems * block_bytes. */
AMP_API amp_qtensor *amp_qtensor_wrap(amp_qtype t, int64_t rows, int64_t cols, const void *blocks, size_t nbytes,
                                      void (*release)(void *owner), void *owner);
AMP_API amp_qtensor *amp_qtensor_retain(amp_qtensor *q);
AMP_API void amp_qtensor_free(amp_qtensor *q);                /* drops one reference; NULL ok */
AMP_API amp_qtype amp_qtensor_type(const amp_qtensor *q);
AMP_API int64_t amp_qtensor_rows(const amp_qtensor *q);
AMP_API int64_t amp_qtensor_cols(const amp_qtensor *q);
AMP_API size_t amp_qtensor_nbytes(const amp_qtensor *q);
AMP_API const void *amp_qtensor_data(const amp_qtensor *q);
/* 2-D f32/f16/bf16 (CPU) -> blocks, llama.cpp's reference rounding (ggml's quantize_row_*_ref) so a
 * file amp quantizes holds the bytes llama.cpp's would. Q4_K/Q6_K quantize may be AMP_ERR_UNSUPPORTED. */
AMP_API amp_qtensor *amp_quantize(amp_tensor *w, amp_qtype t);
/* -> a new [rows, cols] tensor of dt (f32, f16 or bf16), every qtype. */
AMP_API amp_tensor *amp_dequantize(const amp_qtensor *q, amp_dtype dt);
/* Weight-only quantized linear: y = x · Wᵀ + b with W the qtensor [out=rows, in=cols]; x [..., cols]
 * f32/f16/bf16, b [rows] or NULL. llama.cpp's scheme: x quantized to 8-bit blocks, integer dot
 * products, f32 accumulation. Output f32 (or the autocast dtype inside an autocast region): as linear,
 * the output has x's dtype after autocast (an f16/bf16 x outside a region gives f16/bf16).
 * Autograd: x (and b) get gradients through the dequantized W (dx = dy · W); W never does. */
AMP_API amp_tensor *amp_qlinear(amp_tensor *x, const amp_qtensor *w, amp_tensor *b);
/* Rows of W gathered by idx (i64/i32, any shape) -> [..., cols] in dt (f32/f16/bf16): a quantized
 * embedding table (the tied token embedding of GGUF files). No gradient. */
AMP_API amp_tensor *amp_qembedding(const amp_qtensor *w, amp_tensor *idx, amp_dtype dt);

/* The dtype a model is LOADED in (the seeds' three dtypes: saved / loaded / computed in).
 * keep: the file's own (F32 stays f32, Q4_1 stays q4_1, ...); float: dtype; quantized: qtype. */
typedef enum { AMP_LOAD_KEEP = 0, AMP_LOAD_FLOAT = 1, AMP_LOAD_QUANT = 2 } amp_load_kind;
typedef struct { amp_load_kind kind; amp_dtype dtype; amp_qtype qtype; } amp_load_dtype;
#define AMP_LOAD_DTYPE_KEEP ((amp_load_dtype){AMP_LOAD_KEEP, AMP_F32, AMP_Q8_0})
/* "keep" | "f32" "f16" "bf16" (any amp_dtype_parse spelling of those three) | "q8_0" "q4_0" "q4_1" */
AMP_API amp_status amp_load_dtype_parse(const char *s, amp_load_dtype *out);
AMP_API const char *amp_load_dtype_name(amp_load_dtype d);   /* "keep", "f32", ..., "q4_1" */

#ifdef __cplusplus
}
#endif

#endif
