/* Convolution helpers for conv1d/conv2d (NCHW): im2col and col2im. The matrix products themselves go through amp_gemm
 * (backend_cpu_conv.c, the CPU backend's conv entries).
 *
 * Geometry of one image: C channels of H x W, kernel kh x kw, padding ph/pw,
 * stride sh/sw, dilation dh/dw, output OH x OW. The column matrix of one
 * image is [C*kh*kw, OH*OW], row (c*kh + i)*kw + j, column oh*OW + ow:
 *   col[row, col] = x[c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]  (0 outside). */
#ifndef AMP_KERNELS_CPU_CONV_H
#define AMP_KERNELS_CPU_CONV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t C, H, W;    /* input channels (all, or one group's) and size */
    int64_t kh, kw;
    int64_t sh, sw, ph, pw, dh, dw;
    int64_t OH, OW;
} amp_conv_geom;

/* One image: x [C,H,W] -> col [C*kh*kw, OH*OW] with row stride ldcol
 * elements (>= OH*OW; larger to place several images side by side). esize
 * is the element size in bytes (4 for f32, 2 for f16/bf16 stored as bits:
 * the copy is exact and zero is all-zero bits in every format). */
void amp_im2col(const void *x, void *col, int64_t ldcol, const amp_conv_geom *g, int esize);
/* One image: dx [C,H,W] += col2im(col), f32. */
void amp_col2im_f32(const float *col, float *dx, const amp_conv_geom *g);

/* The per-path forms behind those two (the dispatch, in
 * backend_cpu_conv.c): the plain loops (conv_scalar.c), and AVX-512
 * versions for stride 1 with the output as wide as the input (sh = sw = dw
 * = 1, OW = W: "same" convolutions, conv_avx512.c), the same bits, false
 * (nothing done) for other geometries. amp_im2col and amp_col2im_f32 call
 * the AVX-512 ones on the AVX-512 paths, else the plain ones. */
void amp_im2col_scalar(const void *x, void *col, int64_t ldcol, const amp_conv_geom *g, int esize);
void amp_col2im_f32_scalar(const float *col, float *dx, const amp_conv_geom *g);
bool amp_im2col_avx512(const void *x, void *col, int64_t ldcol, const amp_conv_geom *g, int esize);
bool amp_col2im_f32_avx512(const float *col, float *dx, const amp_conv_geom *g);

/* Bytes of column buffer per block of images in conv forward/backward
 * (default 2 MiB; at least one image per block). For tests of the blocking;
 * returns the previous value. Implemented in backend_cpu_conv.c. */
size_t amp__conv_set_block_bytes(size_t bytes);

/* Reference loops, kept for tests: the same results from a naive loop. */
void amp_im2col_reference(const void *x, void *col, int64_t ldcol, const amp_conv_geom *g, int esize);
void amp_col2im_reference_f32(const float *col, float *dx, const amp_conv_geom *g);

#endif
