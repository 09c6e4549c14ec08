/* amp/gguf.h — GGUF files (llama.cpp's model format), read-only.
 *
 * A GGUF file (v3; v2 has the same layout) is little-endian: the magic
 * "GGUF", a u32 version, a u64 tensor count, a u64 key/value count, the
 * key/value pairs (a string key, a u32 value type, the value: a scalar, a
 * string (u64 length + bytes) or an array (u32 element type, u64 count, the
 * elements, which may be strings or arrays again)), the tensor infos (name,
 * u32 rank, u64 ne[rank], u32 ggml type, u64 offset into the data section),
 * padding to general.alignment (default 32), then the data section.
 *
 * amp_gguf_open maps the file read-only (mmap) and validates all of it before
 * anything is used: the magic and version, every count and length against
 * the bytes left (before anything is allocated), every size with checked
 * arithmetic, keys and tensor names unique, general.alignment a power of two,
 * ranks 1..4 with positive dims, ne[0] a multiple of the type's block, each
 * tensor's offset aligned, its data inside the file and no two tensors
 * overlapping. Errors name the function, the file, the field and the problem.
 *
 * Nothing is copied: metadata strings and arrays point into the mapping,
 * amp_gguf_get_qtensor wraps the file's blocks. The mapping is reference
 * counted: amp_gguf_close drops the file's reference, and a qtensor taken
 * from it keeps the mapping alive until its last reference goes.
 * amp_gguf_parse reads a caller's buffer in place (it borrows it: the buffer
 * must outlive the amp_gguf and every qtensor taken from it). */
#ifndef AMP_GGUF_H
#define AMP_GGUF_H

#include "amp/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct amp_gguf amp_gguf;
typedef struct amp_qtensor amp_qtensor; /* amp/quant.h */

/* GGUF's own value type numbers. */
typedef enum {
    AMP_GGUF_U8 = 0,
    AMP_GGUF_I8,
    AMP_GGUF_U16,
    AMP_GGUF_I16,
    AMP_GGUF_U32,
    AMP_GGUF_I32,
    AMP_GGUF_F32,
    AMP_GGUF_BOOL,
    AMP_GGUF_STRING,
    AMP_GGUF_ARRAY,
    AMP_GGUF_U64,
    AMP_GGUF_I64,
    AMP_GGUF_F64
} amp_gguf_type;

/* Limits of the reader: arrays nest at most this deep in metadata. */
#define AMP_GGUF_MAX_NESTING 8

AMP_API amp_gguf *amp_gguf_open(const char *path);                               /* mmap, validated */
AMP_API amp_gguf *amp_gguf_parse(const void *buf, size_t len, const char *name); /* borrows buf (fuzzing) */
/* Tensors and qtensors taken from f stay valid (qtensors hold the mapping). NULL ok. */
AMP_API void amp_gguf_close(amp_gguf *f);
AMP_API const char *amp_gguf_path(const amp_gguf *f); /* the path or name it was opened under */
AMP_API uint32_t amp_gguf_version(const amp_gguf *f);
AMP_API uint64_t amp_gguf_alignment(const amp_gguf *f);     /* general.alignment or 32 */
AMP_API uint64_t amp_gguf_file_bytes(const amp_gguf *f);
AMP_API uint64_t amp_gguf_data_offset(const amp_gguf *f);   /* where the data section starts */
AMP_API const char *amp_gguf_type_name(amp_gguf_type t);    /* "u8" ... "f64", "string", "array" */

/* ---- metadata ------------------------------------------------------------- */
AMP_API int64_t amp_gguf_kv_count(const amp_gguf *f);
AMP_API int64_t amp_gguf_find_key(const amp_gguf *f, const char *key); /* index or -1 */
AMP_API const char *amp_gguf_key_at(const amp_gguf *f, int64_t i);     /* NUL-terminated copy */
/* Type of value i; (amp_gguf_type)-1 on a bad f or index. */
AMP_API amp_gguf_type amp_gguf_kv_type(const amp_gguf *f, int64_t i);
AMP_API amp_gguf_type amp_gguf_arr_type(const amp_gguf *f, int64_t i); /* element type of an array */
AMP_API uint64_t amp_gguf_arr_len(const amp_gguf *f, int64_t i);       /* 0 when not an array */
/* Typed getters by key: an error naming the key when absent or of another type; integer getters accept any
 * integer type whose value fits. Strings are not NUL-terminated in the file: (pointer, length). */
AMP_API amp_status amp_gguf_get_int(const amp_gguf *f, const char *key, int64_t *out);
AMP_API amp_status amp_gguf_get_float(const amp_gguf *f, const char *key, double *out); /* f32/f64 (and ints) */
AMP_API amp_status amp_gguf_get_bool(const amp_gguf *f, const char *key, bool *out);
AMP_API amp_status amp_gguf_get_str(const amp_gguf *f, const char *key, const char **s, size_t *n);
/* Element i of an array of strings (constant time: the reader indexes string arrays). */
AMP_API amp_status amp_gguf_get_arr_str(const amp_gguf *f, const char *key, uint64_t i, const char **s, size_t *n);
/* Numeric array (elements of a scalar type, bool included): element type, pointer to the packed
 * little-endian elements in the file (not aligned in general: read with memcpy), count. */
AMP_API amp_status amp_gguf_get_arr(const amp_gguf *f, const char *key, amp_gguf_type *type, const void **data,
                                    uint64_t *n);

/* ---- tensors -------------------------------------------------------------- */
typedef struct {
    const char *name;   /* NUL-terminated copy */
    uint32_t ggml_type; /* GGML_TYPE_*: 0 F32, 1 F16, 30 BF16, 8 Q8_0, 2 Q4_0, 3 Q4_1, 12 Q4_K, 14 Q6_K, ... */
    int ndim;
    int64_t ne[4];      /* GGUF order: ne[0] is the fastest (a torch [out, in] matrix has ne = {in, out}) */
    uint64_t offset;    /* from the start of the data section */
    uint64_t nbytes;
    const void *data;
} amp_gguf_tensor_info;

/* ggml's name of a GGML_TYPE_* number ("F32", "Q4_1", "IQ2_XXS", ...; NULL when it is none). */
AMP_API const char *amp_gguf_ggml_type_name(uint32_t ggml_type);
AMP_API int64_t amp_gguf_tensor_count(const amp_gguf *f);
AMP_API int64_t amp_gguf_find_tensor(const amp_gguf *f, const char *name); /* index or -1 */
AMP_API amp_status amp_gguf_tensor_at(const amp_gguf *f, int64_t i, amp_gguf_tensor_info *out);
/* A tensor converted/dequantized to dt (f32/f16/bf16), dims in torch order (ne reversed). */
AMP_API amp_tensor *amp_gguf_get_tensor(const amp_gguf *f, const char *name, amp_dtype dt);
/* A 2-D quantized tensor without copying (it keeps the file mapped); error for float types. */
AMP_API amp_qtensor *amp_gguf_get_qtensor(const amp_gguf *f, const char *name);

#ifdef __cplusplus
}
#endif
#endif
