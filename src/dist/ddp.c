/* Data parallel (torch's DistributedDataParallel) and ZeRO-1 (DeepSpeed's
 * stage 1, torch's ZeroRedundancyOptimizer with reduce-scattered
 * gradients), driven by autograd's post-accumulate-grad hooks.
 *
 * Buckets. The parameters, in reverse order (the last layers' gradients
 * are ready first), are packed into buckets of one dtype: the first up to
 * first_bucket_mb, the others up to bucket_mb. A bucket is a flat buffer
 * in the communication dtype laid out as world_size chunks of
 *
 *     [c data elements | one flag per parameter of the bucket]
 *
 * with c = ceil(numel / world_size): data element e lives in chunk e / c.
 * Each rank writes 1 into the flag slots (of every chunk) of the
 * parameters that had a gradient on it, 0 otherwise, so after the
 * reduction every rank knows which parameters had a gradient on any rank
 * (one that had none anywhere is left without one, as in a single process)
 * and, with ZeRO-1, the chunk a rank receives carries the flags too.
 *
 * A round (one backward with sync on): each parameter's hook copies its
 * final .grad into its slot (converted to the communication dtype) and
 * counts down its bucket; full buckets are started in bucket order (the
 * same order on every rank, as collectives must be), stage 0 as an
 * all-reduce (AVG) of the whole buffer, stage 1 as a reduce-scatter (AVG)
 * of the chunks; then every hook progresses what is in flight. The first
 * hook queues the end-of-backward callback, which fills the slots of
 * parameters without a gradient with zeros, starts the remaining buckets,
 * waits for all, and writes back: stage 0 the averages into every .grad,
 * stage 1 this rank's chunk into the gradients of its slices. The chunk
 * layout is the transport's all-reduce chunking, so a stage-0 average and a
 * stage-1 shard hold the same bits.
 *
 * ZeRO-1. A stage-1 optimizer is an ordinary amp_optim over views of this
 * rank's slices of the parameters (its chunk of every bucket, cut at
 * parameter boundaries): f32 master weights and moments exist for those
 * elements only. The slices' stochastic-rounding offsets are those the
 * whole parameters would have, so rounding draws the same bits as stage 0.
 * After each update the buckets holding its parameters are all-gathered in
 * the parameters' dtype (the owners' new values into every replica). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/autograd.h"
#include "amp/nn.h"
#include "amp/numeric.h"
#include "dist/dist_impl.h"
#include "optim/optim_impl.h"

typedef struct amp_ddp amp_ddp;

typedef struct {
    amp_ddp *d;
    amp_tensor *param; /* retained */
    int bucket, slot;  /* slot: index within the bucket (its flag) */
    size_t off;        /* first data element within the bucket */
    int64_t numel;
    int hook;
    bool ready; /* gradient copied this round */
} ddp_param;

typedef struct {
    amp_dtype pdt, cdt;
    size_t numel;  /* data elements */
    int np;        /* parameters (flags per chunk) */
    size_t c;      /* data elements per chunk */
    size_t stride; /* c + np */
    int *params;   /* indices into d->ps, in bucket order */
    int pending;
    char *buf; /* world * stride elements in cdt (GRAD) */
    size_t buf_bytes;
    char *shard; /* stage 1: stride elements in cdt, this rank's reduced chunk (GRAD) */
    size_t shard_bytes;
    char *gather; /* stage 1 with cdt != pdt: world * stride elements in pdt (WORKSPACE) */
    size_t gather_bytes;
    amp_dist_work *work;
    bool launched;
} ddp_bucket;

typedef struct {
    int param;    /* index into d->ps */
    int64_t poff; /* first element within the parameter */
    size_t boff;  /* first data element within the bucket */
    int64_t len;
    amp_tensor *view; /* [len] view of the parameter (leaf, requires grad) */
    amp_tensor *grad; /* [len] in the parameter's dtype (GRAD); view->grad while it had a gradient */
} ddp_piece;

typedef struct ddp_optim {
    amp_ddp *d;
    amp_optim *opt;
    int stage;
    int *params; /* ddp parameter indices, in the optimizer's order */
    int np;
    ddp_piece *pieces; /* stage 1, in optimizer order */
    int npieces;
    bool *buckets; /* stage 1: buckets holding a parameter of this optimizer */
    struct ddp_optim *next;
} ddp_optim;

struct amp_ddp {
    amp_dist_group *g;
    amp_ddp_opts o;
    int n;
    ddp_param *ps;
    int nb;
    ddp_bucket *bs;
    amp_tensor **buffers; /* float buffers broadcast from rank 0 after each round */
    int nbuf;
    bool sync, in_round;
    int next_launch;
    ddp_optim *optims;
    amp_ddp_stats st;
    double comm0; /* group wait_s at the start of the round */
    int64_t step0; /* the step of round k is step0 + k + 1 (a restored checkpoint's step moves it) */
    uint64_t bytes0;
};

static const char *FN = "amp_ddp";

amp_ddp_opts amp_ddp_default_opts(void) {
    amp_ddp_opts o;
    memset(&o, 0, sizeof o);
    return o;
}

static amp_dtype comm_dtype(amp_grad_comm c, amp_dtype pdt) {
    switch (c) {
    case AMP_GRAD_COMM_BF16: return AMP_BF16;
    case AMP_GRAD_COMM_F16: return AMP_F16;
    case AMP_GRAD_COMM_F32: return AMP_F32;
    default: return pdt;
    }
}

/* ---- bucket layout ---------------------------------------------------------------- */
/* Calls fn for each physical run of logical data [off, off + len) of b. */
typedef void (*seg_fn)(void *ctx, size_t phys, size_t logical, size_t n);
static void for_segments(const ddp_bucket *b, size_t off, size_t len, seg_fn fn, void *ctx) {
    while (len > 0) {
        size_t q = off / b->c, in = off % b->c, n = b->c - in;
        if (n > len) n = len;
        fn(ctx, q * b->stride + in, off, n);
        off += n;
        len -= n;
    }
}

typedef struct {
    char *buf;
    amp_dtype bdt;
    const char *src; /* parameter data (its own dtype), indexed by logical - base */
    char *dst;
    amp_dtype sdt;
    size_t base;
} seg_copy;

static void seg_in(void *ctx, size_t phys, size_t logical, size_t n) { /* param/grad -> buffer */
    seg_copy *c = ctx;
    size_t bes = amp_dtype_size(c->bdt), ses = amp_dtype_size(c->sdt);
    const char *s = c->src + (logical - c->base) * ses;
    char *d = c->buf + phys * bes;
    if (c->bdt == c->sdt) memcpy(d, s, n * bes);
    else amp_convert(d, c->bdt, s, c->sdt, n, 0);
}

static void seg_out(void *ctx, size_t phys, size_t logical, size_t n) { /* buffer -> param/grad */
    seg_copy *c = ctx;
    size_t bes = amp_dtype_size(c->bdt), ses = amp_dtype_size(c->sdt);
    const char *s = c->buf + phys * bes;
    char *d = c->dst + (logical - c->base) * ses;
    if (c->bdt == c->sdt) memcpy(d, s, n * bes);
    else amp_convert(d, c->sdt, s, c->bdt, n, 0);
}

static void seg_zero(void *ctx, size_t phys, size_t logical, size_t n) {
    (void)logical;
    seg_copy *c = ctx;
    size_t bes = amp_dtype_size(c->bdt);
    memset(c->buf + phys * bes, 0, n * bes);
}

static void set_value(void *p, amp_dtype dt, float v) { amp_convert(p, dt, &v, AMP_F32, 1, 0); }
static float get_value(const void *p, amp_dtype dt) {
    float v = 0;
    amp_convert(&v, AMP_F32, p, dt, 1, 0);
    return v;
}

/* this parameter's flag in every chunk */
static void set_flags(amp_ddp *d, ddp_bucket *b, int slot, float v) {
    size_t es = amp_dtype_size(b->cdt);
    for (int q = 0; q < d->g->size; q++) set_value(b->buf + ((size_t)q * b->stride + b->c + (size_t)slot) * es, b->cdt, v);
}

/* ---- a round ------------------------------------------------------------------------ */
static amp_status launch(amp_ddp *d, ddp_bucket *b, bool overlapped) {
    amp_dist_group *g = d->g;
    size_t es = amp_dtype_size(b->cdt);
    if (d->o.zero_stage == 1)
        b->work = amp__dist_start(g, "amp_ddp (gradient reduce_scatter)", AMP_DIST_K_REDUCE_SCATTER, b->cdt, AMP_DIST_AVG, NULL, b->buf,
                                  b->shard, b->stride, 0);
    else
        b->work = amp__dist_start(g, "amp_ddp (gradient all_reduce)", AMP_DIST_K_ALL_REDUCE, b->cdt, AMP_DIST_AVG, b->buf, NULL, NULL,
                                  (size_t)g->size * b->stride, 0);
    (void)es;
    if (!b->work) return amp_last_status();
    b->launched = true;
    d->st.buckets_sent++;
    if (overlapped) d->st.buckets_overlapped++;
    return AMP_OK;
}

/* Starts ready buckets in bucket order. */
static amp_status launch_ready(amp_ddp *d, bool overlapped) {
    while (d->next_launch < d->nb && d->bs[d->next_launch].pending == 0) {
        amp_status st = launch(d, &d->bs[d->next_launch], overlapped);
        if (st != AMP_OK) return st;
        d->next_launch++;
    }
    return AMP_OK;
}

static amp_status progress_all(amp_ddp *d) {
    for (int i = 0; i < d->nb; i++) {
        ddp_bucket *b = &d->bs[i];
        if (!b->work) continue;
        bool done;
        amp_status st = amp__dist_progress(b->work, &done);
        if (st != AMP_OK) return st;
        if (!done) break; /* later ones were started after it */
    }
    return AMP_OK;
}

static void copy_grad_in(amp_ddp *d, ddp_param *p) {
    ddp_bucket *b = &d->bs[p->bucket];
    const amp_tensor *gr = p->param->grad;
    seg_copy c = {b->buf, b->cdt, NULL, NULL, p->param->dtype, p->off};
    if (gr && amp_tensor_is_contiguous(gr) && gr->dtype == p->param->dtype) {
        c.src = amp__data(gr);
        for_segments(b, p->off, (size_t)p->numel, seg_in, &c);
        set_flags(d, b, p->slot, 1.0f);
    } else if (gr) { /* a .grad set by the user in another layout: convert through a contiguous copy */
        amp_tensor *tmp = amp__tensor_new(FN, p->param->dtype, gr->ndim, gr->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        if (tmp && amp__copy_convert(tmp, gr) == AMP_OK) {
            c.src = amp__data(tmp);
            for_segments(b, p->off, (size_t)p->numel, seg_in, &c);
            set_flags(d, b, p->slot, 1.0f);
        } else {
            for_segments(b, p->off, (size_t)p->numel, seg_zero, &c);
            set_flags(d, b, p->slot, 0.0f);
        }
        amp__release(tmp);
    } else {
        for_segments(b, p->off, (size_t)p->numel, seg_zero, &c);
        set_flags(d, b, p->slot, 0.0f);
    }
    p->ready = true;
    b->pending--;
}

static void abandon_round(amp_ddp *d, const char *why) {
    for (int i = 0; i < d->nb; i++) {
        ddp_bucket *b = &d->bs[i];
        if (b->work) amp__dist_abandon(b->work, why);
        b->work = NULL;
    }
}

static void reset_round(amp_ddp *d) {
    for (int i = 0; i < d->n; i++) d->ps[i].ready = false;
    for (int i = 0; i < d->nb; i++) {
        d->bs[i].pending = d->bs[i].np;
        d->bs[i].launched = false;
        d->bs[i].work = NULL;
    }
    d->next_launch = 0;
    d->in_round = false;
}

static amp_status write_back(amp_ddp *d);

static amp_status finish_round(amp_ddp *d) {
    amp_dist_group *g = d->g;
    amp_status st = AMP_OK;
    for (int i = 0; i < d->n; i++)
        if (!d->ps[i].ready) copy_grad_in(d, &d->ps[i]);
    st = launch_ready(d, false);
    double t0 = amp__dist_now();
    for (int i = 0; i < d->nb && st == AMP_OK; i++) {
        ddp_bucket *b = &d->bs[i];
        st = amp__dist_finish(b->work);
        b->work = NULL;
    }
    if (st != AMP_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", amp_last_error());
        abandon_round(d, why);
        reset_round(d);
        return st;
    }
    d->st.wait_s += amp__dist_now() - t0;
    st = write_back(d);
    /* module buffers (BatchNorm's running statistics) follow rank 0, as
     * torch's broadcast_buffers; no version bump, so a skipped step's
     * journal still rolls them back to the (equal) values before the forward */
    for (int i = 0; i < d->nbuf && st == AMP_OK; i++) {
        amp_tensor *t = d->buffers[i];
        st = amp__dist_finish(amp__dist_start(g, "amp_ddp (buffer broadcast)", AMP_DIST_K_BROADCAST, t->dtype, AMP_DIST_SUM,
                                              amp__data(t), NULL, NULL, (size_t)amp_tensor_numel(t), 0));
    }
    d->st.syncs++;
    d->st.comm_s += g->stats.wait_s - d->comm0;
    reset_round(d);
    return st;
}

static amp_status round_callback(void *ctx, amp_status bw) {
    amp_ddp *d = ctx;
    if (!d->in_round) return AMP_OK;
    if (bw != AMP_OK) {
        /* this rank's backward failed: the others may be waiting for its
         * buckets; the group is marked broken and the caller should abort */
        abandon_round(d, "a backward failed on this rank during a gradient round");
        reset_round(d);
        return AMP_OK;
    }
    amp_status st = finish_round(d);
    if (st != AMP_OK && amp_last_status() == AMP_OK) amp_error(st, "%s: gradient averaging failed", FN);
    return st;
}

static amp_status begin_round(amp_ddp *d) {
    if (d->in_round) return AMP_OK;
    d->in_round = true;
    d->comm0 = d->g->stats.wait_s;
    d->g->step = d->step0 + d->st.syncs + 1; /* named when the ranks' collectives differ */
    return amp_autograd_queue_callback(round_callback, d);
}

static amp_status grad_hook(amp_tensor *leaf, void *ctx) {
    (void)leaf;
    ddp_param *p = ctx;
    amp_ddp *d = p->d;
    if (!d->sync) return AMP_OK;
    if (p->ready) /* a second engine run reached it in one backward: its first part is on its way already */
        return amp_error(AMP_ERR_STATE, "amp_ddp: a parameter (%lld elements) received gradients from two backward runs of one "
                                        "backward (used inside an activation-checkpointed region and elsewhere, or in two "
                                        "regions); data parallel needs each parameter's gradient final once per backward",
                         (long long)p->numel);
    amp_status st = begin_round(d);
    if (st != AMP_OK) return st;
    copy_grad_in(d, p);
    if (!d->o.no_overlap) {
        st = launch_ready(d, true);
        if (st == AMP_OK) st = progress_all(d);
    }
    return st;
}

amp_status amp_ddp_finish(amp_ddp *d) {
    if (!d) return amp_error(AMP_ERR_ARG, "amp_ddp_finish: ddp is NULL");
    if (!d->in_round) d->comm0 = d->g->stats.wait_s;
    d->in_round = true;
    return finish_round(d);
}

amp_status amp_ddp_set_sync(amp_ddp *d, bool sync) {
    if (!d) return amp_error(AMP_ERR_ARG, "amp_ddp_set_sync: ddp is NULL");
    if (d->in_round) return amp_error(AMP_ERR_STATE, "amp_ddp_set_sync: called during a backward");
    d->sync = sync;
    return AMP_OK;
}

bool amp_ddp_sync_enabled(const amp_ddp *d) {
    if (!d) amp_error(AMP_ERR_ARG, "amp_ddp_sync_enabled: ddp is NULL");
    return d && d->sync;
}
void amp__ddp_set_step(amp_ddp *d, int64_t step) {
    d->step0 = step - d->st.syncs;
    d->g->step = step;
}

amp_dist_group *amp_ddp_group(const amp_ddp *d) { return d ? d->g : amp_error_null(AMP_ERR_ARG, "amp_ddp_group: ddp is NULL"); }

/* ---- writing the averages back --------------------------------------------------------- */
static float bucket_flag(const ddp_bucket *b, const char *chunk_base, int slot) {
    size_t es = amp_dtype_size(b->cdt);
    return get_value(chunk_base + (b->c + (size_t)slot) * es, b->cdt);
}

static amp_status write_back(amp_ddp *d) {
    int r = d->g->rank;
    if (d->o.zero_stage == 0) {
        for (int i = 0; i < d->n; i++) {
            ddp_param *p = &d->ps[i];
            ddp_bucket *b = &d->bs[p->bucket];
            if (!(bucket_flag(b, b->buf, p->slot) > 0)) continue; /* no rank had a gradient */
            amp_tensor *t = p->param;
            if (!t->grad || !amp_tensor_is_contiguous(t->grad) || t->grad->dtype != t->dtype) {
                amp_tensor *ng = amp__tensor_new(FN, t->dtype, t->ndim, t->shape, AMP_MEM_GRAD, AMP_NEW_UNSCOPED);
                if (!ng) return amp_last_status();
                amp__release(t->grad);
                t->grad = ng;
            }
            amp__bump_version(t->grad);
            seg_copy c = {b->buf, b->cdt, NULL, amp__data(t->grad), t->dtype, p->off};
            for_segments(b, p->off, (size_t)p->numel, seg_out, &c);
        }
        return AMP_OK;
    }
    /* stage 1: each stage-1 optimizer's slices take their part of this rank's chunk */
    for (ddp_optim *z = d->optims; z; z = z->next) {
        if (z->stage != 1) continue;
        for (int k = 0; k < z->npieces; k++) {
            ddp_piece *pc = &z->pieces[k];
            ddp_param *p = &d->ps[pc->param];
            ddp_bucket *b = &d->bs[p->bucket];
            bool had = bucket_flag(b, b->shard, p->slot) > 0;
            if (!had) {
                if (pc->view->grad) amp__release(pc->view->grad);
                pc->view->grad = NULL;
                continue;
            }
            size_t es = amp_dtype_size(b->cdt);
            const char *src = b->shard + (pc->boff - (size_t)r * b->c) * es;
            char *dst = amp__data(pc->grad);
            if (b->cdt == p->param->dtype) memcpy(dst, src, (size_t)pc->len * es);
            else amp_convert(dst, p->param->dtype, src, b->cdt, (size_t)pc->len, 0);
            amp__bump_version(pc->grad);
            if (pc->view->grad != pc->grad) {
                amp__release(pc->view->grad);
                pc->view->grad = amp_tensor_retain(pc->grad);
            }
        }
    }
    return AMP_OK;
}

/* ---- creation ------------------------------------------------------------------------------- */
static uint32_t mix32(uint32_t h, uint64_t v) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    return (h ^ (uint32_t)v ^ (uint32_t)(v >> 32)) * 16777619u;
}

static uint32_t param_sig(const amp_tensor *t) {
    uint32_t h = 2166136261u;
    h = mix32(h, (uint64_t)t->dtype);
    h = mix32(h, (uint64_t)t->ndim);
    for (int k = 0; k < t->ndim; k++) h = mix32(h, (uint64_t)t->shape[k]);
    return h;
}

/* Every rank holds the same list (count, shapes, dtypes): else an error on every rank. */
static amp_status check_same(amp_dist_group *g, const char *fn, amp_tensor *const *params, int n) {
    if (g->size == 1) return AMP_OK;
    double cnt[2] = {(double)n, -(double)n};
    amp_status st = amp__dist_allreduce_f64(g, fn, cnt, 2, AMP_DIST_MAX);
    if (st != AMP_OK) return st;
    if (cnt[0] != -cnt[1])
        return amp_error(AMP_ERR_SHAPE, "%s: the ranks pass different numbers of parameters (%g to %g; this rank %d has %d)", fn,
                         -cnt[1], cnt[0], g->rank, n);
    double *v = malloc(sizeof *v * 2 * (size_t)n);
    if (!v) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    for (int i = 0; i < n; i++) {
        v[i] = (double)param_sig(params[i]);
        v[n + i] = -v[i];
    }
    st = amp__dist_allreduce_f64(g, fn, v, 2 * n, AMP_DIST_MAX);
    if (st == AMP_OK)
        for (int i = 0; i < n; i++)
            if (v[i] != -v[n + i]) {
                char sb[AMP_SHAPE_BUF];
                st = amp_error(AMP_ERR_SHAPE, "%s: parameter %d differs between ranks in shape or dtype (rank %d has %s %s)", fn, i,
                               g->rank, amp_dtype_name(params[i]->dtype),
                               amp__shape_fmt(params[i]->ndim, params[i]->shape, sb, sizeof sb));
                break;
            }
    free(v);
    return st;
}

static amp_status broadcast_tensor(amp_dist_group *g, const char *fn, amp_tensor *t, bool bump) {
    if (g->size == 1) return AMP_OK;
    amp_status st = amp__dist_finish(
        amp__dist_start(g, fn, AMP_DIST_K_BROADCAST, t->dtype, AMP_DIST_SUM, amp__data(t), NULL, NULL, (size_t)amp_tensor_numel(t), 0));
    if (st == AMP_OK && bump && g->rank != 0) amp__bump_version(t);
    return st;
}

static amp_ddp *ddp_new(const char *fn, amp_dist_group *g, amp_tensor *const *params, int n, amp_tensor *const *bufs, int nbuf,
                        const amp_ddp_opts *in) {
    if (!g) return amp_error_null(AMP_ERR_ARG, "%s: group is NULL", fn);
    if (!params || n <= 0) return amp_error_null(AMP_ERR_ARG, "%s: params is NULL or n = %d is not positive", fn, n);
    amp_ddp_opts o = in ? *in : amp_ddp_default_opts();
    if (o.zero_stage != 0 && o.zero_stage != 1)
        return amp_error_null(AMP_ERR_ARG, "%s: zero_stage %d is not 0 or 1 (ZeRO-2/3 are not implemented)", fn, o.zero_stage);
    if ((int)o.grad_comm < 0 || o.grad_comm > AMP_GRAD_COMM_F32)
        return amp_error_null(AMP_ERR_ARG, "%s: grad_comm %d is not a communication dtype", fn, (int)o.grad_comm);
    if (o.bucket_mb < 0 || o.first_bucket_mb < 0 || !isfinite(o.bucket_mb) || !isfinite(o.first_bucket_mb))
        return amp_error_null(AMP_ERR_ARG, "%s: bucket sizes %g / %g MB must be >= 0", fn, o.bucket_mb, o.first_bucket_mb);
    if (o.bucket_mb == 0) o.bucket_mb = 25;
    if (o.first_bucket_mb == 0) o.first_bucket_mb = 1;
    for (int i = 0; i < n; i++) {
        const amp_tensor *p = params[i];
        if (amp__optim_check_param(fn, params, i) != AMP_OK) return NULL;
        if (!amp_dtype_is_float(p->dtype))
            return amp_error_null(AMP_ERR_DTYPE, "%s: params[%d] has dtype %s", fn, i, amp_dtype_name(p->dtype));
        for (int j = 0; j < i; j++)
            if (params[j] == p) return amp_error_null(AMP_ERR_ARG, "%s: params[%d] and params[%d] are the same tensor", fn, j, i);
    }
    if (check_same(g, fn, params, n) != AMP_OK) return NULL;
    amp_ddp *d = calloc(1, sizeof *d);
    if (!d) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    *d = (amp_ddp){.g = g, .o = o, .n = n, .sync = true};
    d->ps = calloc((size_t)n, sizeof *d->ps);
    d->bs = calloc((size_t)n, sizeof *d->bs); /* at most one bucket per parameter */
    d->buffers = calloc((size_t)(nbuf > 0 ? nbuf : 1), sizeof *d->buffers);
    if (!d->ps || !d->bs || !d->buffers) {
        free(d->ps);
        free(d->bs);
        free(d->buffers);
        free(d);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    for (int i = 0; i < n; i++) {
        d->ps[i].d = d;
        d->ps[i].param = amp_tensor_retain(params[i]);
        d->ps[i].numel = amp_tensor_numel(params[i]);
        d->ps[i].hook = -1;
    }
    for (int i = 0; i < nbuf; i++)
        if (bufs[i] && amp_dtype_is_float(bufs[i]->dtype) && amp_tensor_is_contiguous(bufs[i]))
            d->buffers[d->nbuf++] = amp_tensor_retain(bufs[i]);
    amp_status st = AMP_OK;
    /* rank 0's weights everywhere */
    if (!o.no_broadcast)
        for (int i = 0; i < n && st == AMP_OK; i++) st = broadcast_tensor(g, fn, d->ps[i].param, true);
    for (int i = 0; i < d->nbuf && st == AMP_OK; i++) st = broadcast_tensor(g, fn, d->buffers[i], true);
    if (st != AMP_OK) {
        amp_ddp_free(d);
        return NULL;
    }
    /* buckets, parameters in reverse order, one open bucket per dtype */
    int open[AMP_DTYPE_COUNT];
    for (int k = 0; k < AMP_DTYPE_COUNT; k++) open[k] = -1;
    for (int i = n - 1; i >= 0; i--) {
        ddp_param *p = &d->ps[i];
        amp_dtype pdt = p->param->dtype, cdt = comm_dtype(o.grad_comm, pdt);
        double cap = (d->nb == 0 ? o.first_bucket_mb : o.bucket_mb) * 1048576.0;
        int bi = open[pdt];
        if (bi >= 0) {
            ddp_bucket *b = &d->bs[bi];
            double bytes = (double)(b->numel + (size_t)p->numel) * (double)amp_dtype_size(cdt);
            double bcap = (bi == 0 ? o.first_bucket_mb : o.bucket_mb) * 1048576.0;
            if (bytes > bcap && b->numel > 0) bi = -1;
        }
        if (bi < 0) {
            bi = d->nb++;
            open[pdt] = bi;
            d->bs[bi].pdt = pdt;
            d->bs[bi].cdt = cdt;
            d->bs[bi].params = calloc((size_t)n, sizeof(int));
            if (!d->bs[bi].params) {
                amp_ddp_free(d);
                return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
            }
        }
        (void)cap;
        ddp_bucket *b = &d->bs[bi];
        p->bucket = bi;
        p->slot = b->np;
        p->off = b->numel;
        b->params[b->np++] = i;
        b->numel += (size_t)p->numel;
    }
    int world = g->size;
    for (int i = 0; i < d->nb; i++) {
        ddp_bucket *b = &d->bs[i];
        b->c = b->numel / (size_t)world + (b->numel % (size_t)world != 0);
        b->stride = b->c + (size_t)b->np;
        size_t es = amp_dtype_size(b->cdt);
        b->buf_bytes = (size_t)world * b->stride * es;
        b->buf = amp__alloc(b->buf_bytes, AMP_MEM_GRAD);
        if (!b->buf) {
            amp_ddp_free(d);
            return NULL;
        }
        memset(b->buf, 0, b->buf_bytes);
        if (o.zero_stage == 1) {
            b->shard_bytes = b->stride * es;
            b->shard = amp__alloc(b->shard_bytes, AMP_MEM_GRAD);
            if (!b->shard) {
                amp_ddp_free(d);
                return NULL;
            }
            memset(b->shard, 0, b->shard_bytes);
        }
        b->pending = b->np;
        d->st.numel += (int64_t)b->numel;
        /* bytes sent per round: stage 0 all-reduce (both halves), stage 1 reduce-scatter
         * plus the all-gather of the parameters after each step */
        size_t out = (size_t)(world - 1) * b->stride * es;
        d->st.bytes_per_step += o.zero_stage == 1 ? out + (size_t)(world - 1) * b->stride * amp_dtype_size(b->pdt) : 2 * out;
    }
    for (int i = 0; i < n; i++) {
        d->ps[i].hook = amp_tensor_register_post_accumulate_grad_hook(d->ps[i].param, grad_hook, &d->ps[i]);
        if (d->ps[i].hook < 0) {
            amp_ddp_free(d);
            return NULL;
        }
    }
    d->st.world_size = world;
    d->st.buckets = d->nb;
    d->st.params = n;
    return d;
}

amp_ddp *amp_ddp_new(amp_dist_group *g, amp_tensor *const *params, int n, const amp_ddp_opts *o) {
    return ddp_new("amp_ddp_new", g, params, n, NULL, 0, o);
}

amp_ddp *amp_ddp_new_module(amp_dist_group *g, amp_module *m, const amp_ddp_opts *o) {
    static const char *fn = "amp_ddp_new_module";
    if (!m) return amp_error_null(AMP_ERR_ARG, "%s: module is NULL", fn);
    int np = amp_module_parameters(m, NULL, NULL, 0), nb = amp_module_buffers(m, NULL, NULL, 0);
    if (np <= 0) return amp_error_null(AMP_ERR_ARG, "%s: the module has no parameters", fn);
    amp_tensor **ps = calloc((size_t)np, sizeof *ps), **bs = calloc((size_t)(nb > 0 ? nb : 1), sizeof *bs);
    if (!ps || !bs) {
        free(ps);
        free(bs);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    amp_module_parameters(m, ps, NULL, np);
    if (nb > 0) amp_module_buffers(m, bs, NULL, nb);
    /* parameters that do not require grad (frozen) are broadcast like buffers */
    int k = 0, nf = 0;
    amp_tensor **frozen = calloc((size_t)np + (size_t)(nb > 0 ? nb : 0) + 1, sizeof *frozen);
    if (!frozen) {
        free(ps);
        free(bs);
        return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    }
    for (int i = 0; i < np; i++) {
        if (amp_tensor_requires_grad(ps[i])) ps[k++] = ps[i];
        else frozen[nf++] = ps[i];
    }
    for (int i = 0; i < nb; i++) frozen[nf++] = bs[i];
    amp_ddp *d = k > 0 ? ddp_new(fn, g, ps, k, frozen, nf, o) : amp_error_null(AMP_ERR_ARG, "%s: no parameter requires grad", fn);
    free(ps);
    free(bs);
    free(frozen);
    return d;
}

void amp_ddp_free(amp_ddp *d) {
    if (!d) return;
    if (d->in_round) abandon_round(d, "amp_ddp_free during a round");
    for (ddp_optim *z = d->optims; z; z = z->next) z->d = NULL; /* their optimizers now fail clearly */
    for (int i = 0; i < d->n; i++) {
        if (d->ps[i].hook >= 0) amp_tensor_remove_hook(d->ps[i].param, d->ps[i].hook);
        amp__release(d->ps[i].param);
    }
    for (int i = 0; i < d->nb; i++) {
        ddp_bucket *b = &d->bs[i];
        if (b->buf) amp__free(b->buf, b->buf_bytes, AMP_MEM_GRAD);
        if (b->shard) amp__free(b->shard, b->shard_bytes, AMP_MEM_GRAD);
        if (b->gather) amp__free(b->gather, b->gather_bytes, AMP_MEM_WORKSPACE);
        free(b->params);
    }
    for (int i = 0; i < d->nbuf; i++) amp__release(d->buffers[i]);
    free(d->buffers);
    free(d->ps);
    free(d->bs);
    free(d);
}

amp_status amp_ddp_get_stats(const amp_ddp *d, amp_ddp_stats *out) {
    if (!d || !out) return amp_error(AMP_ERR_ARG, "amp_ddp_get_stats: NULL argument");
    *out = d->st;
    return AMP_OK;
}

/* ---- optimizers ----------------------------------------------------------------------------------- */
static amp_status need_ddp(const ddp_optim *z, const char *what) {
    if (!z->d) return amp_error(AMP_ERR_STATE, "%s: the data-parallel object of this optimizer was freed (free optimizers first)", what);
    return AMP_OK;
}

static amp_status z_agree(void *ctx, bool *flag) {
    ddp_optim *z = ctx;
    if (need_ddp(z, "amp_ddp optimizer") != AMP_OK) return amp_last_status();
    return amp__dist_any(z->d->g, "amp_ddp (agreeing on the skip decision)", flag);
}

static amp_status z_sum_sq(void *ctx, double *v) {
    ddp_optim *z = ctx;
    if (need_ddp(z, "amp_clip_grad_norm_optims") != AMP_OK) return amp_last_status();
    return amp__dist_allreduce_f64(z->d->g, "amp_clip_grad_norm_optims (global norm)", v, 1, AMP_DIST_SUM);
}

typedef struct {
    char *buf;
    amp_dtype bdt;
    amp_tensor *p;
    size_t base;
} seg_param;

static amp_status gather_buckets(ddp_optim *z) {
    amp_ddp *d = z->d;
    amp_dist_group *g = d->g;
    int r = g->rank;
    amp_status st = AMP_OK;
    amp_dist_work **ws = calloc((size_t)d->nb, sizeof *ws);
    if (!ws) return amp_error(AMP_ERR_NOMEM, "%s: out of memory", FN);
    for (int i = 0; i < d->nb && st == AMP_OK; i++) {
        if (!z->buckets[i]) continue;
        ddp_bucket *b = &d->bs[i];
        size_t pes = amp_dtype_size(b->pdt);
        char *gb = b->buf;
        if (b->cdt != b->pdt) {
            if (!b->gather) {
                b->gather_bytes = (size_t)g->size * b->stride * pes;
                b->gather = amp__alloc(b->gather_bytes, AMP_MEM_WORKSPACE);
                if (!b->gather) {
                    st = amp_last_status();
                    break;
                }
            }
            gb = b->gather;
        }
        /* this rank's chunk: the parameters' current values */
        size_t lo = (size_t)r * b->c, hi = lo + b->c < b->numel ? lo + b->c : b->numel;
        for (int k = 0; k < b->np && lo < hi; k++) {
            ddp_param *p = &d->ps[b->params[k]];
            size_t a = p->off > lo ? p->off : lo, e = p->off + (size_t)p->numel < hi ? p->off + (size_t)p->numel : hi;
            if (a >= e) continue;
            seg_copy c = {gb, b->pdt, (const char *)amp__data(p->param), NULL, b->pdt, p->off};
            for_segments(b, a, e - a, seg_in, &c);
        }
        ws[i] = amp__dist_start(g, "amp_ddp (ZeRO-1 parameter all_gather)", AMP_DIST_K_ALL_GATHER, b->pdt, AMP_DIST_SUM, NULL,
                                gb + (size_t)r * b->stride * pes, gb, b->stride, 0);
        if (!ws[i]) st = amp_last_status();
    }
    double t0 = amp__dist_now();
    for (int i = 0; i < d->nb; i++) {
        if (!ws[i]) continue;
        if (st != AMP_OK) {
            amp__dist_abandon(ws[i], "an earlier parameter all_gather failed");
            continue;
        }
        st = amp__dist_finish(ws[i]);
        if (st != AMP_OK) continue;
        ddp_bucket *b = &d->bs[i];
        char *gb = b->cdt != b->pdt ? b->gather : b->buf;
        for (int k = 0; k < b->np; k++) {
            ddp_param *p = &d->ps[b->params[k]];
            seg_copy c = {gb, b->pdt, NULL, (char *)amp__data(p->param), b->pdt, p->off};
            for_segments(b, p->off, (size_t)p->numel, seg_out, &c);
            amp__bump_version(p->param);
        }
    }
    d->st.wait_s += amp__dist_now() - t0;
    free(ws);
    return st;
}

static amp_status z_after_step(void *ctx, amp_status st) {
    ddp_optim *z = ctx;
    if (need_ddp(z, "amp_optim_step") != AMP_OK) return amp_last_status();
    char local_msg[1024] = "";
    if (st != AMP_OK) snprintf(local_msg, sizeof local_msg, "%s", amp_last_error());
    double t0 = z->d->g->stats.wait_s;
    amp_status gs = z->stage == 1 ? gather_buckets(z) : AMP_OK;
    if (gs != AMP_OK) return gs;
    bool bad = st != AMP_OK;
    amp_status as = amp__dist_any(z->d->g, "amp_ddp (agreeing on the update)", &bad);
    z->d->st.comm_s += z->d->g->stats.wait_s - t0;
    if (as != AMP_OK) return as;
    if (st != AMP_OK) return amp_error(st, "%s", local_msg);
    if (bad)
        return amp_error(AMP_ERR_RANGE, "amp_optim_step: the update failed on another rank (a non-finite result there); this "
                                        "rank's update was applied, so stop the run");
    return AMP_OK;
}

static void z_zero_grad(void *ctx) {
    ddp_optim *z = ctx;
    if (!z->d) return;
    for (int i = 0; i < z->np; i++) amp_tensor_set_grad(z->d->ps[z->params[i]].param, NULL);
}

static void z_destroy(void *ctx) {
    ddp_optim *z = ctx;
    if (z->d) { /* unlink */
        ddp_optim **pp = &z->d->optims;
        while (*pp && *pp != z) pp = &(*pp)->next;
        if (*pp) *pp = z->next;
    }
    for (int k = 0; k < z->npieces; k++) {
        amp__release(z->pieces[k].view);
        amp__release(z->pieces[k].grad);
    }
    free(z->pieces);
    free(z->params);
    free(z->buckets);
    free(z);
}

static amp_tensor *z_origin(void *ctx, int i, int64_t *offset);

static ddp_optim *optim_ctx(const amp_optim *opt) {
    if (!opt || opt->dist.destroy != z_destroy) return NULL;
    return opt->dist.ctx;
}

amp_optim *amp_ddp_optim_new(amp_ddp *d, amp_tensor *const *params, int n, const amp_optim_opts *o) {
    static const char *fn = "amp_ddp_optim_new";
    if (!d) return amp_error_null(AMP_ERR_ARG, "%s: ddp is NULL", fn);
    if (!params || n <= 0) return amp_error_null(AMP_ERR_ARG, "%s: params is NULL or n = %d is not positive", fn, n);
    if (!o) return amp_error_null(AMP_ERR_ARG, "%s: opts is NULL", fn);
    ddp_optim *z = calloc(1, sizeof *z);
    if (!z) return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
    z->d = d;
    z->stage = d->o.zero_stage;
    z->np = n;
    z->params = calloc((size_t)n, sizeof *z->params);
    z->buckets = calloc((size_t)d->nb, sizeof *z->buckets);
    if (!z->params || !z->buckets) goto nomem;
    for (int i = 0; i < n; i++) {
        if (!params[i] || !amp__live(fn, params[i])) {
            z_destroy(z);
            return params[i] ? NULL : amp_error_null(AMP_ERR_ARG, "%s: params[%d] is NULL", fn, i);
        }
        int k = -1;
        for (int j = 0; j < d->n; j++)
            if (d->ps[j].param == params[i]) k = j;
        if (k < 0) {
            z_destroy(z);
            return amp_error_null(AMP_ERR_ARG, "%s: params[%d] is not one of the data-parallel object's parameters", fn, i);
        }
        for (int j = 0; j < i; j++)
            if (z->params[j] == k) {
                z_destroy(z);
                return amp_error_null(AMP_ERR_ARG, "%s: params[%d] and params[%d] are the same tensor", fn, j, i);
            }
        for (ddp_optim *y = d->optims; y; y = y->next)
            for (int j = 0; j < y->np; j++)
                if (y->params[j] == k) {
                    z_destroy(z);
                    return amp_error_null(AMP_ERR_ARG, "%s: params[%d] already belongs to another optimizer of this data-parallel "
                                                       "object", fn, i);
                }
        z->params[i] = k;
        z->buckets[d->ps[k].bucket] = true;
    }
    amp_optim *opt = NULL;
    if (z->stage == 0) {
        opt = amp__optim_new(fn, params, n, o, false);
    } else {
        /* this rank's slices, in the optimizer's parameter order */
        int r = d->g->rank, cap = n * 2 + 2;
        z->pieces = calloc((size_t)cap, sizeof *z->pieces);
        if (!z->pieces) goto nomem;
        uint64_t sr_base = 0;
        int64_t *sr_of = calloc((size_t)n, sizeof *sr_of);
        if (!sr_of) goto nomem;
        for (int i = 0; i < n; i++) {
            sr_of[i] = (int64_t)sr_base;
            sr_base += (uint64_t)d->ps[z->params[i]].numel;
        }
        for (int i = 0; i < n; i++) {
            ddp_param *p = &d->ps[z->params[i]];
            ddp_bucket *b = &d->bs[p->bucket];
            size_t lo = (size_t)r * b->c, hi = lo + b->c < b->numel ? lo + b->c : b->numel;
            size_t a = p->off > lo ? p->off : lo, e = p->off + (size_t)p->numel < hi ? p->off + (size_t)p->numel : hi;
            if (a >= e) continue;
            if (z->npieces == cap) {
                cap *= 2;
                ddp_piece *np2 = realloc(z->pieces, sizeof *np2 * (size_t)cap);
                if (!np2) {
                    free(sr_of);
                    goto nomem;
                }
                z->pieces = np2;
            }
            ddp_piece *pc = &z->pieces[z->npieces++];
            memset(pc, 0, sizeof *pc);
            pc->param = z->params[i];
            pc->poff = (int64_t)(a - p->off);
            pc->boff = a;
            pc->len = (int64_t)(e - a);
            int64_t shape[1] = {pc->len}, stride[1] = {1};
            pc->view = amp__view(p->param, 1, shape, stride, p->param->offset + pc->poff);
            if (pc->view) amp__scope_forget(pc->view);
            pc->grad = amp__tensor_new(fn, p->param->dtype, 1, shape, AMP_MEM_GRAD, AMP_NEW_UNSCOPED);
            if (!pc->view || !pc->grad) {
                free(sr_of);
                z_destroy(z);
                return NULL;
            }
            memset(amp__data(pc->grad), 0, (size_t)pc->len * amp_dtype_size(p->param->dtype));
            pc->view->requires_grad = true;
        }
        amp_tensor **views = calloc((size_t)(z->npieces ? z->npieces : 1), sizeof *views);
        if (!views) {
            free(sr_of);
            goto nomem;
        }
        for (int k = 0; k < z->npieces; k++) views[k] = z->pieces[k].view;
        opt = amp__optim_new(fn, views, z->npieces, o, true);
        free(views);
        if (opt) {
            for (int k = 0; k < z->npieces; k++) {
                int i = 0;
                while (z->params[i] != z->pieces[k].param) i++;
                opt->ps[k].sr_off = sr_of[i] + z->pieces[k].poff;
            }
            opt->sr_span = sr_base;
        }
        free(sr_of);
    }
    /* every rank must succeed (a stage-1 optimizer on one rank and none on another would hang the next step) */
    bool bad = opt == NULL;
    char msg[1024] = "";
    if (bad) snprintf(msg, sizeof msg, "%s", amp_last_error());
    amp_status as = amp__dist_any(d->g, fn, &bad);
    if (as != AMP_OK || bad) {
        amp_optim_free(opt);
        z_destroy(z);
        if (as != AMP_OK) return NULL;
        return amp_error_null(AMP_ERR_ARG, "%s", msg[0] ? msg : "amp_ddp_optim_new: failed on another rank");
    }
    z->opt = opt;
    opt->dist.ctx = z;
    opt->dist.agree = z_agree;
    opt->dist.sum_sq = z->stage == 1 ? z_sum_sq : NULL;
    opt->dist.after_step = z_after_step;
    opt->dist.zero_grad = z->stage == 1 ? z_zero_grad : NULL;
    opt->dist.destroy = z_destroy;
    opt->dist.origin = z_origin;
    z->next = d->optims;
    d->optims = z;
    return opt;
nomem:
    z_destroy(z);
    return amp_error_null(AMP_ERR_NOMEM, "%s: out of memory", fn);
}

static amp_tensor *z_origin(void *ctx, int i, int64_t *offset) {
    ddp_optim *z = ctx;
    if (!z->d) {
        if (offset) *offset = -1;
        return amp_error_null(AMP_ERR_STATE, "amp_optim_param_origin: the data-parallel object of this optimizer was freed");
    }
    if (z->stage == 0) {
        if (offset) *offset = 0;
        return z->d->ps[z->params[i]].param;
    }
    if (offset) *offset = z->pieces[i].poff;
    return z->d->ps[z->pieces[i].param].param;
}

/* ---- for the checkpoint code (ddp_checkpoint.c) ---------------------------------------------------- */
#include "dist/ddp_impl.h"

int amp__ddp_optim_stage(const amp_optim *opt) {
    ddp_optim *z = optim_ctx(opt);
    return z ? z->stage : -1;
}

amp_ddp *amp__ddp_of(const amp_optim *opt) {
    ddp_optim *z = optim_ctx(opt);
    return z ? z->d : NULL;
}

int amp__ddp_optim_nparams(const amp_optim *opt) {
    ddp_optim *z = optim_ctx(opt);
    return z ? z->np : -1;
}

amp_tensor *amp__ddp_optim_param(const amp_optim *opt, int i) {
    ddp_optim *z = optim_ctx(opt);
    return z && z->d ? z->d->ps[z->params[i]].param : NULL;
}

void amp__ddp_piece(const amp_optim *opt, int k, int *param_index, int64_t *poff, int64_t *len) {
    ddp_optim *z = optim_ctx(opt);
    ddp_piece *pc = &z->pieces[k];
    int i = 0;
    while (z->params[i] != pc->param) i++;
    *param_index = i;
    *poff = pc->poff;
    *len = pc->len;
}

/* Gathers state `name` of a stage-1 optimizer: full[i] (f32, the shape of
 * parameter i, unscoped; the caller frees) on every rank, or all NULL when
 * no rank's slices have it. Collective. */
amp_status amp__ddp_full_state(amp_optim *opt, const char *name, amp_tensor **full) {
    static const char *fn = "amp_ddp_checkpoint_save";
    ddp_optim *z = optim_ctx(opt);
    if (!z || z->stage != 1 || !z->d) return amp_error(AMP_ERR_ARG, "%s: not a ZeRO-1 optimizer", fn);
    amp_ddp *d = z->d;
    amp_dist_group *g = d->g;
    int r = g->rank;
    for (int i = 0; i < z->np; i++) full[i] = NULL;
    bool present = false;
    for (int k = 0; k < z->npieces && !present; k++) present = amp_optim_state(opt, k, name) != NULL;
    amp_clear_error();
    amp_status st = amp__dist_any(g, fn, &present);
    if (st != AMP_OK || !present) return st;
    for (int i = 0; i < z->np; i++) {
        const amp_tensor *p = d->ps[z->params[i]].param;
        full[i] = amp__tensor_new(fn, AMP_F32, p->ndim, p->shape, AMP_MEM_WORKSPACE, AMP_NEW_UNSCOPED);
        if (!full[i]) {
            st = amp_last_status();
            goto fail;
        }
        memset(amp__data(full[i]), 0, (size_t)amp_tensor_numel(p) * 4);
    }
    for (int bi = 0; bi < d->nb; bi++) {
        if (!z->buckets[bi]) continue;
        ddp_bucket *b = &d->bs[bi];
        size_t bytes = (size_t)g->size * b->stride * 4;
        float *gb = amp__alloc(bytes ? bytes : 4, AMP_MEM_WORKSPACE);
        if (!gb) {
            st = amp_last_status();
            goto fail;
        }
        memset(gb, 0, bytes);
        for (int k = 0; k < z->npieces; k++) {
            ddp_piece *pc = &z->pieces[k];
            if (d->ps[pc->param].bucket != bi) continue;
            const amp_tensor *sv = amp_optim_state(opt, k, name);
            if (sv) memcpy(gb + (size_t)r * b->stride + (pc->boff - (size_t)r * b->c), amp__data(sv), (size_t)pc->len * 4);
        }
        amp_clear_error();
        st = amp__dist_finish(amp__dist_start(g, fn, AMP_DIST_K_ALL_GATHER, AMP_F32, AMP_DIST_SUM, NULL, gb + (size_t)r * b->stride, gb,
                                              b->stride, 0));
        if (st == AMP_OK)
            for (int i = 0; i < z->np; i++) {
                ddp_param *p = &d->ps[z->params[i]];
                if (p->bucket != bi) continue;
                seg_copy c = {(char *)gb, AMP_F32, NULL, amp__data(full[i]), AMP_F32, p->off};
                for_segments(b, p->off, (size_t)p->numel, seg_out, &c);
            }
        amp__free(gb, bytes ? bytes : 4, AMP_MEM_WORKSPACE);
        if (st != AMP_OK) goto fail;
    }
    return AMP_OK;
fail:
    for (int i = 0; i < z->np; i++) {
        amp__release(full[i]);
        full[i] = NULL;
    }
    return st;
}
