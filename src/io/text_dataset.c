/* Text dataset (amp/text.h): a UTF-8 file tokenized once, split at a line
 * boundary into train and validation, random training windows from Philox
 * counters, sequential validation windows.
 *
 * Token cache: CACHE_DIR/<digest of the text>-<size>-<tokenizer>-<digest of
 * the tokenizer>-<val fraction>.tokens, written to a temporary name,
 * fsync'ed and renamed. The key is the content: a 128-bit digest of the
 * file's bytes (not its CRC-32, which another text of the same size can
 * share) and of the tokenizer's files (encoder.json and vocab.bpe: another
 * vocab.bpe of the same size gives other tokens under the same name). It
 * holds a header (magic and version, the whole key again, the two token
 * counts) and the tokens as little-endian i32; one that does not match in
 * every field, or is short, is ignored and rewritten. A cache that cannot be
 * written (read-only directory) is not an error: the tokens are used from
 * memory. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "amp/text.h"
#include "core/error.h"
#include "core/hash128.h"
#include "io/io_util.h"
#include "io/safetensors_impl.h"
#include "io/tokenizer_impl.h"
#include "numeric/philox.h"
#include "tensor/tensor_impl.h"

struct amp_text_dataset {
    int32_t *tok[2];
    int64_t n[2];
    int64_t vocab;
    uint32_t crc;
    amp_text_digest digest; /* the file's bytes (the token cache's key) */
    uint64_t seed, pos;
    bool cached;
};

#define CACHE_MAGIC "AMPTOK02" /* 01 was keyed by the CRC-32 and the tokenizer's name */

typedef struct { /* the key: every field before n_train */
    char magic[8];
    uint64_t text[2], tok[2]; /* content digests: the file's bytes, the tokenizer's files */
    uint64_t size;
    uint32_t vocab, reserved;
    char tokenizer[16];
    double val_fraction;
    uint64_t n_train, n_val;
} cache_hdr;

static const char *cache_dir_of(const amp_text_opts *o, char *buf, size_t n) {
    if (o->cache_dir) return o->cache_dir;
    const char *e = getenv("AMP_CACHE_DIR");
    if (e && *e) return e;
    const char *x = getenv("XDG_CACHE_HOME");
    if (x && *x) {
        snprintf(buf, n, "%s/amp", x);
        return buf;
    }
    const char *h = getenv("HOME");
    if (h && *h) {
        snprintf(buf, n, "%s/.cache/amp", h);
        return buf;
    }
    return "";
}

static void mkdir_p(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            mkdir(p, 0755);
            *s = '/';
        }
    mkdir(p, 0755);
}

static bool cache_load(const char *path, const cache_hdr *want, amp_text_dataset *d) {
    FILE *f = amp__fopen_regular("amp_text_dataset_open", path);
    if (!f) {
        amp_clear_error();
        return false;
    }
    cache_hdr h;
    bool ok = fread(&h, sizeof h, 1, f) == 1 && memcmp(&h, want, offsetof(cache_hdr, n_train)) == 0 &&
              h.n_train < ((uint64_t)1 << 40) && h.n_val < ((uint64_t)1 << 40);
    if (ok) {
        for (int s = 0; s < 2 && ok; s++) {
            uint64_t n = s ? h.n_val : h.n_train;
            d->tok[s] = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
            ok = d->tok[s] && fread(d->tok[s], sizeof(int32_t), (size_t)n, f) == n;
            d->n[s] = (int64_t)n;
            for (uint64_t i = 0; ok && i < n; i++) ok = d->tok[s][i] >= 0 && d->tok[s][i] < (int64_t)want->vocab;
        }
        char extra;
        ok = ok && fread(&extra, 1, 1, f) == 0;
    }
    fclose(f);
    if (!ok) {
        for (int s = 0; s < 2; s++) {
            free(d->tok[s]);
            d->tok[s] = NULL;
            d->n[s] = 0;
        }
    }
    return ok;
}

/* best effort: false (error cleared) when the cache cannot be written */
static bool cache_store(const char *path, const cache_hdr *hdr, const amp_text_dataset *d) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return false;
    cache_hdr h = *hdr;
    h.n_train = (uint64_t)d->n[0];
    h.n_val = (uint64_t)d->n[1];
    bool ok = fwrite(&h, sizeof h, 1, f) == 1 &&
              fwrite(d->tok[0], sizeof(int32_t), (size_t)d->n[0], f) == (size_t)d->n[0] &&
              fwrite(d->tok[1], sizeof(int32_t), (size_t)d->n[1], f) == (size_t)d->n[1];
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (ok) ok = amp__rename_durable("amp_text_dataset_open", tmp, path) == AMP_OK;
    if (!ok) {
        remove(tmp);
        amp_clear_error();
    }
    return ok;
}

amp_text_dataset *amp_text_dataset_open(const char *path, const amp_tokenizer *tok, const amp_text_opts *o) {
    static const char *fn = "amp_text_dataset_open";
    if (!path) return amp_error_null(AMP_ERR_ARG, "%s: path is NULL", fn);
    if (!tok) return amp_error_null(AMP_ERR_ARG, "%s: tok is NULL", fn);
    amp_text_opts dflt = AMP_TEXT_OPTS_DEFAULT;
    if (!o) o = &dflt;
    if (!(o->val_fraction >= 0.0 && o->val_fraction <= 0.5))
        return amp_error_null(AMP_ERR_ARG, "%s: val_fraction = %g is outside [0, 0.5]", fn, o->val_fraction);
    size_t n = 0;
    char *text = amp__read_regular(fn, path, &n);
    if (!text) return NULL;
    amp_text_dataset *d = calloc(1, sizeof *d);
    if (!d) {
        free(text);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    d->vocab = amp_tokenizer_vocab_size(tok);
    d->seed = o->seed;
    uLong c = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < n;) {
        size_t chunk = n - off > (1u << 30) ? (1u << 30) : n - off;
        c = crc32(c, (const Bytef *)text + off, (uInt)chunk);
        off += chunk;
    }
    d->crc = (uint32_t)c;
    cache_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, 8);
    amp__hash128 th;
    amp__hash128_init(&th);
    amp__hash128_update(&th, text, n);
    amp__hash128_final(&th, h.text);
    d->digest = (amp_text_digest){{h.text[0], h.text[1]}, (uint64_t)n};
    amp__tokenizer_digest(tok, h.tok);
    h.vocab = (uint32_t)d->vocab;
    h.size = n;
    snprintf(h.tokenizer, sizeof h.tokenizer, "%s", amp_tokenizer_name(tok));
    h.val_fraction = o->val_fraction;
    char dbuf[4096], cpath[4400];
    const char *cdir = cache_dir_of(o, dbuf, sizeof dbuf);
    cpath[0] = 0;
    if (*cdir)
        snprintf(cpath, sizeof cpath, "%s/%016llx%016llx-%llu-%s-%016llx-%.4f.tokens", cdir, (unsigned long long)h.text[0],
                 (unsigned long long)h.text[1], (unsigned long long)n, h.tokenizer, (unsigned long long)h.tok[0], o->val_fraction);
    if (*cpath && cache_load(cpath, &h, d)) {
        d->cached = true;
        free(text);
        return d;
    }
    /* split at the first line start at or after (1 - f) n */
    size_t cut = n;
    if (o->val_fraction > 0.0) {
        cut = (size_t)floor((double)n * (1.0 - o->val_fraction));
        while (cut < n && cut > 0 && text[cut - 1] != '\n') cut++;
    }
    for (int s = 0; s < 2; s++) {
        size_t cnt = 0;
        int32_t *ids = NULL;
        amp_status st = amp_tokenizer_encode(tok, s ? text + cut : text, s ? n - cut : cut, &ids, &cnt);
        if (st != AMP_OK) {
            amp__error_wrap(st, fn);
            free(text);
            amp_text_dataset_free(d);
            return NULL;
        }
        d->tok[s] = ids;
        d->n[s] = (int64_t)cnt;
    }
    free(text);
    if (*cpath) {
        mkdir_p(cdir);
        cache_store(cpath, &h, d);
    }
    return d;
}

void amp_text_dataset_free(amp_text_dataset *d) {
    if (!d) return;
    free(d->tok[0]);
    free(d->tok[1]);
    free(d);
}

static bool split_ok(const char *fn, const amp_text_dataset *d, amp_text_split s) {
    if (!d) {
        amp_error(AMP_ERR_ARG, "%s: d is NULL", fn);
        return false;
    }
    if (s != AMP_TEXT_TRAIN && s != AMP_TEXT_VAL) {
        amp_error(AMP_ERR_ARG, "%s: split %d is not AMP_TEXT_TRAIN or AMP_TEXT_VAL", fn, (int)s);
        return false;
    }
    return true;
}

int64_t amp_text_dataset_tokens(const amp_text_dataset *d, amp_text_split s) {
    if (!split_ok("amp_text_dataset_tokens", d, s)) return amp_last_status();
    return d->n[s];
}

const int32_t *amp_text_dataset_data(const amp_text_dataset *d, amp_text_split s) {
    if (!split_ok("amp_text_dataset_data", d, s)) return NULL;
    return d->tok[s];
}

int64_t amp_text_dataset_vocab_size(const amp_text_dataset *d) {
    if (!d) return amp_error(AMP_ERR_ARG, "amp_text_dataset_vocab_size: d is NULL");
    return d->vocab;
}

uint32_t amp_text_dataset_crc(const amp_text_dataset *d) {
    if (!d) {
        amp_error(AMP_ERR_ARG, "amp_text_dataset_crc: d is NULL");
        return 0;
    }
    return d->crc;
}

amp_status amp_text_dataset_digest(const amp_text_dataset *d, amp_text_digest *out) {
    if (!d || !out) return amp_error(AMP_ERR_ARG, "amp_text_dataset_digest: %s is NULL", d ? "out" : "d");
    *out = d->digest;
    return AMP_OK;
}

bool amp_text_dataset_from_cache(const amp_text_dataset *d) { return d && d->cached; }

uint64_t amp_text_dataset_position(const amp_text_dataset *d) { return d ? d->pos : 0; }

amp_status amp_text_dataset_seek(amp_text_dataset *d, uint64_t position) {
    if (!d) return amp_error(AMP_ERR_ARG, "amp_text_dataset_seek: d is NULL");
    d->pos = position;
    return AMP_OK;
}

/* x, y [rows, T] i64 from windows starting at start[r] of split s */
static amp_status fill_xy(const char *fn, const amp_text_dataset *d, amp_text_split s, const int64_t *start,
                          int64_t rows, int64_t T, amp_tensor **x, amp_tensor **y) {
    int64_t shape[2] = {rows, T};
    amp_tensor *tx = amp_tensor_empty(AMP_I64, 2, shape);
    amp_tensor *ty = tx ? amp_tensor_empty(AMP_I64, 2, shape) : NULL;
    if (!ty) {
        amp_tensor_free(tx);
        return amp__error_wrap(amp_last_status(), fn);
    }
    int64_t *px = amp_tensor_data(tx), *py = amp_tensor_data(ty);
    const int32_t *tk = d->tok[s];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < T; t++) {
            px[r * T + t] = tk[start[r] + t];
            py[r * T + t] = tk[start[r] + t + 1];
        }
    *x = tx;
    *y = ty;
    return AMP_OK;
}

static amp_status bt_check(const char *fn, const amp_text_dataset *d, amp_text_split s, int64_t B, int64_t T,
                           amp_tensor **x, amp_tensor **y) {
    if (!split_ok(fn, d, s)) return amp_last_status();
    if (!x || !y) return amp_error(AMP_ERR_ARG, "%s: x and y must not be NULL", fn);
    *x = *y = NULL;
    if (B < 1 || T < 1 || B > (1 << 24) || T > (1 << 24))
        return amp_error(AMP_ERR_ARG, "%s: B = %lld and T = %lld must be in 1 .. 2^24", fn, (long long)B, (long long)T);
    if (d->n[s] < T + 1)
        return amp_error(AMP_ERR_RANGE, "%s: the %s split has %lld tokens; a window needs T + 1 = %lld", fn,
                         s ? "validation" : "training", (long long)d->n[s], (long long)T + 1);
    return AMP_OK;
}

/* rows [first, first + rows) of the global batch of B at the current position */
static amp_status batch_rows(const char *fn, amp_text_dataset *d, int64_t B, int64_t first, int64_t rows, int64_t T, amp_tensor **x,
                             amp_tensor **y) {
    int64_t *start = malloc((size_t)rows * sizeof *start);
    if (!start) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    uint64_t range = (uint64_t)(d->n[0] - T); /* starts 0 .. n - T - 1 */
    for (int64_t r = 0; r < rows; r++) {
        uint64_t c = (d->pos + (uint64_t)(first + r)) * 2;
        uint64_t v = ((uint64_t)amp_philox_u32_at(d->seed, c) << 32) | amp_philox_u32_at(d->seed, c + 1);
        start[r] = (int64_t)(v % range);
    }
    amp_status st = fill_xy(fn, d, AMP_TEXT_TRAIN, start, rows, T, x, y);
    free(start);
    if (st == AMP_OK) d->pos += (uint64_t)B;
    return st;
}

amp_status amp_text_dataset_batch(amp_text_dataset *d, int64_t B, int64_t T, amp_tensor **x, amp_tensor **y) {
    static const char *fn = "amp_text_dataset_batch";
    amp_status st = bt_check(fn, d, AMP_TEXT_TRAIN, B, T, x, y);
    if (st != AMP_OK) return st;
    return batch_rows(fn, d, B, 0, B, T, x, y);
}

amp_status amp_text_dataset_batch_shard(amp_text_dataset *d, int64_t B, int64_t T, int64_t num_shards, int64_t shard, amp_tensor **x,
                                        amp_tensor **y) {
    static const char *fn = "amp_text_dataset_batch_shard";
    amp_status st = bt_check(fn, d, AMP_TEXT_TRAIN, B, T, x, y);
    if (st != AMP_OK) return st;
    if (num_shards < 1 || shard < 0 || shard >= num_shards)
        return amp_error(AMP_ERR_ARG, "%s: shard %lld of num_shards %lld: need 0 <= shard < num_shards", fn, (long long)shard,
                         (long long)num_shards);
    if (B < num_shards)
        return amp_error(AMP_ERR_ARG, "%s: a batch of %lld windows cannot give each of %lld shards one", fn, (long long)B,
                         (long long)num_shards);
    int64_t per = B / num_shards, extra = B % num_shards;
    int64_t first = shard * per + (shard < extra ? shard : extra), rows = per + (shard < extra);
    return batch_rows(fn, d, B, first, rows, T, x, y);
}

int64_t amp_text_dataset_windows(const amp_text_dataset *d, amp_text_split s, int64_t T) {
    if (!split_ok("amp_text_dataset_windows", d, s)) return amp_last_status();
    if (T < 1) return amp_error(AMP_ERR_ARG, "amp_text_dataset_windows: T = %lld must be positive", (long long)T);
    return d->n[s] < T + 1 ? 0 : (d->n[s] - 1) / T;
}

amp_status amp_text_dataset_window_batch(const amp_text_dataset *d, amp_text_split s, int64_t first, int64_t B,
                                         int64_t T, amp_tensor **x, amp_tensor **y) {
    static const char *fn = "amp_text_dataset_window_batch";
    amp_status st = bt_check(fn, d, s, B, T, x, y);
    if (st != AMP_OK) return st;
    int64_t nw = (d->n[s] - 1) / T;
    if (first < 0 || first >= nw)
        return amp_error(AMP_ERR_RANGE, "%s: first window %lld is outside 0 .. %lld", fn, (long long)first,
                         (long long)nw - 1);
    int64_t rows = B < nw - first ? B : nw - first;
    int64_t *start = malloc((size_t)rows * sizeof *start);
    if (!start) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    for (int64_t r = 0; r < rows; r++) start[r] = (first + r) * T;
    st = fill_xy(fn, d, s, start, rows, T, x, y);
    free(start);
    return st;
}

double amp_text_dataset_unigram_entropy(const amp_text_dataset *d, amp_text_split s) {
    if (!split_ok("amp_text_dataset_unigram_entropy", d, s)) return NAN;
    int64_t *cnt = calloc((size_t)d->vocab, sizeof *cnt);
    if (!cnt) {
        amp_error(AMP_ERR_NOMEM, "amp_text_dataset_unigram_entropy: out of memory");
        return NAN;
    }
    for (int64_t i = 0; i < d->n[s]; i++) cnt[d->tok[s][i]]++;
    double h = 0, n = (double)d->n[s];
    for (int64_t v = 0; v < d->vocab; v++)
        if (cnt[v]) {
            double p = (double)cnt[v] / n;
            h -= p * log(p);
        }
    free(cnt);
    return h;
}

const char *amp_shakespeare_path(void) {
    static _Thread_local char buf[4096];
    const char *e = getenv("AMP_TEXT_DIR");
    snprintf(buf, sizeof buf, "%s/shakespeare.txt", e && *e ? e : "/usr/local/share/amp/text");
    return buf;
}

const char *amp_models_dir(void) {
    const char *e = getenv("AMP_MODELS_DIR");
    return e && *e ? e : "/usr/local/share/amp/models";
}

const char *amp_models_path(const char *name) {
    static _Thread_local char buf[4096];
    if (!name) return amp_error_null(AMP_ERR_ARG, "amp_models_path: name is NULL");
    snprintf(buf, sizeof buf, "%s/%s", amp_models_dir(), name);
    return buf;
}
