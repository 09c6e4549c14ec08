/* Checkpoints of a distributed run: one directory in the single-process
 * format (amp/checkpoint.h), written by rank 0 alone. ZeRO-1 optimizers'
 * shards are gathered into a full optimizer of the same options for the
 * save and cut back out of one on restore, so a checkpoint resumes on any
 * world size (one included) and a 1-process checkpoint resumes on N ranks.
 * Per-rank generators travel as the metadata "dist.generators" (each
 * rank's "seed:offset", in rank order); "dist.world_size" records N. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/ddp_impl.h"
#include "dist/dist_impl.h"

static const char *g_states[] = {"exp_avg", "exp_avg_sq", "momentum_buffer", "master"};
#define N_STATES 4

/* A full optimizer with opt's options over its parameters, holding the gathered state
 * (on `keep` ranks; the others only take part in the gathers). Collective. */
static amp_status full_optim(const char *fn, amp_optim *opt, bool keep, amp_optim **out) {
    *out = NULL;
    amp_ddp *d = amp__ddp_of(opt);
    if (!d) return amp_error(AMP_ERR_STATE, "%s: the data-parallel object of an optimizer was freed", fn);
    amp_dist_group *g = amp_ddp_group(d);
    int np = amp__ddp_optim_nparams(opt);
    amp_tensor **params = calloc((size_t)np, sizeof *params), **full = calloc((size_t)np, sizeof *full);
    double *steps = calloc((size_t)np, sizeof *steps);
    amp_status st = AMP_OK;
    amp_optim *t = NULL;
    if (!params || !full || !steps) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto out;
    }
    for (int i = 0; i < np; i++) {
        params[i] = amp__ddp_optim_param(opt, i);
        steps[i] = -1;
    }
    /* per-parameter update counts: the slices of a parameter share them */
    for (int k = 0; k < amp_optim_num_params(opt); k++) {
        int i;
        int64_t off, len;
        amp__ddp_piece(opt, k, &i, &off, &len);
        steps[i] = (double)amp_optim_param_steps(opt, k);
    }
    if ((st = amp__dist_allreduce_f64(g, fn, steps, np, AMP_DIST_MAX)) != AMP_OK) goto out;
    if (keep) {
        t = amp_optim_new(params, np, amp_optim_get_opts(opt));
        if (!t) {
            st = amp_last_status();
            /* keep going through the gathers so the other ranks are not left waiting */
        }
    }
    for (int j = 0; j < N_STATES; j++) {
        amp_status gs = amp__ddp_full_state(opt, g_states[j], full);
        if (gs != AMP_OK) {
            st = gs;
            goto out;
        }
        for (int i = 0; i < np; i++) {
            if (full[i] && t && st == AMP_OK) st = amp_optim_load_state(t, i, g_states[j], full[i]);
            amp__release(full[i]);
            full[i] = NULL;
        }
    }
    if (t && st == AMP_OK) {
        st = amp_optim_set_steps(t, amp_optim_steps(opt));
        for (int i = 0; i < np && st == AMP_OK; i++)
            st = amp_optim_set_param_steps(t, i, steps[i] >= 0 ? (int64_t)steps[i] : amp_optim_steps(opt));
        if (st == AMP_OK) st = amp_optim_set_sr_counter(t, amp_optim_sr_counter(opt));
    }
out:
    if (st == AMP_OK) *out = t;
    else amp_optim_free(t);
    free(params);
    free(full);
    free(steps);
    return st;
}

/* Rank 0's status and message on every rank. */
static amp_status agree_root(amp_dist_group *g, const char *fn, amp_status st) {
    char msg[768];
    memset(msg, 0, sizeof msg);
    if (st != AMP_OK) snprintf(msg, sizeof msg, "%s", amp_last_error());
    double v = g->rank == 0 ? (double)st : 0;
    amp_status cs = amp__dist_allreduce_f64(g, fn, &v, 1, AMP_DIST_SUM); /* only rank 0 contributes */
    if (cs != AMP_OK) return cs;
    if (v == 0) return AMP_OK;
    cs = amp__dist_finish(amp__dist_start(g, fn, AMP_DIST_K_BROADCAST, AMP_U8, AMP_DIST_SUM, msg, NULL, NULL, sizeof msg, 0));
    if (cs != AMP_OK) return cs;
    msg[sizeof msg - 1] = 0;
    if (g->rank == 0) return amp_error((amp_status)v, "%s", msg);
    return amp_error((amp_status)v, "%s: rank 0: %s", fn, msg);
}

amp_status amp_ddp_checkpoint_save(amp_ddp *d, const char *dir, const amp_train_state *s) {
    static const char *fn = "amp_ddp_checkpoint_save";
    if (!d || !dir || !s) return amp_error(AMP_ERR_ARG, "%s: NULL argument", fn);
    if (s->n_optims < 0 || (s->n_optims > 0 && !s->optims)) return amp_error(AMP_ERR_ARG, "%s: bad optimizer list", fn);
    amp_dist_group *g = amp_ddp_group(d);
    bool root = g->rank == 0;
    amp_status st = AMP_OK;
    amp_optim **opts = calloc((size_t)(s->n_optims > 0 ? s->n_optims : 1), sizeof *opts);
    amp_optim **tmp = calloc((size_t)(s->n_optims > 0 ? s->n_optims : 1), sizeof *tmp);
    amp_kv *meta = calloc((size_t)s->n_meta + 2, sizeof *meta);
    uint64_t *gens = calloc((size_t)g->size * 2, sizeof *gens);
    char *gen_str = NULL, ws[32];
    if (!opts || !tmp || !meta || !gens) {
        st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        goto agree; /* the other ranks still wait for the agreement */
    }
    for (int k = 0; k < s->n_optims; k++) {
        opts[k] = s->optims[k];
        if (amp__ddp_optim_stage(s->optims[k]) == 1) {
            amp_status fs = full_optim(fn, s->optims[k], root, &tmp[k]);
            if (fs != AMP_OK && st == AMP_OK) st = fs;
            if (tmp[k]) opts[k] = tmp[k];
        }
    }
    /* every rank's generator */
    uint64_t mine[2] = {s->gen ? s->gen->seed : 0, s->gen ? s->gen->offset : 0};
    amp_status gs = amp__dist_finish(amp__dist_start(g, fn, AMP_DIST_K_ALL_GATHER, AMP_U8, AMP_DIST_SUM, NULL, mine, gens, sizeof mine, 0));
    if (gs != AMP_OK) {
        st = gs;
        goto out; /* the group is broken: no agreement possible */
    }
    if (root && st == AMP_OK) {
        size_t cap = (size_t)g->size * 44 + 1;
        gen_str = malloc(cap);
        if (!gen_str) {
            st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
        } else {
            size_t used = 0;
            gen_str[0] = 0;
            for (int r = 0; r < g->size; r++)
                used += (size_t)snprintf(gen_str + used, cap - used, "%s%" PRIu64 ":%" PRIu64, r ? " " : "", gens[2 * r], gens[2 * r + 1]);
            for (int i = 0; i < s->n_meta; i++) meta[i] = s->meta[i];
            snprintf(ws, sizeof ws, "%d", g->size);
            meta[s->n_meta] = (amp_kv){"dist.world_size", ws};
            meta[s->n_meta + 1] = (amp_kv){"dist.generators", gen_str};
            amp_train_state s2 = *s;
            s2.optims = opts;
            s2.meta = meta;
            s2.n_meta = s->n_meta + 2;
            st = amp_checkpoint_save(dir, &s2);
            if (st != AMP_OK) {
                amp_error_chain(st, "%s", fn);
            }
        }
    }
agree:
    st = agree_root(g, fn, root ? st : AMP_OK) != AMP_OK ? amp_last_status() : st;
out:
    if (tmp)
        for (int k = 0; k < s->n_optims; k++) amp_optim_free(tmp[k]);
    free(opts);
    free(tmp);
    free(meta);
    free(gens);
    free(gen_str);
    return st;
}

/* "seed:offset seed:offset ..." -> rank r's generator */
static bool parse_gen(const char *s, int r, amp_generator *out) {
    for (int k = 0; s && *s; k++) {
        char *end;
        unsigned long long a = strtoull(s, &end, 10);
        if (*end != ':') return false;
        unsigned long long b = strtoull(end + 1, &end, 10);
        if (*end != ' ' && *end != 0) return false;
        if (k == r) {
            out->seed = a;
            out->offset = b;
            return true;
        }
        s = *end ? end + 1 : end;
    }
    return false;
}

amp_status amp_ddp_checkpoint_restore(amp_ddp *d, const amp_checkpoint *c, amp_train_state *s) {
    static const char *fn = "amp_ddp_checkpoint_restore";
    if (!d || !c || !s) return amp_error(AMP_ERR_ARG, "%s: NULL argument", fn);
    if (s->n_optims < 0 || (s->n_optims > 0 && !s->optims)) return amp_error(AMP_ERR_ARG, "%s: bad optimizer list", fn);
    amp_dist_group *g = amp_ddp_group(d);
    /* every rank the same checkpoint (its step, and the id both of its files carry) */
    char same[160];
    const char *key = "the checkpoint", *val = same;
    snprintf(same, sizeof same, "step %lld, checkpoint_id %s", (long long)amp_checkpoint_step(c),
             amp_checkpoint_meta(c, "checkpoint_id") ? amp_checkpoint_meta(c, "checkpoint_id") : "(none)");
    amp_status st = amp__dist_agree(g, fn, "the checkpoints restored", 1, &key, &val, NULL);
    if (st != AMP_OK) return st;
    amp_optim **opts = calloc((size_t)(s->n_optims > 0 ? s->n_optims : 1), sizeof *opts);
    amp_optim **tmp = calloc((size_t)(s->n_optims > 0 ? s->n_optims : 1), sizeof *tmp);
    amp_tensor **params = NULL;
    if (!opts || !tmp) st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
    for (int k = 0; k < s->n_optims && st == AMP_OK; k++) {
        opts[k] = s->optims[k];
        if (amp__ddp_optim_stage(s->optims[k]) != 1) continue;
        int np = amp__ddp_optim_nparams(s->optims[k]);
        params = calloc((size_t)np, sizeof *params);
        if (!params) {
            st = amp_error(AMP_ERR_NOMEM, "%s: out of memory", fn);
            break;
        }
        for (int i = 0; i < np; i++) params[i] = amp__ddp_optim_param(s->optims[k], i);
        tmp[k] = amp_optim_new(params, np, amp_optim_get_opts(s->optims[k]));
        free(params);
        params = NULL;
        if (!tmp[k]) st = amp_last_status();
        else opts[k] = tmp[k];
    }
    if (st == AMP_OK) {
        amp_train_state s2 = *s;
        s2.optims = opts;
        st = amp_checkpoint_restore(c, &s2);
        s->step = s2.step;
        if (st != AMP_OK) {
            amp_error_chain(st, "%s", fn);
        }
    }
    /* each ZeRO-1 optimizer takes its slices of the full state */
    for (int k = 0; k < s->n_optims && st == AMP_OK; k++) {
        if (!tmp[k]) continue;
        amp_optim *o = s->optims[k];
        st = amp_optim_set_steps(o, amp_optim_steps(tmp[k]));
        if (st == AMP_OK) st = amp_optim_set_sr_counter(o, amp_optim_sr_counter(tmp[k]));
        for (int p = 0; p < amp_optim_num_params(o) && st == AMP_OK; p++) {
            int i;
            int64_t off, len;
            amp__ddp_piece(o, p, &i, &off, &len);
            st = amp_optim_set_param_steps(o, p, amp_optim_param_steps(tmp[k], i));
            for (int j = 0; j < N_STATES && st == AMP_OK; j++) {
                amp_tensor *full = amp_optim_state(tmp[k], i, g_states[j]);
                amp_clear_error();
                if (!full) continue;
                int64_t shape[1] = {len}, stride[1] = {1};
                amp_tensor *v = amp__view(full, 1, shape, stride, full->offset + off);
                if (!v) {
                    st = amp_last_status();
                    break;
                }
                amp__scope_forget(v);
                st = amp_optim_load_state(o, p, g_states[j], v);
                amp__release(v);
            }
        }
    }
    /* this rank's generator: its own saved stream, or one derived from rank 0's */
    if (st == AMP_OK && s->gen && g->rank > 0) {
        amp_generator gen;
        if (parse_gen(amp_checkpoint_meta(c, "dist.generators"), g->rank, &gen)) {
            *s->gen = gen;
        } else {
            s->gen->seed ^= 0x9E3779B97F4A7C15ull * (uint64_t)(g->rank + 1);
        }
        amp_clear_error();
    }
    if (tmp)
        for (int k = 0; k < s->n_optims; k++) amp_optim_free(tmp[k]);
    free(opts);
    free(tmp);
    /* all ranks restored, or none goes on */
    char msg[768];
    snprintf(msg, sizeof msg, "%s", st != AMP_OK ? amp_last_error() : "");
    bool bad = st != AMP_OK;
    amp_status as = amp__dist_any(g, fn, &bad);
    if (as != AMP_OK) return as;
    if (st != AMP_OK) return amp_error(st, "%s", msg);
    if (bad) return amp_error(AMP_ERR_STATE, "%s: the restore failed on another rank (its error is on its output)", fn);
    amp__ddp_set_step(d, s->step);
    return AMP_OK;
}
