/* Data parallel for the trainers: `mpirun -np N amp train ...`. Every
 * trainer calls these; with a world of one they are the single-process
 * calls. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/trainer.h"
#include "core/error.h"

int trainer_dist_init(void) {
    if (amp_dist_init(NULL, NULL) != AMP_OK) {
        fprintf(stderr, "amp: error: %s\n", amp_last_error());
        return -1;
    }
    return 0;
}

bool trainer_dist_is_root(void) { return !amp_dist_is_initialized() || amp_dist_rank(amp_dist_world()) == 0; }

int trainer_dist_fail(const char *what) {
    amp_dist_group *g = amp_dist_is_initialized() ? amp_dist_world() : NULL;
    if (!g || amp_dist_world_size(g) == 1) return cli_fail("%s", what);
    fprintf(stderr, "amp: error: rank %d of %d: %s\n", amp_dist_rank(g), amp_dist_world_size(g), what);
    fprintf(stderr, "amp: rank %d is ending the run on every rank\n", amp_dist_rank(g));
    amp_dist_abort(g, CLI_FAIL);
    return CLI_FAIL;
}

int trainer_dist_begin(trainer_dist *td, const trainer_cfg *cfg, amp_module *model) {
    memset(td, 0, sizeof *td);
    td->world = 1;
    if (!amp_dist_is_initialized()) return 0;
    td->g = amp_dist_world();
    td->rank = amp_dist_rank(td->g);
    td->world = amp_dist_world_size(td->g);
    if (cfg->dist_timeout > 0 && amp_dist_set_timeout(td->g, cfg->dist_timeout) != AMP_OK) return -1;
    amp_dist_get_stats(td->g, &td->s0);
    if (td->world == 1) return 0;
    amp_ddp_opts o = amp_ddp_default_opts();
    o.zero_stage = cfg->zero_stage;
    o.grad_comm = cfg->grad_comm;
    o.no_overlap = cfg->no_overlap;
    o.bucket_mb = cfg->bucket_mb;
    td->ddp = amp_ddp_new_module(td->g, model, &o);
    if (!td->ddp) {
        char prev[1024];
        snprintf(prev, sizeof prev, "%s", amp_last_error());
        amp_error(amp_last_status(), "amp train: data parallel setup: %s", prev);
        return -1;
    }
    return 0;
}

amp_optim *trainer_dist_optim_new(trainer_dist *td, amp_tensor *const *params, int n, const amp_optim_opts *o) {
    if (!td->ddp) return amp_optim_new(params, n, o);
    return amp_ddp_optim_new(td->ddp, params, n, o);
}

double trainer_dist_global_mean(trainer_dist *td, double v, int64_t rows, int64_t global_rows) {
    if (!td->ddp) return v;
    double x = rows > 0 ? v * (double)rows / (double)global_rows : 0.0;
    if (amp_dist_all_reduce_f64(td->g, &x, 1, AMP_DIST_SUM) != AMP_OK) return NAN;
    return x;
}

int trainer_dist_no_backward(trainer_dist *td) {
    if (!td->ddp) return 0;
    return amp_ddp_finish(td->ddp) == AMP_OK ? 0 : -1;
}

amp_status trainer_dist_save(trainer_dist *td, const char *dir, const amp_train_state *st) {
    if (!td->ddp) return amp_checkpoint_save(dir, st);
    return amp_ddp_checkpoint_save(td->ddp, dir, st);
}

amp_status trainer_dist_restore(trainer_dist *td, const amp_checkpoint *c, amp_train_state *st) {
    if (!td->ddp) return amp_checkpoint_restore(c, st);
    return amp_ddp_checkpoint_restore(td->ddp, c, st);
}

void trainer_dist_end(trainer_dist *td, trainer_result *res) {
    if (res) {
        res->world_size = td->world;
        if (td->ddp) amp_ddp_get_stats(td->ddp, &res->ddp);
        if (td->g) {
            amp_dist_stats s;
            amp_dist_get_stats(td->g, &s);
            res->comm_bytes = s.bytes_sent - td->s0.bytes_sent;
        }
    }
    amp_ddp_free(td->ddp);
    td->ddp = NULL;
}

void trainer_dist_print_summary(FILE *f, const trainer_cfg *cfg, const trainer_result *r) {
    if (r->world_size <= 1) return;
    char b[32];
    const amp_ddp_stats *d = &r->ddp;
    double steps = r->steps - r->resumed_step > 0 ? (double)(r->steps - r->resumed_step) : 1.0;
    fprintf(f, "  world size        %d ranks (%s), global batch %lld = %d x ~%lld; ZeRO stage %d, gradients sent as %s\n",
            r->world_size, amp_dist_backend_name(amp_dist_world()), (long long)cfg->batch, r->world_size,
            (long long)(cfg->batch / r->world_size), cfg->zero_stage,
            cfg->grad_comm == AMP_GRAD_COMM_BF16 ? "bf16" : "the parameters' dtype");
    fprintf(f, "  communication     %s sent per step per rank (%d bucket%s, %lld of %lld sent during backward%s)\n",
            fmt_bytes((size_t)((double)r->comm_bytes / steps), b, sizeof b), d->buckets, d->buckets == 1 ? "" : "s",
            (long long)d->buckets_overlapped, (long long)d->buckets_sent, cfg->no_overlap ? ", overlap off" : "");
    double step_s = r->train_s / steps;
    fprintf(f, "  time in comm      %.2f ms/step waiting (%.1f%% of a step), %.2f ms/step in communication calls\n",
            1e3 * d->wait_s / steps, step_s > 0 ? 100.0 * d->wait_s / steps / step_s : 0.0, 1e3 * d->comm_s / steps);
}

double trainer_dist_step_end(trainer_dist *td, double v, int64_t rows, int64_t global_rows, int *sig) {
    if (!td->ddp) return v;
    double x[3] = {rows > 0 ? v * (double)rows / (double)global_rows : 0.0, *sig == SIGINT ? 1.0 : 0.0,
                   *sig && *sig != SIGINT ? 1.0 : 0.0};
    if (amp_dist_all_reduce_f64(td->g, x, 3, AMP_DIST_SUM) != AMP_OK) return NAN;
    if (!*sig) *sig = x[1] > 0 ? SIGINT : x[2] > 0 ? SIGTERM : 0;
    return x[0];
}
