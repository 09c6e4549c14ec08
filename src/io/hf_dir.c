/* Hugging Face model directories (amp/pretrained.h): config.json through
 * cJSON, the weights through the safetensors reader (each file validated as
 * amp_safetensors_read validates one), the shard index cross-checked
 * against the shards in both directions. */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "amp/pretrained.h"
#include "core/error.h"
#include "io/io_util.h"
#include "tensor/tensor_impl.h"

#define HF_MAX_JSON ((off_t)64 << 20) /* config.json / the index: 64 MiB is far beyond any real one */
#define HF_CONFIG "config.json"
#define HF_SINGLE "model.safetensors"
#define HF_INDEX "model.safetensors.index.json"

typedef struct {
    const char *name; /* owned by the file's amp_safetensors */
    int file;
} hf_entry;

struct amp_hf_dir {
    char *path;
    char *config_path;
    cJSON *config;
    amp_safetensors **files;
    char **file_names; /* paths, as errors name them */
    int n_files;
    hf_entry *t; /* sorted by name */
    int n;
};

void amp_hf_dir_close(amp_hf_dir *d) {
    if (!d) return;
    for (int i = 0; i < d->n_files; i++) {
        amp_safetensors_free(d->files[i]);
        free(d->file_names[i]);
    }
    free(d->files);
    free(d->file_names);
    free(d->t);
    cJSON_Delete(d->config);
    free(d->config_path);
    free(d->path);
    free(d);
}

/* dir + "/" + name, malloc'd; NULL with the error. */
static char *join(const char *fn, const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The JSON object in the file at path (size checked before reading). */
static cJSON *read_json(const char *fn, const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > HF_MAX_JSON)
        return amp_error_null(AMP_ERR_FORMAT, "%s: %s is %lld bytes; a JSON file of a model directory is at most %lld", fn, path,
                              (long long)sb.st_size, (long long)HF_MAX_JSON);
    size_t n;
    char *text = amp__read_regular(fn, path, &n);
    if (!text) return NULL;
    if (strlen(text) != n) {
        free(text);
        return amp_error_null(AMP_ERR_FORMAT, "%s: %s: not JSON (a NUL byte in the text)", fn, path);
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, true);
    if (!j) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        free(text);
        return amp_error_null(AMP_ERR_FORMAT, "%s: %s: not valid JSON (near byte %zu)", fn, path, at);
    }
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return amp_error_null(AMP_ERR_FORMAT, "%s: %s: the top level is not a JSON object", fn, path);
    }
    return j;
}

/* Reads the safetensors file `name` of the directory as file number d->n_files. */
static int add_file(const char *fn, amp_hf_dir *d, const char *name) {
    char *p = join(fn, d->path, name);
    if (!p) return -1;
    amp_safetensors *f = amp_safetensors_read(p);
    if (!f) {
        amp_error_chain(amp_last_status(), "%s: %s", fn, d->path);
        free(p);
        return -1;
    }
    d->files[d->n_files] = f;
    d->file_names[d->n_files] = p;
    return d->n_files++;
}

static int cmp_entry(const void *a, const void *b) {
    const hf_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->file > y->file) - (x->file < y->file);
}

static int find_entry(const amp_hf_dir *d, const char *name) {
    int lo = 0, hi = d->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(d->t[mid].name, name);
        if (!c) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* The table of every file's tensors, sorted; a name in two files is an error. */
static amp_status build_table(const char *fn, amp_hf_dir *d) {
    int64_t total = 0;
    for (int i = 0; i < d->n_files; i++) total += amp_safetensors_count(d->files[i]);
    if (total > INT32_MAX / 2) return amp_error(AMP_ERR_FORMAT, "%s: %s: %" PRId64 " tensors is too many", fn, d->path, total);
    d->t = malloc(sizeof *d->t * (size_t)(total ? total : 1));
    if (!d->t) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    for (int i = 0; i < d->n_files; i++) {
        int c = amp_safetensors_count(d->files[i]);
        for (int k = 0; k < c; k++) {
            amp_safetensors_info in;
            if (amp_safetensors_info_at(d->files[i], k, &in)) return amp_last_status();
            d->t[d->n++] = (hf_entry){in.name, i};
        }
    }
    qsort(d->t, (size_t)d->n, sizeof *d->t, cmp_entry);
    for (int i = 1; i < d->n; i++)
        if (!strcmp(d->t[i].name, d->t[i - 1].name))
            return amp_error(AMP_ERR_FORMAT, "%s: tensor '%.200s' is in two shards: %s and %s", fn, d->t[i].name,
                             d->file_names[d->t[i - 1].file], d->file_names[d->t[i].file]);
    return AMP_OK;
}

typedef struct {
    const char *name, *shard;
} map_ref;

static int cmp_map_ref(const void *a, const void *b) { return strcmp(((const map_ref *)a)->name, ((const map_ref *)b)->name); }
static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static const map_ref *map_find(const map_ref *m, int n, const char *name) {
    map_ref key = {name, NULL};
    return bsearch(&key, m, (size_t)n, sizeof *m, cmp_map_ref);
}

static bool plain_file_name(const char *s) {
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* model.safetensors.index.json and its shards */
static amp_status open_sharded(const char *fn, amp_hf_dir *d, const char *index_path) {
    cJSON *ix = read_json(fn, index_path);
    if (!ix) return amp_last_status();
    amp_status st = AMP_OK;
    map_ref *map = NULL;
    const char **shards = NULL;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(ix, "weight_map");
    if (!cJSON_IsObject(wm)) {
        st = amp_error(AMP_ERR_FORMAT, "%s: %s: \"weight_map\" is missing or not an object", fn, index_path);
        goto out;
    }
    int n = cJSON_GetArraySize(wm);
    if (n < 1) {
        st = amp_error(AMP_ERR_FORMAT, "%s: %s: \"weight_map\" names no tensor", fn, index_path);
        goto out;
    }
    map = malloc(sizeof *map * (size_t)n);
    shards = malloc(sizeof *shards * (size_t)n);
    if (!map || !shards) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    int k = 0;
    for (const cJSON *e = wm->child; e; e = e->next, k++) {
        const char *nm = e->string ? e->string : "";
        if (!cJSON_IsString(e) || !e->valuestring) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: the shard of tensor '%.200s' is not a string", fn, index_path, nm);
            goto out;
        }
        if (!plain_file_name(e->valuestring)) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s': shard \"%.200s\" is not a file name in the directory", fn,
                           index_path, nm, e->valuestring);
            goto out;
        }
        map[k] = (map_ref){nm, e->valuestring};
        shards[k] = e->valuestring;
    }
    qsort(map, (size_t)n, sizeof *map, cmp_map_ref);
    for (int i = 1; i < n; i++)
        if (!strcmp(map[i].name, map[i - 1].name)) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s: tensor '%.200s' is named twice in \"weight_map\"", fn, index_path, map[i].name);
            goto out;
        }
    /* the distinct shards, each read and validated once */
    qsort(shards, (size_t)n, sizeof *shards, cmp_str);
    int ns = 0;
    for (int i = 0; i < n; i++)
        if (!ns || strcmp(shards[i], shards[ns - 1])) shards[ns++] = shards[i];
    d->files = calloc((size_t)ns, sizeof *d->files);
    d->file_names = calloc((size_t)ns, sizeof *d->file_names);
    if (!d->files || !d->file_names) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    for (int i = 0; i < ns; i++) {
        char *p = join(fn, d->path, shards[i]);
        if (!p) {
            st = amp_last_status();
            goto out;
        }
        bool there = is_file(p);
        free(p);
        if (!there) {
            st = amp_error(AMP_ERR_IO, "%s: %s names shard %s, which is missing from %s", fn, index_path, shards[i], d->path);
            goto out;
        }
        if (add_file(fn, d, shards[i]) < 0) {
            st = amp_last_status();
            goto out;
        }
    }
    if ((st = build_table(fn, d))) goto out;
    /* both directions: each shard's tensors are those the index gives it */
    for (int i = 0; i < d->n; i++) {
        const char *shard = strrchr(d->file_names[d->t[i].file], '/') + 1;
        const map_ref *r = map_find(map, n, d->t[i].name);
        if (!r) {
            st = amp_error(AMP_ERR_FORMAT, "%s: shard %s holds tensor '%.200s', which %s does not name", fn,
                           d->file_names[d->t[i].file], d->t[i].name, index_path);
            goto out;
        }
        if (strcmp(r->shard, shard)) {
            st = amp_error(AMP_ERR_FORMAT, "%s: tensor '%.200s' is in shard %s, but %s places it in %s", fn, d->t[i].name,
                           d->file_names[d->t[i].file], index_path, r->shard);
            goto out;
        }
    }
    for (int i = 0; i < n; i++)
        if (find_entry(d, map[i].name) < 0) {
            st = amp_error(AMP_ERR_FORMAT, "%s: %s names tensor '%.200s' in shard %s, which does not hold it", fn, index_path,
                           map[i].name, map[i].shard);
            goto out;
        }
out:
    free(map);
    free(shards);
    cJSON_Delete(ix);
    return st;
}

amp_hf_dir *amp_hf_dir_open(const char *dir) {
    static const char *fn = "amp_hf_dir_open";
    if (!dir) return amp_error_null(AMP_ERR_ARG, "%s: dir is NULL", fn);
    if (!dir[0]) return amp_error_null(AMP_ERR_ARG, "%s: dir is empty", fn);
    struct stat sb;
    if (stat(dir, &sb) != 0) return amp_error_null(AMP_ERR_IO, "%s: cannot open model directory %s: %s", fn, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return amp_error_null(AMP_ERR_ARG, "%s: %s is not a directory (a Hugging Face model directory holds config.json and model.safetensors)", fn, dir);
    amp_hf_dir *d = calloc(1, sizeof *d);
    if (!d || !(d->path = strdup(dir))) {
        free(d);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    size_t L = strlen(d->path);
    while (L > 1 && d->path[L - 1] == '/') d->path[--L] = 0;
    char *single = NULL, *index = NULL;
    if (!(d->config_path = join(fn, d->path, HF_CONFIG))) goto fail;
    if (!is_file(d->config_path)) {
        amp_error(AMP_ERR_IO, "%s: %s has no config.json (not a Hugging Face model directory)", fn, d->path);
        goto fail;
    }
    if (!(d->config = read_json(fn, d->config_path))) goto fail;
    if (!(single = join(fn, d->path, HF_SINGLE)) || !(index = join(fn, d->path, HF_INDEX))) goto fail;
    if (is_file(single)) {
        d->files = calloc(1, sizeof *d->files);
        d->file_names = calloc(1, sizeof *d->file_names);
        if (!d->files || !d->file_names) {
            amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            goto fail;
        }
        if (add_file(fn, d, HF_SINGLE) < 0 || build_table(fn, d)) goto fail;
    } else if (is_file(index)) {
        if (open_sharded(fn, d, index)) goto fail;
    } else {
        char *bin = join(fn, d->path, "pytorch_model.bin");
        bool has_bin = bin && is_file(bin);
        free(bin);
        amp_error(AMP_ERR_IO, "%s: %s has neither %s nor %s%s", fn, d->path, HF_SINGLE, HF_INDEX,
                  has_bin ? " (pytorch_model.bin, a pickle, is not read: convert it to safetensors)" : "");
        goto fail;
    }
    free(single);
    free(index);
    return d;
fail:
    free(single);
    free(index);
    amp_hf_dir_close(d);
    return NULL;
}

const char *amp_hf_dir_path(const amp_hf_dir *d) {
    if (!d) return amp_error_null(AMP_ERR_ARG, "amp_hf_dir_path: d is NULL");
    return d->path;
}

/* ---- config.json ------------------------------------------------------------------- */
static const char *json_kind(const cJSON *j) {
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "invalid";
}

/* The value at a dotted key of root (read from path); NULL with the error (naming fn, key and file) when absent. */
static const cJSON *json_at(const char *fn, const cJSON *root, const char *path, const char *key, bool quiet) {
    const cJSON *j = root;
    const char *p = key;
    char part[256];
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n == 0 || n >= sizeof part || !cJSON_IsObject(j)) {
            j = NULL;
            break;
        }
        memcpy(part, p, n);
        part[n] = 0;
        j = cJSON_GetObjectItemCaseSensitive(j, part);
        if (!j || !dot) break;
        p = dot + 1;
    }
    if ((!j || cJSON_IsNull(j)) && !quiet) amp_error(AMP_ERR_FORMAT, "%s: %s has no key \"%.200s\"", fn, path, key);
    return j && !cJSON_IsNull(j) ? j : NULL;
}

static const cJSON *config_at(const char *fn, const amp_hf_dir *d, const char *key, bool quiet) {
    if (!d || !key) return quiet ? NULL : amp_error_null(AMP_ERR_ARG, "%s: d or key is NULL", fn);
    return json_at(fn, d->config, d->config_path, key, quiet);
}

static amp_status wrong_kind(const char *fn, const char *path, const char *key, const char *want, const cJSON *j) {
    return amp_error(AMP_ERR_FORMAT, "%s: %s: \"%.200s\" is %s, not %s", fn, path, key, json_kind(j), want);
}

/* The integer / boolean at j (read from path, key); the error names fn, key and file. */
static amp_status json_int(const char *fn, const cJSON *j, const char *path, const char *key, int64_t *out) {
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= -9007199254740992.0 && v <= 9007199254740992.0) || v != (double)(int64_t)v)
        return wrong_kind(fn, path, key, "an integer", j);
    *out = (int64_t)v;
    return AMP_OK;
}

static amp_status json_bool(const char *fn, const cJSON *j, const char *path, const char *key, bool *out) {
    if (!cJSON_IsBool(j)) return wrong_kind(fn, path, key, "a boolean", j);
    *out = cJSON_IsTrue(j);
    return AMP_OK;
}

amp_status amp_hf_config_int(const amp_hf_dir *d, const char *key, int64_t *out) {
    static const char *fn = "amp_hf_config_int";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    const cJSON *j = config_at(fn, d, key, false);
    return j ? json_int(fn, j, d->config_path, key, out) : amp_last_status();
}

amp_status amp_hf_config_float(const amp_hf_dir *d, const char *key, double *out) {
    static const char *fn = "amp_hf_config_float";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    const cJSON *j = config_at(fn, d, key, false);
    if (!j) return amp_last_status();
    if (!cJSON_IsNumber(j)) return wrong_kind(fn, d->config_path, key, "a number", j);
    *out = j->valuedouble;
    return AMP_OK;
}

amp_status amp_hf_config_str(const amp_hf_dir *d, const char *key, const char **out) {
    static const char *fn = "amp_hf_config_str";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    const cJSON *j = config_at(fn, d, key, false);
    if (!j) return amp_last_status();
    if (!cJSON_IsString(j) || !j->valuestring) return wrong_kind(fn, d->config_path, key, "a string", j);
    *out = j->valuestring;
    return AMP_OK;
}

amp_status amp_hf_config_bool(const amp_hf_dir *d, const char *key, bool *out) {
    static const char *fn = "amp_hf_config_bool";
    if (!out) return amp_error(AMP_ERR_ARG, "%s: out is NULL", fn);
    const cJSON *j = config_at(fn, d, key, false);
    return j ? json_bool(fn, j, d->config_path, key, out) : amp_last_status();
}

bool amp_hf_config_has(const amp_hf_dir *d, const char *key) {
    if (!d || !key) {
        amp_error(AMP_ERR_ARG, "amp_hf_config_has: d or key is NULL");
        return false;
    }
    return config_at("amp_hf_config_has", d, key, true) != NULL;
}

/* A key of another JSON file of the directory: kind 0 int, 1 bool. */
static amp_status file_get(const char *fn, const amp_hf_dir *d, const char *file, const char *key, int kind, void *out) {
    if (!d || !file || !key || !out) return amp_error(AMP_ERR_ARG, "%s: NULL argument", fn);
    if (!plain_file_name(file)) return amp_error(AMP_ERR_ARG, "%s: \"%.200s\" is not a file name in the directory", fn, file);
    char *p = join(fn, d->path, file);
    if (!p) return amp_last_status();
    amp_status st;
    if (!is_file(p)) {
        st = amp_error(AMP_ERR_IO, "%s: %s has no %s", fn, d->path, file);
    } else {
        cJSON *root = read_json(fn, p);
        const cJSON *j = root ? json_at(fn, root, p, key, false) : NULL;
        st = !j ? amp_last_status() : kind == 0 ? json_int(fn, j, p, key, out) : json_bool(fn, j, p, key, out);
        cJSON_Delete(root);
    }
    free(p);
    return st;
}

amp_status amp_hf_file_int(const amp_hf_dir *d, const char *file, const char *key, int64_t *out) {
    return file_get("amp_hf_file_int", d, file, key, 0, out);
}

amp_status amp_hf_file_bool(const amp_hf_dir *d, const char *file, const char *key, bool *out) {
    return file_get("amp_hf_file_bool", d, file, key, 1, out);
}

/* ---- tensors ------------------------------------------------------------------------ */
int amp_hf_dir_tensor_count(const amp_hf_dir *d) {
    if (!d) return amp_error_neg(AMP_ERR_ARG, "amp_hf_dir_tensor_count: d is NULL");
    return d->n;
}

const char *amp_hf_dir_tensor_name(const amp_hf_dir *d, int i) {
    if (!d) return amp_error_null(AMP_ERR_ARG, "amp_hf_dir_tensor_name: d is NULL");
    if (i < 0 || i >= d->n) return amp_error_null(AMP_ERR_ARG, "amp_hf_dir_tensor_name: index %d is outside [0, %d)", i, d->n);
    return d->t[i].name;
}

bool amp_hf_dir_has_tensor(const amp_hf_dir *d, const char *name) {
    if (!d || !name) {
        amp_error(AMP_ERR_ARG, "amp_hf_dir_has_tensor: d or name is NULL");
        return false;
    }
    return find_entry(d, name) >= 0;
}

static amp_status info_of(const char *fn, const amp_hf_dir *d, const char *name, amp_safetensors_info *out, int *file) {
    if (!d || !name || !out) return amp_error(AMP_ERR_ARG, "%s: NULL argument", fn);
    int i = find_entry(d, name);
    if (i < 0) return amp_error(AMP_ERR_FORMAT, "%s: %s has no tensor '%.200s'", fn, d->path, name);
    const amp_safetensors *f = d->files[d->t[i].file];
    if (file) *file = d->t[i].file;
    amp_status st = amp_safetensors_info_at(f, amp_safetensors_find(f, name), out);
    return st ? amp_error_chain(st, "%s", fn) : AMP_OK;
}

amp_status amp_hf_dir_tensor_info(const amp_hf_dir *d, const char *name, amp_safetensors_info *out) {
    return info_of("amp_hf_dir_tensor_info", d, name, out, NULL);
}

amp_tensor *amp_hf_dir_get(const amp_hf_dir *d, const char *name, amp_dtype dt, int want_ndim, const int64_t *want_dims) {
    static const char *fn = "amp_hf_dir_get";
    amp_safetensors_info in;
    int file;
    if (info_of(fn, d, name, &in, &file)) return NULL;
    const char *path = d->file_names[file];
    if (dt != AMP_F32 && dt != AMP_F16 && dt != AMP_BF16)
        return amp_error_null(AMP_ERR_DTYPE, "%s: dtype %s: a tensor is loaded in f32, f16 or bf16", fn, amp_dtype_name(dt));
    if (in.dtype == AMP_DTYPE_COUNT || !amp_dtype_is_float(in.dtype))
        return amp_error_null(AMP_ERR_DTYPE, "%s: %s: tensor '%.200s' has dtype %s, not a floating-point dtype", fn, path, name,
                              in.dtype_name);
    if (want_ndim > 0) {
        if (want_ndim > AMP_MAX_DIMS || !want_dims)
            return amp_error_null(AMP_ERR_ARG, "%s: want_ndim %d needs want_dims (at most %d)", fn, want_ndim, AMP_MAX_DIMS);
        if (in.ndim != want_ndim || memcmp(in.shape, want_dims, sizeof(int64_t) * (size_t)want_ndim)) {
            char a[AMP_SHAPE_BUF], b[AMP_SHAPE_BUF];
            return amp_error_null(AMP_ERR_SHAPE, "%s: %s: tensor '%.200s' has shape %s; the model expects %s", fn, path, name,
                                  amp__shape_fmt(in.ndim, in.shape, a, sizeof a), amp__shape_fmt(want_ndim, want_dims, b, sizeof b));
        }
    }
    size_t esz = amp_dtype_size(in.dtype);
    /* same dtype: a copy; else converted from the file's bytes, borrowed when aligned for
     * their dtype (safetensors pads nothing), copied first when not */
    bool borrow = in.dtype != dt && esz && (uintptr_t)in.data % esz == 0;
    amp_tensor *src = borrow ? amp_tensor_borrow((void *)in.data, in.dtype, in.ndim, in.shape)
                             : amp_tensor_from_data(in.data, in.dtype, in.ndim, in.shape);
    if (src && in.dtype == dt) return src;
    amp_tensor *out = src ? amp_tensor_empty(dt, in.ndim, in.shape) : NULL;
    if (!out || amp_tensor_copy_(out, src)) {
        amp_tensor_free(out);
        amp_tensor_free(src);
        return amp_error_chain_null(amp_last_status(), "%s: %s: tensor '%.200s'", fn, path, name);
    }
    amp_tensor_free(src);
    return out;
}
