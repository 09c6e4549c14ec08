/* llama.cpp's block formats (numeric/quant_impl.h): their names and sizes,
 * the quantized matrix (amp_qtensor: wrap, reference count), ggml's
 * reference quantization of a row (quantize_row_*_ref: the same roundings,
 * so the bytes are llama.cpp's) and its dequantization, and the load dtype
 * (amp/quant.h). The integer kernels are src/kernels/cpu/quant_*.c. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "amp/numeric.h"
#include "core/checked.h"
#include "core/error.h"
#include "numeric/quant_impl.h"

typedef struct {
    const char *name;
    int64_t elems;
    size_t bytes;
    uint32_t ggml;
} qtype_def;

static const qtype_def g_q[AMP_QTYPE_COUNT] = {
    [AMP_Q8_0] = {"q8_0", 32, 34, 8},    [AMP_Q4_0] = {"q4_0", 32, 18, 2},  [AMP_Q4_1] = {"q4_1", 32, 20, 3},
    [AMP_Q4_K] = {"q4_k", 256, 144, 12}, [AMP_Q6_K] = {"q6_k", 256, 210, 14},
};

static bool qvalid(amp_qtype t) { return (int)t >= 0 && t < AMP_QTYPE_COUNT; }

const char *amp_qtype_name(amp_qtype t) { return qvalid(t) ? g_q[t].name : "invalid"; }
int64_t amp_qtype_block_elems(amp_qtype t) { return qvalid(t) ? g_q[t].elems : 0; }
size_t amp_qtype_block_bytes(amp_qtype t) { return qvalid(t) ? g_q[t].bytes : 0; }
uint32_t amp_qtype_ggml_id(amp_qtype t) { return qvalid(t) ? g_q[t].ggml : UINT32_MAX; }

amp_status amp_qtype_parse(const char *s, amp_qtype *out) {
    if (!s) return amp_error(AMP_ERR_ARG, "amp_qtype_parse: s is NULL");
    if (!out) return amp_error(AMP_ERR_ARG, "amp_qtype_parse: out is NULL");
    for (int t = 0; t < AMP_QTYPE_COUNT; t++)
        if (!strcasecmp(s, g_q[t].name)) {
            *out = (amp_qtype)t;
            return AMP_OK;
        }
    return amp_error(AMP_ERR_FORMAT, "amp_qtype_parse: unknown quantized type '%s' (expected q8_0, q4_0, q4_1, q4_k or q6_k)",
                     s);
}

amp_status amp_qtype_from_ggml_id(uint32_t id, amp_qtype *out) {
    if (!out) return amp_error(AMP_ERR_ARG, "amp_qtype_from_ggml_id: out is NULL");
    for (int t = 0; t < AMP_QTYPE_COUNT; t++)
        if (g_q[t].ggml == id) {
            *out = (amp_qtype)t;
            return AMP_OK;
        }
    return amp_error(AMP_ERR_UNSUPPORTED,
                     "amp_qtype_from_ggml_id: ggml type %u is not a quantized type amp reads (q8_0 8, q4_0 2, q4_1 3, "
                     "q4_k 12, q6_k 14)",
                     id);
}

/* ---- amp_qtensor ------------------------------------------------------------------------------ */
amp_qtensor *amp_qtensor_wrap(amp_qtype t, int64_t rows, int64_t cols, const void *blocks, size_t nbytes,
                              void (*release)(void *owner), void *owner) {
    static const char *fn = "amp_qtensor_wrap";
    if (!qvalid(t)) return amp_error_null(AMP_ERR_ARG, "%s: t is %d, not a quantized type (0 to %d)", fn, (int)t,
                                          AMP_QTYPE_COUNT - 1);
    if (!blocks) return amp_error_null(AMP_ERR_ARG, "%s: blocks is NULL", fn);
    if (rows < 0 || cols < 0)
        return amp_error_null(AMP_ERR_SHAPE, "%s: rows %lld, cols %lld: negative", fn, (long long)rows, (long long)cols);
    int64_t be = g_q[t].elems;
    if (cols % be != 0)
        return amp_error_null(AMP_ERR_SHAPE, "%s: cols %lld is not a multiple of %s's block of %lld values", fn,
                              (long long)cols, g_q[t].name, (long long)be);
    amp_ck c = AMP_CK(fn, "rows * cols / block_elems * block_bytes");
    int64_t want = amp_ck_mul(&c, amp_ck_mul(&c, rows, cols / be), (int64_t)g_q[t].bytes);
    if (!c.ok) return NULL;
    if ((uint64_t)nbytes != (uint64_t)want)
        return amp_error_null(AMP_ERR_SHAPE, "%s: nbytes is %zu, but %lld x %lld %s takes %lld bytes", fn, nbytes,
                              (long long)rows, (long long)cols, g_q[t].name, (long long)want);
    amp_qtensor *q = calloc(1, sizeof *q);
    if (!q) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    q->type = t;
    q->rows = rows;
    q->cols = cols;
    q->data = blocks;
    q->nbytes = nbytes;
    q->row_bytes = amp__qrow_bytes(t, cols);
    q->release = release;
    q->owner = owner;
    atomic_init(&q->refs, 1);
    return q;
}

amp_qtensor *amp_qtensor_retain(amp_qtensor *q) {
    if (!q) return amp_error_null(AMP_ERR_ARG, "amp_qtensor_retain: q is NULL");
    atomic_fetch_add(&q->refs, 1);
    return q;
}

void amp_qtensor_free(amp_qtensor *q) {
    if (!q || atomic_fetch_sub(&q->refs, 1) != 1) return;
    if (q->release) q->release(q->owner);
    free(q);
}

/* The getters: NULL gives AMP_QTYPE_COUNT / -1 / 0 / NULL with an error naming the getter. */
amp_qtype amp_qtensor_type(const amp_qtensor *q) {
    return q ? q->type : (amp_error(AMP_ERR_ARG, "amp_qtensor_type: q is NULL"), AMP_QTYPE_COUNT);
}
int64_t amp_qtensor_rows(const amp_qtensor *q) {
    return q ? q->rows : amp_error_neg(AMP_ERR_ARG, "amp_qtensor_rows: q is NULL");
}
int64_t amp_qtensor_cols(const amp_qtensor *q) {
    return q ? q->cols : amp_error_neg(AMP_ERR_ARG, "amp_qtensor_cols: q is NULL");
}
size_t amp_qtensor_nbytes(const amp_qtensor *q) {
    return q ? q->nbytes : (amp_error(AMP_ERR_ARG, "amp_qtensor_nbytes: q is NULL"), (size_t)0);
}
const void *amp_qtensor_data(const amp_qtensor *q) {
    return q ? q->data : amp_error_null(AMP_ERR_ARG, "amp_qtensor_data: q is NULL");
}

/* ---- ggml's reference rows -------------------------------------------------------------------- */
static void q8_0_ref(const float *x, amp_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += AMP_QK) {
        float amax = 0.0f;
        for (int j = 0; j < AMP_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = amp_f32_to_f16(d);
        for (int j = 0; j < AMP_QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void q4_0_ref(const float *x, amp_block_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += AMP_QK) {
        float amax = 0.0f, max = 0.0f; /* the value of largest magnitude, first one on ties */
        for (int j = 0; j < AMP_QK; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = amp_f32_to_f16(d);
        for (int j = 0; j < AMP_QK / 2; j++) {
            int a = (int8_t)(x[j] * id + 8.5f), b = (int8_t)(x[AMP_QK / 2 + j] * id + 8.5f);
            y[i].qs[j] = (uint8_t)((a < 15 ? a : 15) | (b < 15 ? b : 15) << 4);
        }
    }
}

static void q4_1_ref(const float *x, amp_block_q4_1 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += AMP_QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < AMP_QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = amp_f32_to_f16(d);
        y[i].m = amp_f32_to_f16(min);
        for (int j = 0; j < AMP_QK / 2; j++) {
            int a = (int8_t)((x[j] - min) * id + 0.5f), b = (int8_t)((x[AMP_QK / 2 + j] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((a < 15 ? a : 15) | (b < 15 ? b : 15) << 4);
        }
    }
}

void amp__quantize_row_ref(amp_qtype t, const float *x, void *y, int64_t k) {
    switch (t) {
    case AMP_Q8_0: q8_0_ref(x, y, k / AMP_QK); break;
    case AMP_Q4_0: q4_0_ref(x, y, k / AMP_QK); break;
    case AMP_Q4_1: q4_1_ref(x, y, k / AMP_QK); break;
    default: break;
    }
}

/* ggml's get_scale_min_k4: the 6-bit scale and min j of a q4_k super-block */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

void amp__dequantize_row(amp_qtype t, const void *vx, float *y, int64_t k) {
    switch (t) {
    case AMP_Q8_0: {
        const amp_block_q8_0 *x = vx;
        for (int64_t i = 0; i < k / AMP_QK; i++, y += AMP_QK) {
            const float d = amp_f16_to_f32(x[i].d);
            for (int j = 0; j < AMP_QK; j++) y[j] = (float)x[i].qs[j] * d;
        }
        break;
    }
    case AMP_Q4_0: {
        const amp_block_q4_0 *x = vx;
        for (int64_t i = 0; i < k / AMP_QK; i++, y += AMP_QK) {
            const float d = amp_f16_to_f32(x[i].d);
            for (int j = 0; j < AMP_QK / 2; j++) {
                y[j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
                y[j + AMP_QK / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
            }
        }
        break;
    }
    case AMP_Q4_1: {
        const amp_block_q4_1 *x = vx;
        for (int64_t i = 0; i < k / AMP_QK; i++, y += AMP_QK) {
            const float d = amp_f16_to_f32(x[i].d), m = amp_f16_to_f32(x[i].m);
            for (int j = 0; j < AMP_QK / 2; j++) {
                y[j] = (float)(x[i].qs[j] & 0x0F) * d + m;
                y[j + AMP_QK / 2] = (float)(x[i].qs[j] >> 4) * d + m;
            }
        }
        break;
    }
    case AMP_Q4_K: {
        const amp_block_q4_k *x = vx;
        for (int64_t i = 0; i < k / AMP_QK_K; i++) {
            const uint8_t *q = x[i].qs;
            const float d = amp_f16_to_f32(x[i].d), min = amp_f16_to_f32(x[i].dmin);
            for (int j = 0, is = 0; j < AMP_QK_K; j += 64, is += 2, q += 32) {
                uint8_t sc, m;
                scale_min_k4(is, x[i].scales, &sc, &m);
                const float d1 = d * sc, m1 = min * m;
                scale_min_k4(is + 1, x[i].scales, &sc, &m);
                const float d2 = d * sc, m2 = min * m;
                for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
                for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
            }
        }
        break;
    }
    case AMP_Q6_K: {
        const amp_block_q6_k *x = vx;
        for (int64_t i = 0; i < k / AMP_QK_K; i++) {
            const float d = amp_f16_to_f32(x[i].d);
            const uint8_t *ql = x[i].ql, *qh = x[i].qh;
            const int8_t *sc = x[i].scales;
            for (int n = 0; n < AMP_QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
                for (int l = 0; l < 32; l++) {
                    int is = l / 16;
                    int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                    int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[l] = d * (float)sc[is] * (float)q1;
                    y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                    y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                    y[l + 96] = d * (float)sc[is + 6] * (float)q4;
                }
        }
        break;
    }
    default: break;
    }
}

/* ---- the load dtype --------------------------------------------------------------------------- */
amp_status amp_load_dtype_parse(const char *s, amp_load_dtype *out) {
    static const char *fn = "amp_load_dtype_parse";
    if (!s) return amp_error(AMP_ERR_ARG, "%s: s is NULL", fn);
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    if (!strcasecmp(s, "keep")) {
        *out = AMP_LOAD_DTYPE_KEEP;
        return AMP_OK;
    }
    for (int t = AMP_Q8_0; t <= AMP_Q4_1; t++)
        if (!strcasecmp(s, g_q[t].name)) {
            *out = (amp_load_dtype){AMP_LOAD_QUANT, AMP_F32, (amp_qtype)t};
            return AMP_OK;
        }
    amp_dtype dt;
    amp_status st = amp_dtype_parse(s, &dt);
    amp_clear_error();
    if (st == AMP_OK && (dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16)) {
        *out = (amp_load_dtype){AMP_LOAD_FLOAT, dt, AMP_Q8_0};
        return AMP_OK;
    }
    return amp_error(AMP_ERR_FORMAT,
                     "%s: unknown load dtype '%s' (expected keep, f32, f16, bf16, q8_0, q4_0 or q4_1)", fn, s);
}

const char *amp_load_dtype_name(amp_load_dtype d) {
    switch (d.kind) {
    case AMP_LOAD_KEEP: return "keep";
    case AMP_LOAD_FLOAT:
        return d.dtype == AMP_F32 || d.dtype == AMP_F16 || d.dtype == AMP_BF16 ? amp_dtype_name(d.dtype) : "invalid";
    case AMP_LOAD_QUANT: return d.qtype <= AMP_Q4_1 && (int)d.qtype >= 0 ? g_q[d.qtype].name : "invalid";
    default: return "invalid";
    }
}
