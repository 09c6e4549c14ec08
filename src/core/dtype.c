/* dtype table: sizes, names, parsing. */
#include <string.h>
#include <strings.h>

#include "core/error.h"

typedef struct {
    const char *name;
    size_t size;
    bool is_float;
    const char *aliases[5];
} dtype_info;

static const dtype_info g_dtypes[] = {
    [AMP_F32] = {"f32", 4, true, {"float32", "float", "fp32", NULL}},
    [AMP_F16] = {"f16", 2, true, {"float16", "half", "fp16", NULL}},
    [AMP_BF16] = {"bf16", 2, true, {"bfloat16", NULL}},
    [AMP_F8E4M3] = {"f8e4m3", 1, true, {"float8_e4m3fn", "e4m3", "fp8e4m3", NULL}},
    [AMP_F8E5M2] = {"f8e5m2", 1, true, {"float8_e5m2", "e5m2", "fp8e5m2", NULL}},
    [AMP_F64] = {"f64", 8, true, {"float64", "double", "fp64", NULL}},
    [AMP_I32] = {"i32", 4, false, {"int32", "int", NULL}},
    [AMP_I64] = {"i64", 8, false, {"int64", "long", NULL}},
    [AMP_U8] = {"u8", 1, false, {"uint8", NULL}},
};
_Static_assert(sizeof g_dtypes / sizeof g_dtypes[0] == AMP_DTYPE_COUNT, "g_dtypes: one entry per dtype");

bool amp_dtype_valid(amp_dtype dt) { return (int)dt >= 0 && dt < AMP_DTYPE_COUNT; }

size_t amp_dtype_size(amp_dtype dt) { return amp_dtype_valid(dt) ? g_dtypes[dt].size : 0; }

const char *amp_dtype_name(amp_dtype dt) { return amp_dtype_valid(dt) ? g_dtypes[dt].name : "invalid-dtype"; }

bool amp_dtype_is_float(amp_dtype dt) { return amp_dtype_valid(dt) && g_dtypes[dt].is_float; }

bool amp_dtype_is_half(amp_dtype dt) { return dt == AMP_F16 || dt == AMP_BF16; }

amp_status amp_dtype_parse(const char *s, amp_dtype *out) {
    if (!s) return amp_error(AMP_ERR_ARG, "amp_dtype_parse: s is NULL");
    if (!out) return amp_error(AMP_ERR_ARG, "amp_dtype_parse: out is NULL");
    for (int d = 0; d < AMP_DTYPE_COUNT; d++) {
        if (strcasecmp(s, g_dtypes[d].name) == 0) { *out = (amp_dtype)d; return AMP_OK; }
        for (int a = 0; g_dtypes[d].aliases[a]; a++)
            if (strcasecmp(s, g_dtypes[d].aliases[a]) == 0) { *out = (amp_dtype)d; return AMP_OK; }
    }
    return amp_error(AMP_ERR_FORMAT, "amp_dtype_parse: unknown dtype '%s' (expected f32, f16, bf16, f8e4m3, f8e5m2, f64, i32, i64 or u8)", s);
}
