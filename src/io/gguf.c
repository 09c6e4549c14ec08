/* GGUF reader: the whole file validated before anything is used, nothing
 * copied (metadata and tensor data point into the read-only mapping), the
 * mapping reference counted so that zero-copy tensors outlive the amp_gguf.
 * The layout (gguf.h) and the ggml type sizes are facts of the format, as
 * llama.cpp's ggml.h and gguf-py's constants give them. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp/gguf.h"
#include "amp/numeric.h"
#include "amp/ops.h"
#include "amp/quant.h"
#include "core/checked.h"
#include "io/io_util.h"
#include "tensor/tensor_impl.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ALIGNMENT ((uint64_t)1 << 30)
#define GGUF_MAX_KEY 65535   /* the spec's limit on key length */
#define GGUF_MAX_NAME 64     /* the spec's limit on tensor name length */
#define GGUF_MAX_DIMS 4

/* ---- ggml types: block elements and bytes per block --------------------------------------- */
typedef struct {
    const char *name;
    uint32_t blck;  /* elements per block (1 for plain types); 0: no such type */
    uint32_t bytes; /* bytes per block */
} ggml_type_traits;

static const ggml_type_traits g_ggml[] = {
    [0] = {"F32", 1, 4},          [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},       [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},       [7] = {"Q5_1", 32, 24},      [8] = {"Q8_0", 32, 34},       [9] = {"Q8_1", 32, 40},
    [10] = {"Q2_K", 256, 84},     [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},    [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},    [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},  [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98},  [19] = {"IQ1_S", 256, 50},   [20] = {"IQ4_NL", 32, 18},    [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},          [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},         [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},         [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},        [34] = {"TQ1_0", 256, 54},   [35] = {"TQ2_0", 256, 66},    [39] = {"MXFP4", 32, 17},
    [40] = {"NVFP4", 64, 36},     [41] = {"Q1_0", 128, 18},
};
#define N_GGML ((uint32_t)(sizeof g_ggml / sizeof g_ggml[0]))
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_F64 = 28, GGML_BF16 = 30 };

static const ggml_type_traits *ggml_traits(uint32_t t) { return t < N_GGML && g_ggml[t].blck ? &g_ggml[t] : NULL; }

const char *amp_gguf_ggml_type_name(uint32_t ggml_type) {
    const ggml_type_traits *tr = ggml_traits(ggml_type);
    if (!tr) return amp_error_null(AMP_ERR_ARG, "amp_gguf_ggml_type_name: %" PRIu32 " is not a ggml type", ggml_type);
    return tr->name;
}

/* ---- metadata value types ------------------------------------------------------------------ */
#define N_VTYPES 13
static const char *const g_vtype_names[N_VTYPES] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                    "bool", "string", "array", "u64", "i64", "f64"};
/* bytes of a scalar value (0: string/array) */
static const uint8_t g_vtype_size[N_VTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *amp_gguf_type_name(amp_gguf_type t) {
    if ((unsigned)t >= N_VTYPES) return amp_error_null(AMP_ERR_ARG, "amp_gguf_type_name: %d is not a GGUF value type", (int)t);
    return g_vtype_names[t];
}

static bool vtype_is_int(uint32_t t) {
    return t <= AMP_GGUF_I32 || t == AMP_GGUF_U64 || t == AMP_GGUF_I64;
}

/* ---- the mapping ---------------------------------------------------------------------------- */
typedef struct {
    atomic_long refs;
    const unsigned char *base;
    size_t len;
    bool mapped; /* munmap on the last release (else a borrowed buffer) */
} gguf_map;

static void map_release(void *owner) {
    gguf_map *m = owner;
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
    if (m->mapped && m->len) munmap((void *)m->base, m->len);
    free(m);
}

/* ---- the parsed file ------------------------------------------------------------------------ */
typedef struct {
    char *key;
    uint32_t type;
    uint32_t arr_type;          /* arrays: element type */
    uint64_t n;                 /* arrays: elements; strings: bytes */
    const unsigned char *p;     /* scalar value, string bytes, or an array's first element */
    uint64_t *str_off;          /* arrays of strings: offset of element i's length field from p */
} gguf_kv;

typedef struct {
    char *name;
    uint32_t type;
    int ndim;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t offset, nbytes;
} gguf_ti;

struct amp_gguf {
    char *fname;
    gguf_map *map;
    const unsigned char *buf;
    uint64_t len;
    uint32_t version;
    uint64_t alignment, data_off;
    gguf_kv *kv;
    int64_t n_kv;
    int64_t *kv_by_key; /* indices sorted by key */
    gguf_ti *ti;
    int64_t n_ti;
    int64_t *ti_by_name; /* indices sorted by name */
};

void amp_gguf_close(amp_gguf *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n_kv; i++) {
        free(f->kv[i].key);
        free(f->kv[i].str_off);
    }
    for (int64_t i = 0; i < f->n_ti; i++) free(f->ti[i].name);
    free(f->kv);
    free(f->kv_by_key);
    free(f->ti);
    free(f->ti_by_name);
    map_release(f->map);
    free(f->fname);
    free(f);
}

/* ---- a bounded cursor ------------------------------------------------------------------------ */
typedef struct {
    const char *fn, *fname;
    const unsigned char *b;
    uint64_t len, pos;
} rd;

static uint64_t left(const rd *r) { return r->len - r->pos; }

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* n more bytes for `what`, else a "truncated" error naming it. */
static amp_status need(rd *r, uint64_t n, const char *what) {
    if (n <= left(r)) return AMP_OK;
    return amp_error(AMP_ERR_FORMAT, "%s: %s: truncated: %s at byte %" PRIu64 " needs %" PRIu64 " bytes, the file has %" PRIu64 " left",
                     r->fn, r->fname, what, r->pos, n, left(r));
}

static amp_status rd_u32(rd *r, uint32_t *v, const char *what) {
    amp_status st = need(r, 4, what);
    if (st) return st;
    *v = (uint32_t)le(r->b + r->pos, 4);
    r->pos += 4;
    return AMP_OK;
}

static amp_status rd_u64(rd *r, uint64_t *v, const char *what) {
    amp_status st = need(r, 8, what);
    if (st) return st;
    *v = le(r->b + r->pos, 8);
    r->pos += 8;
    return AMP_OK;
}

/* A GGUF string: u64 length, then the bytes (at most max of them; max 0: no limit). */
static amp_status rd_str(rd *r, const unsigned char **s, uint64_t *n, uint64_t max, const char *what) {
    amp_status st = rd_u64(r, n, what);
    if (st) return st;
    if (max && *n > max)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %s at byte %" PRIu64 " is %" PRIu64 " bytes long, more than the %" PRIu64 " GGUF allows",
                         r->fn, r->fname, what, r->pos - 8, *n, max);
    if ((st = need(r, *n, what))) return st;
    *s = r->b + r->pos;
    r->pos += *n;
    return AMP_OK;
}

/* A key or tensor name: non-empty, no NUL byte (amp hands it out as a C string). */
static amp_status rd_name(rd *r, char **out, uint64_t max, const char *what) {
    const unsigned char *s = NULL;
    uint64_t n;
    amp_status st = rd_str(r, &s, &n, max, what);
    if (st) return st;
    if (!n) return amp_error(AMP_ERR_FORMAT, "%s: %s: %s at byte %" PRIu64 " is empty", r->fn, r->fname, what, r->pos - 8);
    if (memchr(s, 0, (size_t)n))
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %s \"%.*s\" holds a NUL byte", r->fn, r->fname, what, (int)strnlen((const char *)s, 100),
                         (const char *)s);
    *out = malloc((size_t)n + 1);
    if (!*out) return amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", r->fn, r->fname);
    memcpy(*out, s, (size_t)n);
    (*out)[n] = 0;
    return AMP_OK;
}

/* The same failure as an overflow that amp_ck recorded, as a format error of the file. */
static amp_status ck_format(void) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", amp_last_error());
    return amp_error(AMP_ERR_FORMAT, "%s", msg);
}

/* One value of type t (depth: arrays around it). Validates it and moves past it. */
static amp_status skip_value(rd *r, uint32_t t, int depth, const char *key);

static amp_status skip_array(rd *r, int depth, const char *key, uint32_t *et, uint64_t *n) {
    amp_status st;
    if ((st = rd_u32(r, et, "array element type"))) return st;
    if (*et >= N_VTYPES)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: key '%.200s': array element type %" PRIu32 " is not a GGUF value type (0..12)", r->fn,
                         r->fname, key, *et);
    if ((st = rd_u64(r, n, "array length"))) return st;
    uint64_t minb = *et == AMP_GGUF_STRING ? 8 : *et == AMP_GGUF_ARRAY ? 12 : g_vtype_size[*et];
    if (*n > left(r) / minb)
        return amp_error(AMP_ERR_FORMAT,
                         "%s: %s: key '%.200s': an array of %" PRIu64 " %s values cannot fit in the %" PRIu64 " bytes left of the file",
                         r->fn, r->fname, key, *n, g_vtype_names[*et], left(r));
    if (*et == AMP_GGUF_ARRAY && depth + 1 >= AMP_GGUF_MAX_NESTING)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: key '%.200s': arrays nested more than %d deep", r->fn, r->fname, key,
                         AMP_GGUF_MAX_NESTING);
    if (g_vtype_size[*et] && *et != AMP_GGUF_BOOL) { /* packed scalars: *n * size bytes, bounded above */
        r->pos += *n * minb;
        return AMP_OK;
    }
    for (uint64_t i = 0; i < *n; i++)
        if ((st = skip_value(r, *et, depth + 1, key))) return st;
    return AMP_OK;
}

static amp_status skip_value(rd *r, uint32_t t, int depth, const char *key) {
    amp_status st;
    if (t == AMP_GGUF_STRING) {
        const unsigned char *s = NULL;
        uint64_t n;
        return rd_str(r, &s, &n, 0, "string value");
    }
    if (t == AMP_GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        return skip_array(r, depth, key, &et, &n);
    }
    if ((st = need(r, g_vtype_size[t], "value"))) return st;
    if (t == AMP_GGUF_BOOL && r->b[r->pos] > 1)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: key '%.200s': bool at byte %" PRIu64 " is %u, not 0 or 1", r->fn, r->fname, key, r->pos,
                         r->b[r->pos]);
    r->pos += g_vtype_size[t];
    return AMP_OK;
}

static amp_status parse_kv(rd *r, int64_t i, gguf_kv *kv) {
    amp_status st;
    char what[64];
    snprintf(what, sizeof what, "key %" PRId64, i);
    if ((st = rd_name(r, &kv->key, GGUF_MAX_KEY, what))) return st;
    if ((st = rd_u32(r, &kv->type, "value type"))) return st;
    if (kv->type >= N_VTYPES)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: key '%.200s': value type %" PRIu32 " is not a GGUF value type (0..12)", r->fn, r->fname,
                         kv->key, kv->type);
    if (kv->type == AMP_GGUF_STRING) {
        uint64_t p0 = r->pos + 8;
        if ((st = skip_value(r, kv->type, 0, kv->key))) return st;
        kv->p = r->b + p0;
        kv->n = r->pos - p0;
        return AMP_OK;
    }
    if (kv->type != AMP_GGUF_ARRAY) {
        kv->p = r->b + r->pos;
        kv->n = 1;
        return skip_value(r, kv->type, 0, kv->key);
    }
    uint64_t p0 = r->pos + 12;
    if ((st = skip_array(r, 0, kv->key, &kv->arr_type, &kv->n))) return st;
    kv->p = r->b + p0;
    if (kv->arr_type == AMP_GGUF_STRING && kv->n) {
        /* index the strings (already validated): n <= bytes / 8, so the table is at most the file's size */
        kv->str_off = malloc((size_t)kv->n * sizeof *kv->str_off);
        if (!kv->str_off) return amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory indexing key '%.200s'", r->fn, r->fname, kv->key);
        uint64_t o = 0;
        for (uint64_t j = 0; j < kv->n; j++) {
            kv->str_off[j] = o;
            o += 8 + le(kv->p + o, 8);
        }
    }
    return AMP_OK;
}

/* ---- sorted indices (keys, tensor names) ---------------------------------------------------- */
typedef struct {
    const char *s;
    int64_t i;
} name_ref;

static int cmp_name_ref(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* Sorts n names into *idx; the first duplicate (by position in the file) goes to *dup. */
static amp_status sort_names(const char *fn, const char *fname, const char *const *names, size_t stride, int64_t n, int64_t **idx,
                             int64_t *dup) {
    *dup = -1;
    name_ref *refs = malloc(sizeof *refs * (size_t)(n ? n : 1));
    *idx = malloc(sizeof **idx * (size_t)(n ? n : 1));
    if (!refs || !*idx) {
        free(refs);
        return amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, fname);
    }
    for (int64_t i = 0; i < n; i++)
        refs[i] = (name_ref){*(const char *const *)((const char *)names + (size_t)i * stride), i};
    qsort(refs, (size_t)n, sizeof *refs, cmp_name_ref);
    for (int64_t i = 0; i < n; i++) {
        (*idx)[i] = refs[i].i;
        if (i && !strcmp(refs[i].s, refs[i - 1].s) && (*dup < 0 || refs[i].i < *dup)) *dup = refs[i].i;
    }
    free(refs);
    return AMP_OK;
}

static int64_t find_sorted(const int64_t *idx, int64_t n, const void *base, size_t stride, const char *name) {
    int64_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const char *s = *(const char *const *)((const char *)base + (size_t)idx[mid] * stride);
        int c = strcmp(s, name);
        if (!c) return idx[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static int64_t kv_find(const amp_gguf *f, const char *key) { return find_sorted(f->kv_by_key, f->n_kv, f->kv, sizeof *f->kv, key); }

/* ---- tensor infos ---------------------------------------------------------------------------- */
static amp_status parse_ti(rd *r, int64_t i, gguf_ti *t) {
    amp_status st;
    char what[64];
    snprintf(what, sizeof what, "tensor %" PRId64 "'s name", i);
    if ((st = rd_name(r, &t->name, GGUF_MAX_NAME, what))) return st;
    uint32_t nd;
    if ((st = rd_u32(r, &nd, "tensor rank"))) return st;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s': rank %" PRIu32 " is outside GGUF's 1..%d", r->fn, r->fname, t->name, nd,
                         GGUF_MAX_DIMS);
    t->ndim = (int)nd;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t v;
        if ((st = rd_u64(r, &v, "tensor dimension"))) return st;
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s': ne[%d] = %" PRIu64 " is not a positive int64", r->fn, r->fname, t->name, d,
                             v);
        t->ne[d] = (int64_t)v;
    }
    if ((st = rd_u32(r, &t->type, "tensor type"))) return st;
    const ggml_type_traits *tr = ggml_traits(t->type);
    if (!tr)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s': ggml type %" PRIu32 " is not a type ggml defines, so its size is unknown",
                         r->fn, r->fname, t->name, t->type);
    if (t->ne[0] % tr->blck)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s': ne[0] = %" PRId64 " is not a multiple of %s's block of %" PRIu32 " elements",
                         r->fn, r->fname, t->name, t->ne[0], tr->name, tr->blck);
    char cwhat[128];
    snprintf(cwhat, sizeof cwhat, "%s: tensor '%s': bytes", r->fname, t->name);
    amp_ck c = AMP_CK(r->fn, cwhat);
    int64_t nb = amp_ck_mul(&c, t->ne[0] / tr->blck, tr->bytes);
    for (int d = 1; d < t->ndim; d++) nb = amp_ck_mul(&c, nb, t->ne[d]);
    if (!c.ok) return ck_format();
    t->nbytes = (uint64_t)nb;
    return rd_u64(r, &t->offset, "tensor offset");
}

typedef struct {
    uint64_t off;
    int64_t i;
} off_ref;

static int cmp_off(const void *a, const void *b) {
    const off_ref *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Offsets aligned, data inside the file, no overlap. */
static amp_status check_layout(const char *fn, amp_gguf *f) {
    uint64_t data_len = f->len > f->data_off ? f->len - f->data_off : 0;
    off_ref *refs = malloc(sizeof *refs * (size_t)(f->n_ti ? f->n_ti : 1));
    if (!refs) return amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, f->fname);
    amp_status st = AMP_OK;
    for (int64_t i = 0; i < f->n_ti; i++) {
        const gguf_ti *t = &f->ti[i];
        if (t->offset % f->alignment) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s': offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, fn, f->fname,
                           t->name, t->offset, f->alignment);
            goto done;
        }
        if (t->offset > data_len || t->nbytes > data_len - t->offset) {
            st = amp_error(AMP_ERR_FORMAT,
                           "%s: %s: tensor '%s': %" PRIu64 " bytes at offset %" PRIu64 " run past the end of the data section (%" PRIu64
                           " bytes from byte %" PRIu64 " of the file)",
                           fn, f->fname, t->name, t->nbytes, t->offset, data_len, f->data_off);
            goto done;
        }
        refs[i] = (off_ref){t->offset, i};
    }
    qsort(refs, (size_t)f->n_ti, sizeof *refs, cmp_off);
    for (int64_t k = 1; k < f->n_ti; k++) {
        const gguf_ti *a = &f->ti[refs[k - 1].i], *b = &f->ti[refs[k].i];
        if (a->offset + a->nbytes > b->offset) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensors '%s' (bytes %" PRIu64 "..%" PRIu64 ") and '%s' (from byte %" PRIu64 ") overlap",
                           fn, f->fname, a->name, a->offset, a->offset + a->nbytes, b->name, b->offset);
            goto done;
        }
    }
done:
    free(refs);
    return st;
}

/* ---- the whole image ------------------------------------------------------------------------ */
static amp_status parse_image(const char *fn, amp_gguf *f) {
    rd r = {fn, f->fname, f->buf, f->len, 0};
    amp_status st;
    if (f->len < 4 || memcmp(f->buf, "GGUF", 4)) {
        if (f->len < 4 && !memcmp(f->buf, "GGUF", (size_t)f->len))
            return need(&r, 4, "the magic \"GGUF\"");
        return amp_error(AMP_ERR_FORMAT, "%s: %s: not a GGUF file: it does not start with the magic \"GGUF\"", fn, f->fname);
    }
    r.pos = 4;
    if ((st = rd_u32(&r, &f->version, "the version"))) return st;
    if (f->version != 2 && f->version != 3) {
        uint32_t sw = __builtin_bswap32(f->version);
        if (sw == 2 || sw == 3)
            return amp_error(AMP_ERR_UNSUPPORTED, "%s: %s: a big-endian GGUF file (version %" PRIu32 " byte-swapped): amp reads little-endian files",
                             fn, f->fname, sw);
        if (f->version == 1)
            return amp_error(AMP_ERR_UNSUPPORTED,
                             "%s: %s: GGUF version 1 (32-bit counts, before August 2023) is not supported: convert it to version 3 with "
                             "llama.cpp's tools",
                             fn, f->fname);
        return amp_error(AMP_ERR_FORMAT, "%s: %s: unknown GGUF version %" PRIu32 " (amp reads 2 and 3)", fn, f->fname, f->version);
    }
    uint64_t n_ti, n_kv;
    if ((st = rd_u64(&r, &n_ti, "the tensor count")) || (st = rd_u64(&r, &n_kv, "the key/value count"))) return st;
    /* a key/value takes at least 14 bytes (length, one byte of key, type, a u8), a tensor info 33 */
    if (n_kv > left(&r) / 14)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %" PRIu64 " key/value pairs cannot fit in the %" PRIu64 " bytes left of the file", fn,
                         f->fname, n_kv, left(&r));
    if (n_ti > left(&r) / 33)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %" PRIu64 " tensor infos cannot fit in the %" PRIu64 " bytes left of the file", fn,
                         f->fname, n_ti, left(&r));
    f->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *f->kv);
    f->ti = calloc((size_t)(n_ti ? n_ti : 1), sizeof *f->ti);
    if (!f->kv || !f->ti) return amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, f->fname);
    for (uint64_t i = 0; i < n_kv; i++) {
        st = parse_kv(&r, (int64_t)i, &f->kv[i]);
        f->n_kv = (int64_t)i + 1; /* owned: freed with the file */
        if (st) return st;
    }
    int64_t dup;
    if ((st = sort_names(fn, f->fname, (const char *const *)&f->kv[0].key, sizeof *f->kv, f->n_kv, &f->kv_by_key, &dup))) return st;
    if (dup >= 0) return amp_error(AMP_ERR_FORMAT, "%s: %s: key '%.200s' appears twice", fn, f->fname, f->kv[dup].key);
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = kv_find(f, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *kv = &f->kv[ai];
        if (!vtype_is_int(kv->type))
            return amp_error(AMP_ERR_FORMAT, "%s: %s: general.alignment is a %s, not an integer", fn, f->fname, g_vtype_names[kv->type]);
        uint64_t a = le(kv->p, g_vtype_size[kv->type]);
        bool neg = (kv->type == AMP_GGUF_I8 || kv->type == AMP_GGUF_I16 || kv->type == AMP_GGUF_I32 || kv->type == AMP_GGUF_I64) &&
                   (kv->p[g_vtype_size[kv->type] - 1] & 0x80);
        if (neg || a == 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT)
            return amp_error(AMP_ERR_FORMAT, "%s: %s: general.alignment %s%" PRIu64 " is not a power of two in [1, 2^30]", fn, f->fname,
                             neg ? "(negative) " : "", a);
        f->alignment = a;
    }
    if (n_ti > left(&r) / 33)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: %" PRIu64 " tensor infos cannot fit in the %" PRIu64 " bytes left after the metadata", fn,
                         f->fname, n_ti, left(&r));
    for (uint64_t i = 0; i < n_ti; i++) {
        st = parse_ti(&r, (int64_t)i, &f->ti[i]);
        f->n_ti = (int64_t)i + 1;
        if (st) return st;
    }
    if ((st = sort_names(fn, f->fname, (const char *const *)&f->ti[0].name, sizeof *f->ti, f->n_ti, &f->ti_by_name, &dup))) return st;
    if (dup >= 0) return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s' appears twice", fn, f->fname, f->ti[dup].name);
    /* the data section starts at the next multiple of the alignment (pos <= len, alignment <= 2^30: no overflow) */
    f->data_off = (r.pos + f->alignment - 1) / f->alignment * f->alignment;
    return check_layout(fn, f);
}

static amp_gguf *gguf_new(const char *fn, const char *name) {
    amp_gguf *f = calloc(1, sizeof *f);
    if (f) f->fname = strdup(name ? name : "(memory)");
    if (f && f->fname) f->map = calloc(1, sizeof *f->map);
    if (!f || !f->fname || !f->map) {
        if (f) free(f->fname);
        free(f);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    atomic_init(&f->map->refs, 1);
    return f;
}

static amp_gguf *gguf_finish(const char *fn, amp_gguf *f) {
    f->buf = f->map->base;
    f->len = f->map->len;
    if (parse_image(fn, f) != AMP_OK) {
        amp_gguf_close(f);
        return NULL;
    }
    return f;
}

amp_gguf *amp_gguf_parse(const void *buf, size_t len, const char *name) {
    static const char *fn = "amp_gguf_parse";
    if (!buf) return amp_error_null(AMP_ERR_ARG, "%s: buf is NULL", fn);
    amp_gguf *f = gguf_new(fn, name);
    if (!f) return NULL;
    f->map->base = buf;
    f->map->len = len;
    return gguf_finish(fn, f);
}

amp_gguf *amp_gguf_open(const char *path) {
    static const char *fn = "amp_gguf_open";
    if (!path) return amp_error_null(AMP_ERR_ARG, "%s: path is NULL", fn);
    int fd = amp__open_regular(fn, path); /* a FIFO would block open() forever */
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return amp_error_null(AMP_ERR_IO, "%s: cannot stat %s: %s", fn, path, strerror(e));
    }
    if (sb.st_size < 24) {
        /* too short for a header: read what there is for the precise message */
        unsigned char head[24];
        ssize_t got = pread(fd, head, (size_t)sb.st_size, 0);
        close(fd);
        if (got != (ssize_t)sb.st_size) return amp_error_null(AMP_ERR_IO, "%s: %s: cannot read the file", fn, path);
        amp_gguf *f = gguf_new(fn, path);
        if (!f) return NULL;
        f->map->base = head;
        f->map->len = (size_t)sb.st_size;
        f->buf = head;
        f->len = (uint64_t)sb.st_size;
        (void)parse_image(fn, f); /* always fails: 24 bytes are the smallest header */
        f->map->base = NULL;
        f->map->len = 0;
        amp_gguf_close(f);
        return NULL;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: %s: %lld bytes cannot be mapped", fn, path, (long long)sb.st_size);
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return amp_error_null(AMP_ERR_IO, "%s: cannot map %s: %s", fn, path, strerror(e));
    amp_gguf *f = gguf_new(fn, path);
    if (!f) {
        munmap(p, (size_t)sb.st_size);
        return NULL;
    }
    f->map->base = p;
    f->map->len = (size_t)sb.st_size;
    f->map->mapped = true;
    return gguf_finish(fn, f);
}

/* ---- file-level getters ---------------------------------------------------------------------- */
#define NEED_F(fnname, ret)                                                                                                  \
    do {                                                                                                                     \
        if (!f) {                                                                                                            \
            amp_error(AMP_ERR_ARG, "%s: f is NULL", fnname);                                                                 \
            return ret;                                                                                                      \
        }                                                                                                                    \
    } while (0)

const char *amp_gguf_path(const amp_gguf *f) {
    NEED_F("amp_gguf_path", NULL);
    return f->fname;
}

uint32_t amp_gguf_version(const amp_gguf *f) {
    NEED_F("amp_gguf_version", 0);
    return f->version;
}

uint64_t amp_gguf_alignment(const amp_gguf *f) {
    NEED_F("amp_gguf_alignment", 0);
    return f->alignment;
}

uint64_t amp_gguf_file_bytes(const amp_gguf *f) {
    NEED_F("amp_gguf_file_bytes", 0);
    return f->len;
}

uint64_t amp_gguf_data_offset(const amp_gguf *f) {
    NEED_F("amp_gguf_data_offset", 0);
    return f->data_off;
}

/* ---- metadata getters ------------------------------------------------------------------------- */
int64_t amp_gguf_kv_count(const amp_gguf *f) {
    NEED_F("amp_gguf_kv_count", -1);
    return f->n_kv;
}

int64_t amp_gguf_find_key(const amp_gguf *f, const char *key) {
    if (!f || !key) return amp_error_neg(AMP_ERR_ARG, "amp_gguf_find_key: %s is NULL", f ? "key" : "f");
    return kv_find(f, key);
}

static const gguf_kv *kv_at(const char *fn, const amp_gguf *f, int64_t i) {
    if (!f) return amp_error_null(AMP_ERR_ARG, "%s: f is NULL", fn);
    if (i < 0 || i >= f->n_kv)
        return amp_error_null(AMP_ERR_ARG, "%s: index %" PRId64 " is outside [0, %" PRId64 ") (%s)", fn, i, f->n_kv, f->fname);
    return &f->kv[i];
}

const char *amp_gguf_key_at(const amp_gguf *f, int64_t i) {
    const gguf_kv *kv = kv_at("amp_gguf_key_at", f, i);
    return kv ? kv->key : NULL;
}

amp_gguf_type amp_gguf_kv_type(const amp_gguf *f, int64_t i) {
    const gguf_kv *kv = kv_at("amp_gguf_kv_type", f, i);
    return kv ? (amp_gguf_type)kv->type : (amp_gguf_type)-1;
}

amp_gguf_type amp_gguf_arr_type(const amp_gguf *f, int64_t i) {
    const gguf_kv *kv = kv_at("amp_gguf_arr_type", f, i);
    if (!kv) return (amp_gguf_type)-1;
    if (kv->type != AMP_GGUF_ARRAY) {
        amp_error(AMP_ERR_ARG, "amp_gguf_arr_type: %s: key '%s' is a %s, not an array", f->fname, kv->key, g_vtype_names[kv->type]);
        return (amp_gguf_type)-1;
    }
    return (amp_gguf_type)kv->arr_type;
}

uint64_t amp_gguf_arr_len(const amp_gguf *f, int64_t i) {
    const gguf_kv *kv = kv_at("amp_gguf_arr_len", f, i);
    if (!kv) return 0;
    if (kv->type != AMP_GGUF_ARRAY) {
        amp_error(AMP_ERR_ARG, "amp_gguf_arr_len: %s: key '%s' is a %s, not an array", f->fname, kv->key, g_vtype_names[kv->type]);
        return 0;
    }
    return kv->n;
}

/* The value of key, which must be of a type `want` accepts (a description for the message). */
static const gguf_kv *kv_get(const char *fn, const amp_gguf *f, const char *key, bool (*ok)(uint32_t), const char *want) {
    if (!f || !key) return amp_error_null(AMP_ERR_ARG, "%s: %s is NULL", fn, f ? "key" : "f");
    int64_t i = kv_find(f, key);
    if (i < 0) return amp_error_null(AMP_ERR_ARG, "%s: %s: no key '%.200s'", fn, f->fname, key);
    const gguf_kv *kv = &f->kv[i];
    if (!ok(kv->type)) {
        if (kv->type == AMP_GGUF_ARRAY)
            return amp_error_null(AMP_ERR_DTYPE, "%s: %s: key '%.200s' is an array of %s, not %s", fn, f->fname, key,
                                  g_vtype_names[kv->arr_type], want);
        return amp_error_null(AMP_ERR_DTYPE, "%s: %s: key '%.200s' is a %s, not %s", fn, f->fname, key, g_vtype_names[kv->type], want);
    }
    return kv;
}

static bool t_int(uint32_t t) { return vtype_is_int(t); }
static bool t_num(uint32_t t) { return vtype_is_int(t) || t == AMP_GGUF_F32 || t == AMP_GGUF_F64; }
static bool t_bool(uint32_t t) { return t == AMP_GGUF_BOOL; }
static bool t_str(uint32_t t) { return t == AMP_GGUF_STRING; }
static bool t_arr(uint32_t t) { return t == AMP_GGUF_ARRAY; }

static bool is_signed(uint32_t t) { return t == AMP_GGUF_I8 || t == AMP_GGUF_I16 || t == AMP_GGUF_I32 || t == AMP_GGUF_I64; }

/* An integer value; false for a u64 above INT64_MAX. */
static bool int_value(const gguf_kv *kv, int64_t *out) {
    int n = g_vtype_size[kv->type];
    uint64_t u = le(kv->p, n);
    if (is_signed(kv->type) && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
    if (kv->type == AMP_GGUF_U64 && u > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)u;
    return true;
}

amp_status amp_gguf_get_int(const amp_gguf *f, const char *key, int64_t *out) {
    static const char *fn = "amp_gguf_get_int";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    const gguf_kv *kv = kv_get(fn, f, key, t_int, "an integer");
    if (!kv) return amp_last_status();
    if (!int_value(kv, out))
        return amp_error(AMP_ERR_RANGE, "%s: %s: key '%.200s': u64 %" PRIu64 " does not fit in int64", fn, f->fname, key, le(kv->p, 8));
    return AMP_OK;
}

amp_status amp_gguf_get_float(const amp_gguf *f, const char *key, double *out) {
    static const char *fn = "amp_gguf_get_float";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    const gguf_kv *kv = kv_get(fn, f, key, t_num, "a number");
    if (!kv) return amp_last_status();
    if (kv->type == AMP_GGUF_F32) {
        uint32_t b = (uint32_t)le(kv->p, 4);
        float x;
        memcpy(&x, &b, 4);
        *out = x;
    } else if (kv->type == AMP_GGUF_F64) {
        uint64_t b = le(kv->p, 8);
        memcpy(out, &b, 8);
    } else if (kv->type == AMP_GGUF_U64) {
        *out = (double)le(kv->p, 8);
    } else {
        int64_t v;
        int_value(kv, &v);
        *out = (double)v;
    }
    return AMP_OK;
}

amp_status amp_gguf_get_bool(const amp_gguf *f, const char *key, bool *out) {
    static const char *fn = "amp_gguf_get_bool";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    const gguf_kv *kv = kv_get(fn, f, key, t_bool, "a bool");
    if (!kv) return amp_last_status();
    *out = kv->p[0] != 0;
    return AMP_OK;
}

amp_status amp_gguf_get_str(const amp_gguf *f, const char *key, const char **s, size_t *n) {
    static const char *fn = "amp_gguf_get_str";
    if (!s || !n) return amp_error(AMP_ERR_ARG, "%s: %s is NULL", fn, !s ? "s" : "n");
    const gguf_kv *kv = kv_get(fn, f, key, t_str, "a string");
    if (!kv) return amp_last_status();
    *s = (const char *)kv->p;
    *n = (size_t)kv->n;
    return AMP_OK;
}

amp_status amp_gguf_get_arr_str(const amp_gguf *f, const char *key, uint64_t i, const char **s, size_t *n) {
    static const char *fn = "amp_gguf_get_arr_str";
    if (!s || !n) return amp_error(AMP_ERR_ARG, "%s: %s is NULL", fn, !s ? "s" : "n");
    const gguf_kv *kv = kv_get(fn, f, key, t_arr, "an array of strings");
    if (!kv) return amp_last_status();
    if (kv->arr_type != AMP_GGUF_STRING)
        return amp_error(AMP_ERR_DTYPE, "%s: %s: key '%.200s' is an array of %s, not of strings", fn, f->fname, key,
                         g_vtype_names[kv->arr_type]);
    if (i >= kv->n)
        return amp_error(AMP_ERR_ARG, "%s: %s: key '%.200s': index %" PRIu64 " is outside [0, %" PRIu64 ")", fn, f->fname, key, i, kv->n);
    const unsigned char *p = kv->p + kv->str_off[i];
    *n = (size_t)le(p, 8);
    *s = (const char *)p + 8;
    return AMP_OK;
}

amp_status amp_gguf_get_arr(const amp_gguf *f, const char *key, amp_gguf_type *type, const void **data, uint64_t *n) {
    static const char *fn = "amp_gguf_get_arr";
    if (!type || !data || !n) return amp_error(AMP_ERR_ARG, "%s: %s is NULL", fn, !type ? "type" : !data ? "data" : "n");
    const gguf_kv *kv = kv_get(fn, f, key, t_arr, "a numeric array");
    if (!kv) return amp_last_status();
    if (!g_vtype_size[kv->arr_type])
        return amp_error(AMP_ERR_DTYPE, "%s: %s: key '%.200s' is an array of %s, not of numbers (amp_gguf_get_arr_str reads strings)", fn,
                         f->fname, key, kv->arr_type == AMP_GGUF_STRING ? "strings" : "arrays");
    *type = (amp_gguf_type)kv->arr_type;
    *data = kv->p;
    *n = kv->n;
    return AMP_OK;
}

/* ---- tensors ---------------------------------------------------------------------------------- */
int64_t amp_gguf_tensor_count(const amp_gguf *f) {
    NEED_F("amp_gguf_tensor_count", -1);
    return f->n_ti;
}

int64_t amp_gguf_find_tensor(const amp_gguf *f, const char *name) {
    if (!f || !name) return amp_error_neg(AMP_ERR_ARG, "amp_gguf_find_tensor: %s is NULL", f ? "name" : "f");
    return find_sorted(f->ti_by_name, f->n_ti, f->ti, sizeof *f->ti, name);
}

amp_status amp_gguf_tensor_at(const amp_gguf *f, int64_t i, amp_gguf_tensor_info *out) {
    static const char *fn = "amp_gguf_tensor_at";
    if (!f || !out) return amp_error(AMP_ERR_ARG, "%s: %s is NULL", fn, f ? "out" : "f");
    if (i < 0 || i >= f->n_ti)
        return amp_error(AMP_ERR_ARG, "%s: index %" PRId64 " is outside [0, %" PRId64 ") (%s)", fn, i, f->n_ti, f->fname);
    const gguf_ti *t = &f->ti[i];
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->ggml_type = t->type;
    out->ndim = t->ndim;
    memcpy(out->ne, t->ne, sizeof out->ne);
    out->offset = t->offset;
    out->nbytes = t->nbytes;
    out->data = f->buf + f->data_off + t->offset;
    return AMP_OK;
}

/* The tensor named name, or NULL with an error naming fn. */
static const gguf_ti *ti_get(const char *fn, const amp_gguf *f, const char *name) {
    if (!f || !name) return amp_error_null(AMP_ERR_ARG, "%s: %s is NULL", fn, f ? "name" : "f");
    int64_t i = find_sorted(f->ti_by_name, f->n_ti, f->ti, sizeof *f->ti, name);
    if (i < 0) return amp_error_null(AMP_ERR_ARG, "%s: %s: no tensor named '%.200s'", fn, f->fname, name);
    return &f->ti[i];
}

/* n elements of ggml type src (F32/F16/BF16/F64, little-endian, any alignment) -> dst of dt. */
static void convert_plain(uint32_t src, const unsigned char *p, amp_dtype dt, void *dst, size_t n) {
    size_t es = g_ggml[src].bytes;
    if ((src == GGML_F32 && dt == AMP_F32) || (src == GGML_F16 && dt == AMP_F16) || (src == GGML_BF16 && dt == AMP_BF16)) {
        memcpy(dst, p, n * es);
        return;
    }
    enum { CH = 4096 };
    float tmp[CH];
    for (size_t o = 0; o < n; o += CH) {
        size_t m = n - o < CH ? n - o : CH;
        const unsigned char *q = p + o * es;
        if (src == GGML_F64) { /* rounded once, straight from f64 */
            for (size_t k = 0; k < m; k++) {
                double x;
                memcpy(&x, q + 8 * k, 8);
                if (dt == AMP_F32) ((float *)dst)[o + k] = amp_f64_to_f32(x);
                else if (dt == AMP_F16) ((uint16_t *)dst)[o + k] = amp_f64_to_f16(x);
                else ((uint16_t *)dst)[o + k] = amp_f64_to_bf16(x);
            }
            continue;
        }
        float *f32 = dt == AMP_F32 ? (float *)dst + o : tmp; /* f16/bf16 -> f32 is exact: one rounding */
        if (src == GGML_F32) memcpy(f32, q, m * 4);
        else {
            uint16_t h[CH];
            memcpy(h, q, m * 2);
            if (src == GGML_F16) amp_f16_to_f32_array(f32, h, m);
            else amp_bf16_to_f32_array(f32, h, m);
        }
        if (dt == AMP_F16) amp_f32_to_f16_array((uint16_t *)dst + o, f32, m);
        else if (dt == AMP_BF16) amp_f32_to_bf16_array((uint16_t *)dst + o, f32, m);
    }
}

/* The qtype of a ggml type amp computes with; false for the others. */
static bool ggml_qtype(uint32_t ggml, amp_qtype *out) {
    for (int t = 0; t < AMP_QTYPE_COUNT; t++)
        if (amp_qtype_ggml_id((amp_qtype)t) == ggml) {
            *out = (amp_qtype)t;
            return true;
        }
    return false;
}

/* The tensor's blocks as a [rows = ne[1] * ne[2] * ne[3], cols = ne[0]] qtensor holding a reference to
 * the mapping. */
static amp_qtensor *wrap_q(const amp_gguf *f, const gguf_ti *t, amp_qtype qt) {
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3]; /* bounded by the validated byte count */
    atomic_fetch_add(&f->map->refs, 1);
    amp_qtensor *q = amp_qtensor_wrap(qt, rows, t->ne[0], f->buf + f->data_off + t->offset, (size_t)t->nbytes, map_release, f->map);
    if (!q) map_release(f->map); /* wrap failed: it holds nothing */
    return q;
}

/* A quantized tensor dequantized to dt in the file's shape (torch order). */
static amp_tensor *get_dequantized(const char *fn, const amp_gguf *f, const gguf_ti *t, amp_qtype qt, amp_dtype dt,
                                   const int64_t *shape) {
    amp_qtensor *q = wrap_q(f, t, qt);
    if (!q) return amp_error_chain_null(amp_last_status(), "%s: %s: tensor '%s'", fn, f->fname, t->name);
    amp_mem_push_category(amp__mem_current(AMP_MEM_DATA)); /* a loaded weight, unless the caller says otherwise */
    amp_tensor *d = amp_dequantize(q, dt);
    amp_mem_pop_category();
    amp_qtensor_free(q);
    if (!d) return amp_error_chain_null(amp_last_status(), "%s: %s: tensor '%s'", fn, f->fname, t->name);
    if (t->ndim == 2) return d;
    amp_tensor *r = amp_reshape(d, t->ndim, shape);
    amp_tensor_free(d);
    if (!r) return amp_error_chain_null(amp_last_status(), "%s: %s: tensor '%s'", fn, f->fname, t->name);
    return r;
}

amp_tensor *amp_gguf_get_tensor(const amp_gguf *f, const char *name, amp_dtype dt) {
    static const char *fn = "amp_gguf_get_tensor";
    const gguf_ti *t = ti_get(fn, f, name);
    if (!t) return NULL;
    if (dt != AMP_F32 && dt != AMP_F16 && dt != AMP_BF16)
        return amp_error_null(AMP_ERR_DTYPE, "%s: dt %s: a GGUF tensor converts to f32, f16 or bf16", fn, amp_dtype_name(dt));
    int64_t shape[GGUF_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) shape[d] = t->ne[t->ndim - 1 - d];
    amp_qtype qt;
    if (ggml_qtype(t->type, &qt)) return get_dequantized(fn, f, t, qt, dt, shape);
    if (t->type != GGML_F32 && t->type != GGML_F16 && t->type != GGML_BF16 && t->type != GGML_F64)
        return amp_error_null(AMP_ERR_UNSUPPORTED, "%s: %s: tensor '%s' is %s, which amp cannot convert to %s", fn, f->fname, name,
                              g_ggml[t->type].name, amp_dtype_name(dt));
    amp_tensor *out = amp__tensor_new(fn, dt, t->ndim, shape, amp__mem_current(AMP_MEM_DATA), 0);
    if (!out) return NULL;
    size_t n = (size_t)(t->nbytes / g_ggml[t->type].bytes);
    convert_plain(t->type, f->buf + f->data_off + t->offset, dt, amp__data(out), n);
    return out;
}

amp_qtensor *amp_gguf_get_qtensor(const amp_gguf *f, const char *name) {
    static const char *fn = "amp_gguf_get_qtensor";
    const gguf_ti *t = ti_get(fn, f, name);
    if (!t) return NULL;
    amp_qtype qt;
    if (!ggml_qtype(t->type, &qt)) {
        bool plain = t->type == GGML_F32 || t->type == GGML_F16 || t->type == GGML_BF16 || t->type == GGML_F64;
        return amp_error_null(plain ? AMP_ERR_DTYPE : AMP_ERR_UNSUPPORTED, "%s: %s: tensor '%s' is %s, %s", fn, f->fname, name,
                              g_ggml[t->type].name,
                              plain ? "not a quantized type (amp_gguf_get_tensor reads it)"
                                    : "a quantized type amp does not compute with (q8_0, q4_0, q4_1, q4_k, q6_k)");
    }
    if (t->ndim != 2)
        return amp_error_null(AMP_ERR_SHAPE, "%s: %s: tensor '%s' is %d-D: a qtensor is a matrix (amp_gguf_get_tensor dequantizes it)",
                              fn, f->fname, name, t->ndim);
    amp_qtensor *q = wrap_q(f, t, qt);
    if (!q) return amp_error_chain_null(amp_last_status(), "%s: %s: tensor '%s'", fn, f->fname, name);
    return q;
}
