/* Seeded batch loader over an amp_dataset. The order of epoch e is a
 * Fisher-Yates permutation from a Philox generator keyed by (seed, e), so
 * any epoch can be reproduced without replaying earlier ones. */
#include <stdlib.h>
#include <string.h>

#include "amp/io.h"
#include "core/checked.h"
#include "core/error.h"

struct amp_loader {
    const amp_dataset *ds;
    amp_loader_opts o;
    int64_t *order;
    int64_t epoch, next;
    int64_t last_global;
};

amp_loader *amp_loader_new(const amp_dataset *ds, const amp_loader_opts *o) {
    static const char *fn = "amp_loader_new";
    if (!ds || !o) return amp_error_null(AMP_ERR_ARG, "%s: NULL argument", fn);
    if (ds->n <= 0 || (!ds->images && !ds->fimages) || !ds->labels) return amp_error_null(AMP_ERR_ARG, "%s: the dataset is empty", fn);
    if (o->batch <= 0) return amp_error_null(AMP_ERR_ARG, "%s: batch %lld must be > 0", fn, (long long)o->batch);
    if (o->std < 0) return amp_error_null(AMP_ERR_ARG, "%s: std %g must be >= 0", fn, o->std);
    if (o->num_shards < 0 || (o->num_shards > 1 && (o->shard < 0 || o->shard >= o->num_shards)) || (o->num_shards <= 1 && o->shard != 0))
        return amp_error_null(AMP_ERR_ARG, "%s: shard %lld of num_shards %lld: need 0 <= shard < num_shards", fn, (long long)o->shard,
                              (long long)o->num_shards);
    amp_loader *l = calloc(1, sizeof *l);
    if (!l) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    l->order = malloc(sizeof(int64_t) * (size_t)ds->n);
    if (!l->order) {
        free(l);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    l->ds = ds;
    l->o = *o;
    amp_loader_start_epoch(l, 0);
    return l;
}

void amp_loader_free(amp_loader *l) {
    if (!l) return;
    free(l->order);
    free(l);
}

amp_status amp_loader_start_epoch(amp_loader *l, int64_t epoch) {
    if (!l || epoch < 0) return amp_error(AMP_ERR_ARG, "amp_loader_start_epoch: bad loader or epoch");
    l->epoch = epoch;
    l->next = 0;
    if (l->o.shuffle) {
        amp_generator g = amp_generator_make(l->o.seed * 0x9E3779B97F4A7C15ull + (uint64_t)epoch * 0xD1B54A32D192ED03ull + 1);
        return amp_randperm(l->ds->n, l->order, &g);
    }
    for (int64_t i = 0; i < l->ds->n; i++) l->order[i] = i;
    return AMP_OK;
}

int64_t amp_loader_batches_per_epoch(const amp_loader *l) {
    if (!l) {
        amp_error(AMP_ERR_ARG, "amp_loader_batches_per_epoch: loader is NULL");
        return 0;
    }
    /* ceil without n + batch - 1, which wraps for a batch near 2^63 */
    return l->ds->n / l->o.batch + (!l->o.drop_last && l->ds->n % l->o.batch != 0);
}

bool amp_loader_next(amp_loader *l, amp_tensor **x, amp_tensor **y) {
    if (!l || !x || !y) return false;
    if (l->next >= amp_loader_batches_per_epoch(l)) return false;
    amp_ck ck = AMP_CK("amp_loader_next", "batch start");
    int64_t n = l->ds->n, start = amp_ck_mul(&ck, l->next, l->o.batch); /* < n: cannot fail */
    if (!ck.ok) return false;
    int64_t b = n - start < l->o.batch ? n - start : l->o.batch;
    l->last_global = b;
    if (l->o.num_shards > 1) { /* this shard's rows of the global batch */
        int64_t ns = l->o.num_shards, q = l->o.shard, per = b / ns, extra = b % ns;
        start += q * per + (q < extra ? q : extra);
        b = per + (q < extra);
    }
    int64_t hw = l->ds->h * l->ds->w;
    *x = amp_tensor_empty(AMP_F32, 4, AMP_SHAPE(b, 1, l->ds->h, l->ds->w));
    *y = amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(b));
    if (!*x || !*y) {
        amp_tensor_free(*x);
        amp_tensor_free(*y);
        return false;
    }
    float *xd = amp_tensor_data(*x);
    int64_t *yd = amp_tensor_data(*y);
    bool norm = l->o.std > 0;
    float mean = (float)l->o.mean, inv_std = norm ? (float)(1.0 / l->o.std) : 1.0f;
    for (int64_t i = 0; i < b; i++) {
        int64_t idx = l->order[start + i];
        float *dst = xd + i * hw;
        if (l->ds->fimages) {
            const float *src = l->ds->fimages + (size_t)(idx * hw);
            for (int64_t k = 0; k < hw; k++) dst[k] = norm ? (src[k] - mean) * inv_std : src[k];
        } else {
            const uint8_t *src = l->ds->images + (size_t)(idx * hw);
            for (int64_t k = 0; k < hw; k++) {
                float v = (float)src[k] * (1.0f / 255.0f);
                dst[k] = norm ? (v - mean) * inv_std : v;
            }
        }
        yd[i] = l->ds->labels[idx];
    }
    l->next++;
    return true;
}

int64_t amp_loader_last_global_rows(const amp_loader *l) {
    if (!l) return amp_error_neg(AMP_ERR_ARG, "amp_loader_last_global_rows: loader is NULL");
    return l->last_global;
}

void amp_loader_position(const amp_loader *l, int64_t *epoch, int64_t *batch) {
    if (epoch) *epoch = l ? l->epoch : 0;
    if (batch) *batch = l ? l->next : 0;
}

amp_status amp_loader_seek(amp_loader *l, int64_t epoch, int64_t batch) {
    if (!l || batch < 0 || batch > amp_loader_batches_per_epoch(l))
        return amp_error(AMP_ERR_ARG, "amp_loader_seek: batch %lld is out of range", (long long)batch);
    amp_status st = amp_loader_start_epoch(l, epoch);
    if (st) return st;
    l->next = batch;
    return AMP_OK;
}
