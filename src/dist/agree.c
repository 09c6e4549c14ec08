/* Agreement: every rank holds a list of (key, value) pairs that must be
 * equal everywhere (a data-parallel run's configuration, the checkpoint it
 * resumes); one all-gather of a 128-bit digest of the list shows whether
 * they are, and only when they are not a second all-gather brings every
 * rank's list, so each rank can name the keys that differ with every
 * rank's value, in the same words on every rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash128.h"
#include "dist/dist_impl.h"

#define FIELD '\x1f'  /* key FIELD value FIELD note RECORD */
#define RECORD '\x1e'

/* one rank's list as text; the digest covers keys and values, not notes */
static char *serialize(int n, const char *const *keys, const char *const *vals, const char *const *notes, size_t *len,
                       uint64_t digest[2]) {
    size_t total = 1;
    for (int i = 0; i < n; i++)
        total += strlen(keys[i]) + strlen(vals[i] ? vals[i] : "") + strlen(notes && notes[i] ? notes[i] : "") + 3;
    char *t = malloc(total);
    if (!t) return NULL;
    amp__hash128 h;
    amp__hash128_init(&h);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *v = vals[i] ? vals[i] : "", *note = notes && notes[i] ? notes[i] : "";
        size_t a = strlen(keys[i]), b = strlen(v), c = strlen(note);
        memcpy(t + k, keys[i], a);
        t[k + a] = FIELD;
        memcpy(t + k + a + 1, v, b);
        amp__hash128_update(&h, t + k, a + 1 + b);
        amp__hash128_update(&h, "\x1e", 1);
        t[k + a + 1 + b] = FIELD;
        memcpy(t + k + a + b + 2, note, c);
        t[k + a + b + c + 2] = RECORD;
        k += a + b + c + 3;
    }
    t[k] = 0;
    *len = k;
    amp__hash128_final(&h, digest);
    return t;
}

/* The record of `key` in a rank's text: its value and note (not NUL-terminated) */
typedef struct {
    const char *v, *note;
    int vlen, nlen;
    bool found;
} entry;

static entry find(const char *text, const char *key, size_t klen) {
    entry e = {"", "", 0, 0, false};
    for (const char *p = text; *p;) {
        const char *f1 = strchr(p, FIELD);
        if (!f1) break;
        const char *f2 = strchr(f1 + 1, FIELD);
        const char *end = f2 ? strchr(f2 + 1, RECORD) : NULL;
        if (!end) break;
        if ((size_t)(f1 - p) == klen && !memcmp(p, key, klen)) {
            e.v = f1 + 1;
            e.vlen = (int)(f2 - f1 - 1);
            e.note = f2 + 1;
            e.nlen = (int)(end - f2 - 1);
            e.found = true;
            return e;
        }
        p = end + 1;
    }
    return e;
}

static bool same_value(entry a, entry b) { return a.found == b.found && a.vlen == b.vlen && !memcmp(a.v, b.v, (size_t)a.vlen); }

/* one key across the ranks' texts (amp__dist_put_groups) */
typedef struct {
    const char *key;
    size_t klen;
    char *const *texts;
} key_ctx;

static bool key_same(const void *ctx, int a, int b) {
    const key_ctx *k = ctx;
    return same_value(find(k->texts[a], k->key, k->klen), find(k->texts[b], k->key, k->klen));
}

static void key_what(amp__dist_msg *o, const void *ctx, int rank) {
    const key_ctx *k = ctx;
    entry e = find(k->texts[rank], k->key, k->klen);
    if (!e.found) amp__dist_put(o, "none");
    else amp__dist_put(o, "%.*s", e.vlen, e.v);
    if (e.found && e.nlen > 0) amp__dist_put(o, " (%.*s)", e.nlen, e.note);
}

/* "--lr: rank 0 has 0.001, rank 1 has 0.002" (ranks with equal values grouped, rank order) */
static void describe_key(amp__dist_msg *o, const char *key, size_t klen, char *const *texts, int world) {
    amp__dist_put(o, "%.*s: ", (int)klen, key);
    key_ctx k = {key, klen, texts};
    amp__dist_groups gr = {key_same, key_what, &k, "has", "have", ", ", ", "};
    amp__dist_put_groups(o, world, &gr);
}

amp_status amp__dist_agree(amp_dist_group *g, const char *fn, const char *what, int n, const char *const *keys,
                           const char *const *vals, const char *const *notes) {
    if (!g || g->size == 1) return AMP_OK;
    size_t len;
    uint64_t digest[2];
    char *mine = serialize(n, keys, vals, notes, &len, digest);
    if (!mine) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    int world = g->size;
    uint64_t head[3] = {digest[0], digest[1], (uint64_t)len}, *heads = calloc((size_t)world, sizeof head);
    amp_status st = heads ? AMP_OK : amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    if (st == AMP_OK)
        st = amp__dist_finish(amp__dist_start(g, fn, AMP_DIST_K_ALL_GATHER, AMP_U8, AMP_DIST_SUM, NULL, head, heads, sizeof head, 0));
    bool same = true;
    size_t longest = 0;
    for (int r = 0; st == AMP_OK && r < world; r++) {
        same = same && heads[3 * r] == digest[0] && heads[3 * r + 1] == digest[1];
        if (heads[3 * r + 2] > longest) longest = (size_t)heads[3 * r + 2];
    }
    if (st != AMP_OK || same) {
        free(mine);
        free(heads);
        return st;
    }
    /* they differ: every rank's list, to name what differs */
    size_t stride = longest + 1;
    char *pad = calloc(stride, 1), *all = calloc(stride, (size_t)world);
    char **texts = calloc((size_t)world, sizeof *texts);
    if (!pad || !all || !texts) st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    if (st == AMP_OK) {
        memcpy(pad, mine, len);
        st = amp__dist_finish(amp__dist_start(g, fn, AMP_DIST_K_ALL_GATHER, AMP_U8, AMP_DIST_SUM, NULL, pad, all, stride, 0));
    }
    if (st == AMP_OK) {
        for (int r = 0; r < world; r++) {
            texts[r] = all + (size_t)r * stride;
            texts[r][stride - 1] = 0;
        }
        char msg[900];
        amp__dist_msg o;
        amp__dist_msg_start(&o, msg, sizeof msg);
        int ndiff = 0, listed = 0;
        /* the keys of every rank's list, in rank order of first appearance */
        for (int r = 0; r < world; r++)
            for (const char *p = texts[r]; *p;) {
                const char *f1 = strchr(p, FIELD), *end = f1 ? strchr(f1, RECORD) : NULL;
                if (!end) break;
                size_t klen = (size_t)(f1 - p);
                bool seen = false;
                for (int q = 0; q < r && !seen; q++) seen = find(texts[q], p, klen).found;
                entry e0 = find(texts[r], p, klen);
                bool differs = false;
                for (int q = 0; q < world && !differs && !seen; q++) differs = !same_value(find(texts[q], p, klen), e0);
                if (differs) {
                    ndiff++;
                    if (o.used + 120 < o.n) {
                        if (listed++) amp__dist_put(&o, "; ");
                        describe_key(&o, p, klen, texts, world);
                    }
                }
                p = end + 1;
            }
        if (listed < ndiff) amp__dist_put(&o, "; and %d more", ndiff - listed);
        amp__dist_set_shared_failure(g);
        st = amp_error(AMP_ERR_ARG, "%s: %s differ between ranks: %s", fn, what, ndiff ? msg : "(the lists differ)");
    }
    free(mine);
    free(heads);
    free(pad);
    free(all);
    free(texts);
    return st;
}
