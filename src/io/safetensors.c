/* safetensors: reader (strict validation), writer (sorted, padded, CRC-32 of
 * the data in the metadata, atomic replace). The JSON header goes through
 * cJSON; numbers we write are formatted by hand (as raw JSON) so offsets are
 * exact integers whatever their size. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "amp/checkpoint.h"
#include "io/io_util.h"
#include "io/safetensors_impl.h"
#include "tensor/tensor_impl.h"

#define MAX_SAFE_INT ((uint64_t)1 << 53) /* JSON numbers are doubles */

amp_status amp__error_wrap(amp_status st, const char *prefix) { return amp_error_chain(st, "%s", prefix); }

/* ---- dtypes ---------------------------------------------------------------------------- */
typedef struct {
    const char *name;
    size_t size;
    amp_dtype dt; /* AMP_DTYPE_COUNT: amp has no such dtype */
} st_dtype;

static const st_dtype g_dtypes[] = {
    {"F64", 8, AMP_F64},          {"F32", 4, AMP_F32},          {"F16", 2, AMP_F16},  {"BF16", 2, AMP_BF16},
    {"F8_E4M3", 1, AMP_F8E4M3},   {"F8_E5M2", 1, AMP_F8E5M2},   {"I64", 8, AMP_I64},  {"I32", 4, AMP_I32},
    {"U8", 1, AMP_U8},            {"I16", 2, AMP_DTYPE_COUNT},  {"I8", 1, AMP_DTYPE_COUNT},
    {"U16", 2, AMP_DTYPE_COUNT},  {"U32", 4, AMP_DTYPE_COUNT},  {"U64", 8, AMP_DTYPE_COUNT},
    {"BOOL", 1, AMP_DTYPE_COUNT},
};
#define N_DTYPES ((int)(sizeof g_dtypes / sizeof g_dtypes[0]))

static const st_dtype *dtype_by_name(const char *s) {
    for (int i = 0; i < N_DTYPES; i++)
        if (!strcmp(g_dtypes[i].name, s)) return &g_dtypes[i];
    return NULL;
}

static const char *st_name_of(amp_dtype dt) {
    for (int i = 0; i < N_DTYPES; i++)
        if (g_dtypes[i].dt == dt) return g_dtypes[i].name;
    return NULL;
}

/* ---- the parsed file ------------------------------------------------------------------- */
typedef struct {
    char *name;
    const st_dtype *dt;
    int ndim;
    int64_t shape[AMP_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;
} st_entry;

struct amp_safetensors {
    char *fname;
    unsigned char *buf;
    uint64_t len, hdr_len, data_len;
    const unsigned char *data;
    st_entry *e; /* sorted by begin */
    int n;
    int *by_name; /* indices sorted by name */
    char **mkeys, **mvals;
    int n_meta;
    int *mtab; /* open-addressing hash of the metadata keys: index + 1, 0 = empty */
    size_t mcap;
    bool has_crc;
};

void amp_safetensors_free(amp_safetensors *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) free(f->e[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->mkeys[i]);
        free(f->mvals[i]);
    }
    free(f->e);
    free(f->by_name);
    free(f->mkeys);
    free(f->mvals);
    free(f->mtab);
    free(f->buf);
    free(f->fname);
    free(f);
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON number that is an integer in [0, 2^53]. */
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0) || d > (double)MAX_SAFE_INT || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static int cmp_begin(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

typedef struct {
    const st_entry *e;
    int i;
} name_ref;

static int cmp_name_ref(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    return strcmp(x->e[x->i].name, y->e[y->i].name);
}

/* ---- string hash sets (metadata keys: a header may hold millions; pairwise
 * comparison made 80k keys take 19 s) ------------------------------------------------------------- */
static uint64_t str_hash(const char *s) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Slots for n keys: a power of two at least 2n (NULL when n is absurd). */
static int *hash_new(size_t n, size_t *cap) {
    size_t c = 16;
    while (c < 2 * n) {
        if (c > ((size_t)1 << 40)) return NULL;
        c *= 2;
    }
    *cap = c;
    return calloc(c, sizeof(int));
}

/* Index of key among keys[] through tab, or -1; when absent and insert >= 0,
 * insert index `insert` there. */
static int hash_find(int *tab, size_t cap, char *const *keys, const char *key, int insert) {
    size_t i = (size_t)str_hash(key) & (cap - 1);
    while (tab[i]) {
        if (!strcmp(keys[tab[i] - 1], key)) return tab[i] - 1;
        i = (i + 1) & (cap - 1);
    }
    if (insert >= 0) tab[i] = insert + 1;
    return -1;
}

static int find_meta(const amp_safetensors *f, const char *key) {
    if (!f->mtab) return -1;
    return hash_find(f->mtab, f->mcap, f->mkeys, key, -1);
}

static amp_status parse_meta(const char *fn, amp_safetensors *f, const cJSON *m) {
    if (!cJSON_IsObject(m)) return amp_error(AMP_ERR_FORMAT, "%s: %s: \"__metadata__\" is not an object", fn, f->fname);
    int cnt = cJSON_GetArraySize(m);
    f->mkeys = calloc((size_t)(cnt ? cnt : 1), sizeof *f->mkeys);
    f->mvals = calloc((size_t)(cnt ? cnt : 1), sizeof *f->mvals);
    f->mtab = hash_new((size_t)cnt, &f->mcap);
    if (!f->mkeys || !f->mvals || !f->mtab) return amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, f->fname);
    for (const cJSON *kv = m->child; kv; kv = kv->next) {
        const char *k = kv->string ? kv->string : "";
        if (!cJSON_IsString(kv) || !kv->valuestring)
            return amp_error(AMP_ERR_FORMAT, "%s: %s: metadata value of \"%.100s\" is not a string", fn, f->fname, k);
        f->mkeys[f->n_meta] = strdup(k);
        f->mvals[f->n_meta] = strdup(kv->valuestring);
        if (!f->mkeys[f->n_meta] || !f->mvals[f->n_meta]) {
            free(f->mkeys[f->n_meta]);
            free(f->mvals[f->n_meta]);
            f->mkeys[f->n_meta] = f->mvals[f->n_meta] = NULL;
            return amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, f->fname);
        }
        if (hash_find(f->mtab, f->mcap, f->mkeys, k, f->n_meta) >= 0) {
            f->n_meta++; /* owned: freed with the file */
            return amp_error(AMP_ERR_FORMAT, "%s: %s: metadata key \"%.100s\" appears twice", fn, f->fname, k);
        }
        f->n_meta++;
    }
    return AMP_OK;
}

static amp_status parse_entry(const char *fn, amp_safetensors *f, const cJSON *t, st_entry *e) {
    const char *nm = e->name;
    if (!cJSON_IsObject(t)) return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': entry is not an object", fn, f->fname, nm);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsString(jd) || !jd->valuestring)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': \"dtype\" is missing or not a string", fn, f->fname, nm);
    e->dt = dtype_by_name(jd->valuestring);
    if (!e->dt) return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': unknown dtype \"%.40s\"", fn, f->fname, nm, jd->valuestring);
    if (!cJSON_IsArray(js)) return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': \"shape\" is missing or not an array", fn, f->fname, nm);
    int nd = cJSON_GetArraySize(js);
    if (nd > AMP_MAX_DIMS)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': rank %d is more than amp's %d dimensions", fn, f->fname, nm, nd,
                         AMP_MAX_DIMS);
    e->ndim = nd;
    /* numel * element size may not exceed the data section: bounds every product below */
    uint64_t numel = 1;
    bool zero = false;
    int d = 0;
    for (const cJSON *s = js->child; s; s = s->next, d++) {
        uint64_t v;
        if (!json_uint(s, &v))
            return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': shape entry %d is not a non-negative integer", fn, f->fname,
                             nm, d);
        if (v > (uint64_t)INT64_MAX / 2)
            return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': shape entry %d (%" PRIu64 ") is too large", fn, f->fname,
                             nm, d, v);
        e->shape[d] = (int64_t)v;
        if (v == 0) zero = true;
        else if (!zero) {
            if (numel > f->data_len / v + 1) numel = f->data_len + 1; /* saturate: cannot fit */
            else numel *= v;
        }
    }
    if (zero) numel = 0;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &e->begin) ||
        !json_uint(jo->child->next, &e->end))
        return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': \"data_offsets\" is not [begin, end] with non-negative integers", fn,
                         f->fname, nm);
    if (e->begin > e->end)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin", fn,
                         f->fname, nm, e->begin, e->end);
    if (e->end > f->data_len)
        return amp_error(AMP_ERR_FORMAT,
                         "%s: %s: tensor '%.200s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the data section (%" PRIu64
                         " bytes)",
                         fn, f->fname, nm, e->begin, e->end, f->data_len);
    if (numel > f->data_len || numel * e->dt->size != e->end - e->begin) {
        char sb[AMP_SHAPE_BUF];
        return amp_error(AMP_ERR_FORMAT,
                         "%s: %s: tensor '%.200s': %s %s needs %s bytes but data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64,
                         fn, f->fname, nm, e->dt->name, amp__shape_fmt(e->ndim, e->shape, sb, sizeof sb),
                         numel > f->data_len ? "more" : "a different number of", e->begin, e->end, e->end - e->begin);
    }
    e->numel = (int64_t)numel;
    return AMP_OK;
}

/* Validates f->buf (f->len bytes) and fills the tables. */
static amp_status parse_image(const char *fn, amp_safetensors *f) {
    if (f->len < 8)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: truncated: %" PRIu64 " bytes, a safetensors file starts with an 8-byte header length",
                         fn, f->fname, f->len);
    uint64_t hl = le64(f->buf);
    if (hl > AMP_SAFETENSORS_MAX_HEADER)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: header length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes", fn, f->fname, hl,
                         AMP_SAFETENSORS_MAX_HEADER);
    if (hl > f->len - 8)
        return amp_error(AMP_ERR_FORMAT, "%s: %s: header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)", fn,
                         f->fname, hl, f->len);
    if (hl < 2 || f->buf[8] != '{')
        return amp_error(AMP_ERR_FORMAT, "%s: %s: the header is not a JSON object (it must start with '{')", fn, f->fname);
    f->hdr_len = hl;
    f->data = f->buf + 8 + hl;
    f->data_len = f->len - 8 - hl;
    const char *hdr = (const char *)f->buf + 8, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hl, &end, false);
    if (!root) {
        size_t at = end && end >= hdr ? (size_t)(end - hdr) : 0;
        return amp_error(AMP_ERR_FORMAT, "%s: %s: the header is not valid JSON (error near byte %zu of %" PRIu64 ")", fn, f->fname, at,
                         hl);
    }
    amp_status st = AMP_OK;
    for (const char *p = end; p < hdr + hl; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: unexpected bytes after the JSON header (at byte %zu of %" PRIu64 ")", fn, f->fname,
                           (size_t)(p - hdr), hl);
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        st = amp_error(AMP_ERR_FORMAT, "%s: %s: the header is not a JSON object", fn, f->fname);
        goto done;
    }
    int cnt = cJSON_GetArraySize(root);
    f->e = calloc((size_t)(cnt ? cnt : 1), sizeof *f->e);
    if (!f->e) {
        st = amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, f->fname);
        goto done;
    }
    bool seen_meta = false;
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *key = it->string ? it->string : "";
        if (!strcmp(key, "__metadata__")) {
            if (seen_meta) {
                st = amp_error(AMP_ERR_FORMAT, "%s: %s: \"__metadata__\" appears twice", fn, f->fname);
                goto done;
            }
            seen_meta = true;
            if ((st = parse_meta(fn, f, it))) goto done;
            continue;
        }
        if (!*key) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: a tensor has an empty name", fn, f->fname);
            goto done;
        }
        st_entry *e = &f->e[f->n];
        e->name = strdup(key);
        if (!e->name) {
            st = amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, f->fname);
            goto done;
        }
        f->n++;
        if ((st = parse_entry(fn, f, it, e))) goto done;
    }
    /* unique names */
    f->by_name = malloc(sizeof(int) * (size_t)(f->n ? f->n : 1));
    name_ref *refs = malloc(sizeof *refs * (size_t)(f->n ? f->n : 1));
    if (!f->by_name || !refs) {
        free(refs);
        st = amp_error(AMP_ERR_NOMEM, "%s: %s: out of memory", fn, f->fname);
        goto done;
    }
    /* data order: sort the entries themselves, then index them by name */
    qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_begin);
    for (int i = 0; i < f->n; i++) refs[i] = (name_ref){f->e, i};
    qsort(refs, (size_t)f->n, sizeof *refs, cmp_name_ref);
    for (int i = 0; i < f->n; i++) f->by_name[i] = refs[i].i;
    free(refs);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->e[f->by_name[i]].name, f->e[f->by_name[i - 1]].name)) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s' appears twice", fn, f->fname, f->e[f->by_name[i]].name);
            goto done;
        }
    /* contiguous, non-overlapping, covering the whole data section */
    uint64_t expect = 0;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->e[i];
        if (e->begin != expect) {
            if (i == 0)
                st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s' starts at byte %" PRIu64 ": the data section must start with a tensor",
                               fn, f->fname, e->name, e->begin);
            else if (e->begin < expect)
                st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensors '%.200s' and '%.200s' overlap (bytes %" PRIu64 "..%" PRIu64 ")", fn, f->fname,
                               f->e[i - 1].name, e->name, e->begin, expect);
            else
                st = amp_error(AMP_ERR_FORMAT, "%s: %s: a gap of %" PRIu64 " bytes between tensors '%.200s' and '%.200s'", fn, f->fname,
                               e->begin - expect, f->e[i - 1].name, e->name);
            goto done;
        }
        expect = e->end;
    }
    if (expect != f->data_len) {
        st = amp_error(AMP_ERR_FORMAT, "%s: %s: the data section holds %" PRIu64 " bytes but the tensors cover %" PRIu64, fn, f->fname,
                       f->data_len, expect);
        goto done;
    }
    int ci = find_meta(f, "data_crc32");
    if (ci >= 0) {
        const char *v = f->mvals[ci];
        char *ep = NULL;
        errno = 0;
        unsigned long rec = strtoul(v, &ep, 16);
        if (strlen(v) != 8 || *ep || errno || rec > 0xffffffffUL) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: metadata data_crc32 \"%.40s\" is not 8 hex digits", fn, f->fname, v);
            goto done;
        }
        uLong crc = crc32_z(0L, f->data, (z_size_t)f->data_len);
        if ((unsigned long)crc != rec) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: checksum mismatch: data_crc32 records %08lx, the data gives %08lx (corrupt file)", fn,
                           f->fname, rec, (unsigned long)crc);
            goto done;
        }
        f->has_crc = true;
    }
done:
    cJSON_Delete(root);
    return st;
}

static amp_safetensors *st_new(const char *fn, const char *name) {
    amp_safetensors *f = calloc(1, sizeof *f);
    if (f) f->fname = strdup(name ? name : "(memory)");
    if (!f || !f->fname) {
        free(f);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    return f;
}

amp_safetensors *amp_safetensors_parse(const void *buf, size_t len, const char *name) {
    static const char *fn = "amp_safetensors_parse";
    if (!buf && len) return amp_error_null(AMP_ERR_ARG, "%s: buf is NULL", fn);
    amp_safetensors *f = st_new(fn, name);
    if (!f) return NULL;
    f->buf = malloc(len ? len : 1);
    if (!f->buf) {
        amp_safetensors_free(f);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, len);
    }
    if (len) memcpy(f->buf, buf, len);
    f->len = len;
    if (parse_image(fn, f) != AMP_OK) {
        amp_safetensors_free(f);
        return NULL;
    }
    return f;
}

amp_safetensors *amp_safetensors_read(const char *path) {
    static const char *fn = "amp_safetensors_read";
    if (!path) return amp_error_null(AMP_ERR_ARG, "%s: path is NULL", fn);
    int fd = amp__open_regular(fn, path); /* a FIFO would block open() forever */
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return amp_error_null(AMP_ERR_IO, "%s: cannot stat %s: %s", fn, path, strerror(errno));
    }
    amp_safetensors *f = st_new(fn, path);
    if (!f) {
        close(fd);
        return NULL;
    }
    size_t len = (size_t)sb.st_size;
    f->buf = malloc(len ? len : 1);
    if (!f->buf) {
        close(fd);
        amp_safetensors_free(f);
        return amp_error_null(AMP_ERR_NOMEM, "%s: %s: out of memory for %zu bytes", fn, path, len);
    }
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, f->buf + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != len) {
        amp_safetensors_free(f);
        return amp_error_null(AMP_ERR_IO, "%s: %s: read %zu of %zu bytes", fn, path, got, len);
    }
    f->len = len;
    if (parse_image(fn, f) != AMP_OK) {
        amp_safetensors_free(f);
        return NULL;
    }
    return f;
}

int amp_safetensors_count(const amp_safetensors *f) {
    if (!f) return amp_error_neg(AMP_ERR_ARG, "amp_safetensors_count: f is NULL");
    return f->n;
}

amp_status amp_safetensors_info_at(const amp_safetensors *f, int i, amp_safetensors_info *out) {
    if (!f || !out) return amp_error(AMP_ERR_ARG, "amp_safetensors_info_at: NULL argument");
    if (i < 0 || i >= f->n) return amp_error(AMP_ERR_ARG, "amp_safetensors_info_at: index %d is outside [0, %d)", i, f->n);
    const st_entry *e = &f->e[i];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->dtype_name = e->dt->name;
    out->dtype = e->dt->dt;
    out->ndim = e->ndim;
    memcpy(out->shape, e->shape, sizeof out->shape);
    out->numel = e->numel;
    out->begin = e->begin;
    out->end = e->end;
    out->data = f->data + e->begin;
    return AMP_OK;
}

int amp_safetensors_find(const amp_safetensors *f, const char *name) {
    if (!f || !name) return amp_error_neg(AMP_ERR_ARG, "amp_safetensors_find: NULL argument");
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->e[f->by_name[mid]].name, name);
        if (!c) return f->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

amp_tensor *amp_safetensors_get(const amp_safetensors *f, const char *name) {
    static const char *fn = "amp_safetensors_get";
    if (!f || !name) return amp_error_null(AMP_ERR_ARG, "%s: NULL argument", fn);
    int i = amp_safetensors_find(f, name);
    if (i < 0) return amp_error_null(AMP_ERR_ARG, "%s: %s: no tensor named '%.200s'", fn, f->fname, name);
    const st_entry *e = &f->e[i];
    if (e->dt->dt == AMP_DTYPE_COUNT)
        return amp_error_null(AMP_ERR_DTYPE, "%s: %s: tensor '%.200s' has dtype %s, which amp does not support", fn, f->fname, name,
                              e->dt->name);
    amp_tensor *t = amp__tensor_new(fn, e->dt->dt, e->ndim, e->shape, amp__mem_current(AMP_MEM_DATA), 0);
    if (!t) return NULL;
    if (e->end > e->begin) memcpy(amp__data(t), f->data + e->begin, (size_t)(e->end - e->begin));
    return t;
}

int amp_safetensors_meta_count(const amp_safetensors *f) {
    if (!f) return amp_error_neg(AMP_ERR_ARG, "amp_safetensors_meta_count: f is NULL");
    return f->n_meta;
}

const char *amp_safetensors_meta_key(const amp_safetensors *f, int i) {
    if (!f || i < 0 || i >= f->n_meta) return amp_error_null(AMP_ERR_ARG, "amp_safetensors_meta_key: bad file or index %d", i);
    return f->mkeys[i];
}

const char *amp_safetensors_meta(const amp_safetensors *f, const char *key) {
    if (!f || !key) return amp_error_null(AMP_ERR_ARG, "amp_safetensors_meta: NULL argument");
    int i = find_meta(f, key);
    return i >= 0 ? f->mvals[i] : NULL;
}

uint64_t amp_safetensors_file_bytes(const amp_safetensors *f) { return f ? f->len : 0; }
uint64_t amp_safetensors_header_bytes(const amp_safetensors *f) { return f ? f->hdr_len : 0; }
uint64_t amp_safetensors_data_bytes(const amp_safetensors *f) { return f ? f->data_len : 0; }
bool amp_safetensors_has_crc(const amp_safetensors *f) { return f && f->has_crc; }

/* ---- writing ------------------------------------------------------------------------------- */
typedef struct {
    const char *name;
    const amp_tensor *t;
    const void *bytes; /* contiguous data */
    void *owned;       /* copy for non-contiguous tensors */
    size_t nbytes;
    uint64_t begin;
} w_item;

typedef struct {
    w_item *items;
    int n;
    char *header; /* padded JSON */
    size_t hlen;
    uint64_t data_len;
} w_plan;

static void plan_free(w_plan *p) {
    if (p->items)
        for (int i = 0; i < p->n; i++) free(p->items[i].owned);
    free(p->items);
    free(p->header);
    memset(p, 0, sizeof *p);
}

static int cmp_item(const void *a, const void *b) { return strcmp(((const w_item *)a)->name, ((const w_item *)b)->name); }

static bool add_raw_u64(cJSON *arr, uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, v);
    cJSON *r = cJSON_CreateRaw(b);
    return r && cJSON_AddItemToArray(arr, r);
}

static amp_status plan_build(const char *fn, amp_tensor *const *tensors, const char *const *names, int n, const amp_kv *meta,
                             int n_meta, w_plan *p) {
    memset(p, 0, sizeof *p);
    if (n < 0 || n_meta < 0) return amp_error(AMP_ERR_ARG, "%s: n %d / n_meta %d must be >= 0", fn, n, n_meta);
    if (n > 0 && (!tensors || !names)) return amp_error(AMP_ERR_ARG, "%s: tensors or names is NULL", fn);
    if (n_meta > 0 && !meta) return amp_error(AMP_ERR_ARG, "%s: meta is NULL", fn);
    size_t hcap = 0;
    int *htab = n_meta > 0 ? hash_new((size_t)n_meta, &hcap) : NULL;
    char **hkeys = n_meta > 0 ? calloc((size_t)n_meta, sizeof *hkeys) : NULL;
    if (n_meta > 0 && (!htab || !hkeys)) {
        free(htab);
        free(hkeys);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    for (int i = 0; i < n_meta; i++) {
        const char *bad = NULL;
        if (!meta[i].key || !meta[i].value) bad = "has a NULL key or value";
        else if (!strcmp(meta[i].key, "data_crc32")) bad = "uses the key data_crc32, which is reserved (the writer records it)";
        else {
            hkeys[i] = (char *)meta[i].key;
            if (hash_find(htab, hcap, hkeys, meta[i].key, i) >= 0) bad = "repeats an earlier key";
        }
        if (bad) {
            free(htab);
            free(hkeys);
            if (meta[i].key && strcmp(meta[i].key, "data_crc32"))
                return amp_error(AMP_ERR_ARG, "%s: metadata key \"%.100s\" given twice", fn, meta[i].key);
            if (meta[i].key) return amp_error(AMP_ERR_ARG, "%s: metadata key data_crc32 is reserved (the writer records it)", fn);
            return amp_error(AMP_ERR_ARG, "%s: metadata entry %d %s", fn, i, bad);
        }
    }
    free(htab);
    free(hkeys);
    p->items = calloc((size_t)(n ? n : 1), sizeof *p->items);
    if (!p->items) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    p->n = n;
    for (int i = 0; i < n; i++) {
        const amp_tensor *t = tensors[i];
        const char *nm = names[i];
        if (!nm || !*nm || !strcmp(nm, "__metadata__"))
            return amp_error(AMP_ERR_ARG, "%s: tensor %d has an invalid name (NULL, empty or \"__metadata__\")", fn, i);
        if (!t) return amp_error(AMP_ERR_ARG, "%s: tensor '%.200s' is NULL", fn, nm);
        if (!amp__live(fn, t)) return AMP_ERR_STATE;
        if (!st_name_of(t->dtype)) return amp_error(AMP_ERR_DTYPE, "%s: tensor '%.200s': dtype %d cannot be stored", fn, nm, (int)t->dtype);
        w_item *it = &p->items[i];
        it->name = nm;
        it->t = t;
        it->nbytes = amp_tensor_nbytes(t);
        if (it->nbytes == 0 || (amp_tensor_is_contiguous(t) && amp__dev(t) == AMP_DEVICE_CPU)) {
            it->bytes = it->nbytes ? amp__data(t) : "";
        } else { /* strided, or in a device's memory: a host copy (copy_out waits for the device) */
            it->owned = malloc(it->nbytes);
            if (!it->owned) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            if (amp_tensor_copy_out(t, it->owned, t->dtype) != AMP_OK) return amp_last_status();
            it->bytes = it->owned;
        }
    }
    qsort(p->items, (size_t)n, sizeof *p->items, cmp_item);
    for (int i = 1; i < n; i++)
        if (!strcmp(p->items[i].name, p->items[i - 1].name))
            return amp_error(AMP_ERR_ARG, "%s: tensor name '%.200s' is used twice", fn, p->items[i].name);
    uLong crc = crc32_z(0L, Z_NULL, 0);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        p->items[i].begin = off;
        off += p->items[i].nbytes;
        crc = crc32_z(crc, p->items[i].bytes, p->items[i].nbytes);
    }
    p->data_len = off;
    /* JSON: __metadata__ first, then the tensors by name */
    amp_status st = AMP_OK;
    cJSON *root = cJSON_CreateObject(), *m = cJSON_CreateObject();
    if (!root || !m) {
        cJSON_Delete(root);
        cJSON_Delete(m);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    cJSON_AddItemToObject(root, "__metadata__", m);
    bool ok = true;
    for (int i = 0; i < n_meta && ok; i++) ok = cJSON_AddStringToObject(m, meta[i].key, meta[i].value) != NULL;
    char crcs[16];
    snprintf(crcs, sizeof crcs, "%08lx", (unsigned long)crc);
    ok = ok && cJSON_AddStringToObject(m, "data_crc32", crcs) != NULL;
    for (int i = 0; i < n && ok; i++) {
        const w_item *it = &p->items[i];
        cJSON *o = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *of = cJSON_CreateArray();
        ok = o && sh && of;
        if (ok) {
            cJSON_AddItemToObject(root, it->name, o);
            ok = cJSON_AddStringToObject(o, "dtype", st_name_of(it->t->dtype)) != NULL;
            cJSON_AddItemToObject(o, "shape", sh);
            cJSON_AddItemToObject(o, "data_offsets", of);
            for (int d = 0; d < it->t->ndim && ok; d++) ok = add_raw_u64(sh, (uint64_t)it->t->shape[d]);
            ok = ok && add_raw_u64(of, it->begin) && add_raw_u64(of, it->begin + it->nbytes);
        } else {
            cJSON_Delete(o);
            cJSON_Delete(sh);
            cJSON_Delete(of);
        }
    }
    char *txt = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!txt) return amp_error(AMP_ERR_NOMEM, "%s: out of memory building the header", fn);
    size_t L = strlen(txt), padded = (L + 7) / 8 * 8;
    if ((uint64_t)padded > AMP_SAFETENSORS_MAX_HEADER) {
        cJSON_free(txt);
        return amp_error(AMP_ERR_RANGE, "%s: the header would be %zu bytes, more than the %" PRIu64 " readers accept", fn, padded,
                         AMP_SAFETENSORS_MAX_HEADER);
    }
    p->header = malloc(8 + padded);
    if (!p->header) st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    else {
        uint64_t hl = padded;
        for (int i = 0; i < 8; i++) p->header[i] = (char)(hl >> (8 * i));
        memcpy(p->header + 8, txt, L);
        memset(p->header + 8 + L, ' ', padded - L);
        p->hlen = 8 + padded;
    }
    cJSON_free(txt);
    return st;
}

amp_status amp_safetensors_encode(amp_tensor *const *tensors, const char *const *names, int n, const amp_kv *meta, int n_meta,
                                  void **buf, size_t *len) {
    static const char *fn = "amp_safetensors_encode";
    if (!buf || !len) return amp_error(AMP_ERR_ARG, "%s: buf or len is NULL", fn);
    *buf = NULL;
    *len = 0;
    w_plan p;
    amp_status st = plan_build(fn, tensors, names, n, meta, n_meta, &p);
    if (st) {
        plan_free(&p);
        return st;
    }
    size_t total = p.hlen + (size_t)p.data_len;
    char *out = malloc(total);
    if (!out) {
        plan_free(&p);
        return amp_error(AMP_ERR_NOMEM, "%s: out of memory for %zu bytes", fn, total);
    }
    memcpy(out, p.header, p.hlen);
    for (int i = 0; i < p.n; i++) memcpy(out + p.hlen + p.items[i].begin, p.items[i].bytes, p.items[i].nbytes);
    plan_free(&p);
    *buf = out;
    *len = total;
    return AMP_OK;
}

static amp_status write_all(FILE *f, const void *p, size_t n) { return fwrite(p, 1, n, f) == n ? AMP_OK : AMP_ERR_IO; }

amp_status amp__st_write_file(const char *fn, const char *path, amp_tensor *const *tensors, const char *const *names, int n,
                              const amp_kv *meta, int n_meta) {
    w_plan p;
    amp_status st = plan_build(fn, tensors, names, n, meta, n_meta, &p);
    if (st) {
        plan_free(&p);
        return st;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        plan_free(&p);
        return amp_error(AMP_ERR_IO, "%s: cannot create %s: %s", fn, path, strerror(e));
    }
    st = write_all(f, p.header, p.hlen);
    for (int i = 0; i < p.n && !st; i++) st = write_all(f, p.items[i].bytes, p.items[i].nbytes);
    plan_free(&p);
    if (!st && fflush(f) != 0) st = AMP_ERR_IO;
    if (!st && fsync(fileno(f)) != 0) st = AMP_ERR_IO;
    int e = errno;
    if (fclose(f) != 0 && !st) {
        st = AMP_ERR_IO;
        e = errno;
    }
    if (st) {
        unlink(path);
        return amp_error(AMP_ERR_IO, "%s: cannot write %s: %s", fn, path, strerror(e));
    }
    return AMP_OK;
}

static amp_status fsync_dir_of(const char *fn, const char *path) {
    char *d = strdup(path);
    if (!d) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    char *slash = strrchr(d, '/');
    const char *dir = ".";
    if (slash == d) dir = "/";
    else if (slash) {
        *slash = 0;
        dir = d;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    amp_status st = AMP_OK;
    if (fd < 0 || fsync(fd) != 0) {
        /* some file systems refuse fsync on directories (EINVAL): the rename still happened */
        if (fd < 0 || (errno != EINVAL && errno != EROFS))
            st = amp_error(AMP_ERR_IO, "%s: cannot sync directory %s: %s", fn, dir, strerror(errno));
    }
    if (fd >= 0) close(fd);
    free(d);
    return st;
}

amp_status amp__rename_durable(const char *fn, const char *from, const char *to) {
    if (rename(from, to) != 0) return amp_error(AMP_ERR_IO, "%s: cannot rename %s to %s: %s", fn, from, to, strerror(errno));
    return fsync_dir_of(fn, to);
}

amp_status amp_safetensors_write(const char *path, amp_tensor *const *tensors, const char *const *names, int n, const amp_kv *meta,
                                 int n_meta) {
    static const char *fn = "amp_safetensors_write";
    if (!path || !*path) return amp_error(AMP_ERR_ARG, "%s: path is NULL or empty", fn);
    size_t L = strlen(path) + 8;
    char *tmp = malloc(L);
    if (!tmp) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    snprintf(tmp, L, "%s.tmp", path);
    amp_status st = amp__st_write_file(fn, tmp, tensors, names, n, meta, n_meta);
    if (!st) {
        st = amp__rename_durable(fn, tmp, path);
        if (st) unlink(tmp);
    }
    free(tmp);
    return st;
}

char *amp__st_peek_meta(const char *path, const char *key) {
    FILE *f = amp__fopen_regular("amp", path);
    if (!f) {
        amp_clear_error();
        return NULL;
    }
    unsigned char lb[8];
    char *out = NULL, *hdr = NULL;
    cJSON *root = NULL;
    if (fread(lb, 1, 8, f) != 8) goto done;
    uint64_t hl = le64(lb);
    if (hl < 2 || hl > AMP_SAFETENSORS_MAX_HEADER) goto done;
    hdr = malloc((size_t)hl);
    if (!hdr || fread(hdr, 1, (size_t)hl, f) != hl) goto done;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)hl, NULL, false);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
    if (cJSON_IsString(v) && v->valuestring) out = strdup(v->valuestring);
done:
    cJSON_Delete(root);
    free(hdr);
    fclose(f);
    return out;
}

/* ---- models ---------------------------------------------------------------------------------- */
/* Every name of the state (a shared tensor under each of its names). */
static int module_state(const char *fn, amp_module *m, amp_tensor ***ts, const char ***names) {
    *ts = NULL;
    *names = NULL;
    int n = amp_module_state(m, NULL, NULL, 0);
    if (n < 0) return -1;
    *ts = calloc((size_t)(n ? n : 1), sizeof **ts);
    *names = calloc((size_t)(n ? n : 1), sizeof **names);
    if (!*ts || !*names) {
        free(*ts);
        free(*names);
        amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        return -1;
    }
    if (amp_module_state(m, *ts, *names, n) != n) {
        free(*ts);
        free(*names);
        return -1;
    }
    return n;
}

int amp__module_file_state(const char *fn, amp_module *m, amp_tensor ***ts, const char ***names) {
    int n = module_state(fn, m, ts, names);
    if (n < 0) return -1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        bool dup = false;
        for (int j = 0; j < k && !dup; j++) dup = (*ts)[j] == (*ts)[i];
        if (dup) continue;
        (*ts)[k] = (*ts)[i];
        (*names)[k] = (*names)[i];
        k++;
    }
    return k;
}

amp_status amp_model_save(amp_module *m, const char *path, const amp_kv *meta, int n_meta) {
    static const char *fn = "amp_model_save";
    if (!m || !path) return amp_error(AMP_ERR_ARG, "%s: module or path is NULL", fn);
    amp_tensor **ts;
    const char **names;
    int n = amp__module_file_state(fn, m, &ts, &names);
    if (n < 0) return amp_last_status();
    amp_status st = amp_safetensors_write(path, ts, names, n, meta, n_meta);
    free(ts);
    free(names);
    if (st) return amp__error_wrap(st, fn);
    return AMP_OK;
}

static bool compatible(amp_dtype file, amp_dtype model) {
    if (file == AMP_DTYPE_COUNT) return false;
    return amp_dtype_is_float(file) == amp_dtype_is_float(model);
}

amp_status amp_module_load_safetensors(amp_module *m, const amp_safetensors *f) {
    static const char *fn = "amp_module_load_safetensors";
    if (!m || !f) return amp_error(AMP_ERR_ARG, "%s: module or file is NULL", fn);
    amp_tensor **ts;
    const char **names;
    int n = module_state(fn, m, &ts, &names);
    if (n < 0) return amp_last_status();
    amp_status st = AMP_OK;
    int *idx = malloc(sizeof(int) * (size_t)(n ? n : 1));
    if (!idx) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    /* check everything first: a failed load changes nothing */
    for (int i = 0; i < n; i++) idx[i] = amp_safetensors_find(f, names[i]);
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0) {
            /* a shared (tied) tensor needs one of its names in the file */
            bool alias = false;
            for (int j = 0; j < n && !alias; j++) alias = j != i && ts[j] == ts[i] && idx[j] >= 0;
            if (alias) continue;
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%s' is missing (the %s model expects it, shape %s)", fn, f->fname, names[i],
                           amp_module_kind(m), amp_shape_str(ts[i], (char[AMP_SHAPE_BUF]){0}, AMP_SHAPE_BUF));
            goto out;
        }
        const st_entry *e = &f->e[idx[i]];
        char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
        if (e->ndim != ts[i]->ndim || memcmp(e->shape, ts[i]->shape, sizeof(int64_t) * (size_t)e->ndim)) {
            st = amp_error(AMP_ERR_SHAPE, "%s: %s: tensor '%s' has shape %s in the file; the model expects %s", fn, f->fname, names[i],
                           amp__shape_fmt(e->ndim, e->shape, a, sizeof a), amp__shape_fmt(ts[i]->ndim, ts[i]->shape, b, sizeof b));
            goto out;
        }
        if (!compatible(e->dt->dt, ts[i]->dtype)) {
            st = amp_error(AMP_ERR_DTYPE, "%s: %s: tensor '%s' has dtype %s in the file; the model holds %s", fn, f->fname, names[i],
                           e->dt->name, amp_dtype_name(ts[i]->dtype));
            goto out;
        }
    }
    for (int j = 0; j < f->n; j++) {
        bool used = false;
        for (int i = 0; i < n && !used; i++) used = idx[i] == j;
        if (!used) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: unexpected tensor '%.200s' (not part of the %s model)", fn, f->fname, f->e[j].name,
                           amp_module_kind(m));
            goto out;
        }
    }
    for (int i = 0; i < n && !st; i++) {
        if (idx[i] < 0) continue;
        bool done = false; /* a shared tensor loads from its first name found */
        for (int j = 0; j < i && !done; j++) done = ts[j] == ts[i] && idx[j] >= 0;
        if (done) continue;
        const st_entry *e = &f->e[idx[i]];
        /* the file's data need not be aligned for its dtype (safetensors pads nothing): copy then */
        const void *p = f->data + e->begin;
        amp_tensor *src = ((uintptr_t)p % e->dt->size) ? amp_tensor_from_data(p, e->dt->dt, e->ndim, e->shape)
                                                      : amp_tensor_borrow((void *)p, e->dt->dt, e->ndim, e->shape);
        if (!src) {
            st = amp_last_status();
            break;
        }
        st = amp__copy_convert(ts[i], src);
        amp__bump_version(ts[i]);
        amp_tensor_free(src);
        if (st) {
            char pre[512];
            snprintf(pre, sizeof pre, "%s: %s: tensor '%s'", fn, f->fname, names[i]);
            st = amp__error_wrap(st, pre);
        }
    }
out:
    free(idx);
    free(ts);
    free(names);
    return st;
}

amp_status amp_model_load(amp_module *m, const char *path) {
    static const char *fn = "amp_model_load";
    if (!m || !path) return amp_error(AMP_ERR_ARG, "%s: module or path is NULL", fn);
    amp_safetensors *f = amp_safetensors_read(path);
    if (!f) return amp__error_wrap(amp_last_status(), fn);
    amp_status st = amp_module_load_safetensors(m, f);
    amp_safetensors_free(f);
    if (st) return amp__error_wrap(st, fn);
    return AMP_OK;
}
