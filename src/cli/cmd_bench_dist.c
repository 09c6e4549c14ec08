/* amp bench dist: data-parallel training steps on this machine.
 *
 * For the mlp and a GPT: 1 rank x 2 threads against 2 ranks x 1 thread
 * (with and without overlapping the gradient buckets with the backward,
 * with and without bf16 gradient compression, ZeRO-1), then 1 to 8 ranks
 * (more ranks than cores: oversubscribed, so times are indicative only) for
 * the communication volume and time. Every configuration is a fresh mpirun
 * of `amp bench dist --worker ...` (a plain process for one rank); rounds
 * interleave the configurations and each reports the median over rounds of
 * rank 0's median step. The model for N machines on a network is in
 * docs/distributed.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "cli/trainer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench dist [--model mlp,gpt] [--steps N] [--rounds R] [--max-ranks N] [--json FILE]\n\n"
               "Median ms per training step (AdamW, fp32, synthetic data, the global batch split\n"
               "over the ranks) for 1 rank x 2 threads vs 2 ranks x 1 thread, with and without\n"
               "overlap and bf16 gradients, ZeRO-1; then 1, 2, 4 ... --max-ranks ranks x 1 thread:\n"
               "bytes sent per step per rank and the time waited for communication.\n"
               "Runs mpirun ($AMP_MPIRUN, default mpirun on PATH).\n"
               "  --model LIST    mlp, gpt or both (default mlp,gpt; gpt: 4 layers, 4 heads, 128 wide,\n"
               "                  block 128, byte vocabulary, batch 16 windows)\n"
               "  --steps N       timed steps per run after 3 warm-up steps (default 20)\n"
               "  --rounds R      rounds, configurations interleaved (default 3)\n"
               "  --max-ranks N   largest world of the scaling table (default 8)\n");
}

/* ---- the worker: one configuration, under mpirun ------------------------------------------------- */
typedef struct {
    const char *model;
    int64_t batch;
    int steps, zero;
    bool bf16, no_overlap;
} wcfg;

static int worker(const wcfg *c) {
    if (amp_dist_init(NULL, NULL) != AMP_OK) return cli_fail("%s", amp_last_error());
    amp_dist_group *g = amp_dist_world();
    int rank = amp_dist_rank(g), world = amp_dist_world_size(g);
    amp_generator gen = amp_generator_make(1);
    bool gpt = !strcmp(c->model, "gpt");
    amp_gpt_config gc = {4, 4, 128, 128, 256, 0.0, true};
    amp_module *m = gpt ? amp_gpt_new(&gc, &gen) : amp_model_build(c->model, &gen);
    if (!m) return cli_fail("%s", amp_last_error());
    int np = amp_module_parameters(m, NULL, NULL, 0);
    amp_tensor **ps = calloc((size_t)np, sizeof *ps);
    amp_module_parameters(m, ps, NULL, np);
    amp_ddp *d = NULL;
    if (world > 1) {
        amp_ddp_opts o = amp_ddp_default_opts();
        o.zero_stage = c->zero;
        o.grad_comm = c->bf16 ? AMP_GRAD_COMM_BF16 : AMP_GRAD_COMM_PARAM;
        o.no_overlap = c->no_overlap;
        d = amp_ddp_new_module(g, m, &o);
        if (!d) return trainer_dist_fail(amp_last_error());
    }
    amp_optim_opts oo = amp_adamw_opts(1e-3);
    amp_optim *opt = d ? amp_ddp_optim_new(d, ps, np, &oo) : amp_optim_new(ps, np, &oo);
    if (!opt) return trainer_dist_fail(amp_last_error());
    /* this rank's share of a fixed global batch */
    int64_t per = c->batch / world, extra = c->batch % world, rows = per + (rank < extra);
    amp_tensor *x, *y;
    if (gpt) {
        x = amp_tensor_empty(AMP_I64, 2, AMP_SHAPE(rows, gc.block_size));
        y = amp_tensor_empty(AMP_I64, 2, AMP_SHAPE(rows, gc.block_size));
        int64_t *px = amp_tensor_data(x), *py = amp_tensor_data(y);
        for (int64_t i = 0; i < rows * gc.block_size; i++) px[i] = (i * 131 + rank * 7) % 256, py[i] = (i * 17 + 3) % 256;
    } else {
        x = amp_tensor_randn(AMP_F32, 4, AMP_SHAPE(rows, 1, 28, 28), &gen);
        y = amp_tensor_empty(AMP_I64, 1, AMP_SHAPE(rows));
        int64_t *py = amp_tensor_data(y);
        for (int64_t i = 0; i < rows; i++) py[i] = (i * 3 + rank) % 10;
    }
    const int warm = 3, total = warm + c->steps;
    /* per step: wall time, time waited for communication, time in communication calls (medians reported) */
    double *t = calloc((size_t)total * 3, sizeof *t), *tw = t + total, *tc = t + 2 * total;
    amp_dist_stats g0;
    memset(&g0, 0, sizeof g0);
    for (int k = 0; k < total; k++) {
        if (k == warm) amp_dist_get_stats(g, &g0);
        amp_ddp_stats a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        if (d) amp_ddp_get_stats(d, &a);
        double t0 = bench_now();
        amp_scope *s = amp_scope_begin();
        amp_optim_zero_grad(opt);
        amp_tensor *loss = gpt ? amp_gpt_loss(m, x, y, NULL) : amp_cross_entropy(amp_module_forward(m, x), y, NULL);
        if (!loss || amp_backward(loss) != AMP_OK || amp_optim_step(opt) != AMP_OK) return trainer_dist_fail(amp_last_error());
        amp_scope_end(s);
        t[k] = bench_now() - t0;
        if (d) amp_ddp_get_stats(d, &b);
        tw[k] = b.wait_s - a.wait_s;
        tc[k] = b.comm_s - a.comm_s;
    }
    amp_ddp_stats s1;
    memset(&s1, 0, sizeof s1);
    if (d) amp_ddp_get_stats(d, &s1);
    amp_dist_stats g1;
    amp_dist_get_stats(g, &g1);
    if (rank == 0) {
        double n = (double)c->steps;
        printf("RESULT %.6f %.6f %.6f %.0f %d %lld %d\n", 1e3 * bench_median(t + warm, c->steps), 1e3 * bench_median(tw + warm, c->steps),
               1e3 * bench_median(tc + warm, c->steps), (double)(g1.bytes_sent - g0.bytes_sent) / n, s1.buckets,
               (long long)amp_module_num_params(m), world);
        fflush(stdout);
    }
    free(t);
    amp_tensor_free(x);
    amp_tensor_free(y);
    amp_optim_free(opt);
    amp_ddp_free(d);
    free(ps);
    amp_module_free(m);
    amp_dist_finalize();
    return CLI_OK;
}

/* ---- the driver ----------------------------------------------------------------------------------------- */
typedef struct {
    double ms, wait_ms, comm_ms, bytes;
    int buckets, world;
    long long params;
} wres;

typedef struct {
    const char *label;
    int ranks, threads, zero;
    bool bf16, no_overlap;
} conf;

static const char *mpirun_cmd(void) {
    const char *m = getenv("AMP_MPIRUN");
    return m && *m ? m : "mpirun";
}

static int run_conf(const char *self, const char *model, int64_t batch, int steps, const conf *c, wres *r) {
    char cmd[6000];
    const char *root = geteuid() == 0 ? "--allow-run-as-root " : "";
    char pre[512] = "";
    if (c->ranks > 1)
        snprintf(pre, sizeof pre, "OMPI_MCA_btl_vader_single_copy_mechanism=none %s %s--oversubscribe --bind-to none -np %d ",
                 mpirun_cmd(), root, c->ranks);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=%d OMP_WAIT_POLICY=PASSIVE %s'%s' bench dist --worker --model %s --batch %lld --steps %d "
                              "--zero %d%s%s < /dev/null 2>&1",
             c->threads, pre, self, model, (long long)batch, steps, c->zero, c->bf16 ? " --bf16" : "", c->no_overlap ? " --no-overlap" : "");
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[4096];
    bool got = false;
    while (fgets(line, sizeof line, p)) {
        if (!strncmp(line, "RESULT ", 7) &&
            sscanf(line + 7, "%lf %lf %lf %lf %d %lld %d", &r->ms, &r->wait_ms, &r->comm_ms, &r->bytes, &r->buckets, &r->params,
                   &r->world) == 7)
            got = true;
        else if (!got)
            fputs(line, stderr);
    }
    int st = pclose(p);
    return got && st == 0 ? 0 : -1;
}

static int self_path(char *buf, size_t n) {
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    if (k <= 0) return -1;
    buf[k] = 0;
    return 0;
}

static double med_of(double *v, int n) {
    double t[32];
    memcpy(t, v, sizeof(double) * (size_t)n);
    return bench_median(t, n);
}

int cmd_bench_dist(int argc, char **argv) {
    const char *models = "mlp,gpt", *json = NULL;
    long steps = 20, rounds = 3, max_ranks = 8;
    wcfg w = {"mlp", 0, 20, 0, false, false};
    bool is_worker = false;
    long batch = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            usage(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--worker")) {
            is_worker = true;
        } else if (!strcmp(a, "--bf16")) {
            w.bf16 = true;
        } else if (!strcmp(a, "--no-overlap")) {
            w.no_overlap = true;
        } else if (v && !strcmp(a, "--model")) {
            models = v;
            w.model = v;
            i++;
        } else if (v && !strcmp(a, "--json")) {
            json = v;
            i++;
        } else if (v && !strcmp(a, "--steps")) {
            if (cli_parse_long(v, 1, 1000, &steps)) return cli_usage_error(usage, "bench dist: --steps '%s'", v);
            i++;
        } else if (v && !strcmp(a, "--rounds")) {
            if (cli_parse_long(v, 1, 25, &rounds)) return cli_usage_error(usage, "bench dist: --rounds '%s'", v);
            i++;
        } else if (v && !strcmp(a, "--max-ranks")) {
            if (cli_parse_long(v, 1, 64, &max_ranks)) return cli_usage_error(usage, "bench dist: --max-ranks '%s'", v);
            i++;
        } else if (v && !strcmp(a, "--batch")) {
            if (cli_parse_long(v, 1, 1 << 20, &batch)) return cli_usage_error(usage, "bench dist: --batch '%s'", v);
            i++;
        } else if (v && !strcmp(a, "--zero")) {
            long z;
            if (cli_parse_long(v, 0, 1, &z)) return cli_usage_error(usage, "bench dist: --zero '%s'", v);
            w.zero = (int)z;
            i++;
        } else if (v && !strcmp(a, "--threads")) {
            i++; /* every run sets its own threads */
        } else {
            return cli_usage_error(usage, "bench dist: unknown option '%s'", a);
        }
    }
    if (is_worker) {
        w.steps = (int)steps;
        w.batch = batch > 0 ? batch : !strcmp(w.model, "gpt") ? 16 : 128;
        if (strcmp(w.model, "mlp") && strcmp(w.model, "cnn") && strcmp(w.model, "gpt"))
            return cli_usage_error(usage, "bench dist: --model '%s' is not mlp, cnn or gpt", w.model);
        return worker(&w);
    }
    if (!amp_dist_is_available()) return cli_fail("bench dist: %s", amp_dist_build_info());
    char self[4096];
    if (self_path(self, sizeof self)) return cli_fail("bench dist: cannot find the amp executable");
    bench_print_machine();
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "models");
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    char list[256];
    snprintf(list, sizeof list, "%s", models);
    for (char *save, *mdl = strtok_r(list, ",", &save); mdl; mdl = strtok_r(NULL, ",", &save)) {
        if (strcmp(mdl, "mlp") && strcmp(mdl, "gpt")) return cli_usage_error(usage, "bench dist: --model '%s' is not mlp or gpt", mdl);
        int64_t B = batch > 0 ? batch : !strcmp(mdl, "gpt") ? 16 : 128;
        conf cs[32];
        int nc = 0;
        cs[nc++] = (conf){"1 rank x 2 threads", 1, 2, 0, false, false};
        cs[nc++] = (conf){"2 ranks x 1 thread", 2, 1, 0, false, false};
        cs[nc++] = (conf){"2 ranks, no overlap", 2, 1, 0, false, true};
        cs[nc++] = (conf){"2 ranks, bf16 gradients", 2, 1, 0, true, false};
        cs[nc++] = (conf){"2 ranks, bf16, no overlap", 2, 1, 0, true, true};
        cs[nc++] = (conf){"2 ranks, ZeRO-1", 2, 1, 1, false, false};
        int first_scale = nc;
        for (int n = 1; n <= max_ranks && nc < 30; n *= 2) {
            cs[nc++] = (conf){"scale", n, 1, 0, false, false};
            if (n > 1) cs[nc++] = (conf){"scale zero", n, 1, 1, false, false};
        }
        static double ms[32][25], wt[32][25], cm[32][25];
        static wres last[32];
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < nc; k++) {
                wres res;
                memset(&res, 0, sizeof res);
                if (run_conf(self, mdl, B, (int)steps, &cs[k], &res) != 0)
                    return cli_fail("bench dist: %s with %d rank(s) failed (output above)", mdl, cs[k].ranks);
                ms[k][r] = res.ms;
                wt[k][r] = res.wait_ms;
                cm[k][r] = res.comm_ms;
                last[k] = res;
            }
        printf("\n%s (%lld parameters), global batch %lld%s, AdamW fp32; median over %ld rounds of rank 0's median step (%ld steps)\n\n",
               mdl, last[0].params, (long long)B, !strcmp(mdl, "gpt") ? " windows of 128 tokens" : "", rounds, steps);
        printf("| configuration | ms/step | vs 1x2 | waiting for comm ms/step | share of step | in comm calls ms/step | "
               "MiB sent/step/rank | buckets |\n|---|---|---|---|---|---|---|---|\n");
        cJSON *mo = cJSON_CreateObject(), *ca = cJSON_CreateArray(), *sa = cJSON_CreateArray();
        cJSON_AddStringToObject(mo, "model", mdl);
        cJSON_AddNumberToObject(mo, "params", (double)last[0].params);
        cJSON_AddNumberToObject(mo, "batch", (double)B);
        double base = med_of(ms[0], (int)rounds);
        for (int k = 0; k < first_scale; k++) {
            double m = med_of(ms[k], (int)rounds), wv = med_of(wt[k], (int)rounds), cv = med_of(cm[k], (int)rounds);
            printf("| %s | %.2f | %.2fx | %.2f | %.0f%% | %.2f | %.2f | %d |\n", cs[k].label, m, base / m, wv, 100.0 * wv / m, cv,
                   last[k].bytes / 1048576.0, last[k].buckets);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "configuration", cs[k].label);
            cJSON_AddNumberToObject(o, "ranks", cs[k].ranks);
            cJSON_AddNumberToObject(o, "threads_per_rank", cs[k].threads);
            cJSON_AddNumberToObject(o, "zero_stage", cs[k].zero);
            cJSON_AddBoolToObject(o, "bf16_gradients", cs[k].bf16);
            cJSON_AddBoolToObject(o, "overlap", !cs[k].no_overlap);
            cJSON_AddNumberToObject(o, "ms_per_step", m);
            cJSON_AddNumberToObject(o, "wait_ms_per_step", wv);
            cJSON_AddNumberToObject(o, "comm_fraction", wv / m);
            cJSON_AddNumberToObject(o, "comm_calls_ms_per_step", cv);
            cJSON_AddNumberToObject(o, "bytes_sent_per_step_per_rank", last[k].bytes);
            cJSON_AddItemToArray(ca, o);
        }
        printf("\nscaling, 1 thread per rank (beyond %ld ranks the cores are oversubscribed: times indicative only)\n\n",
               sysconf(_SC_NPROCESSORS_ONLN));
        printf("| ranks | ZeRO | ms/step | waiting for comm ms/step | MiB sent/step/rank | 2(N-1)/N x gradient MiB |\n"
               "|---|---|---|---|---|---|\n");
        double gmib = (double)last[0].params * 4.0 / 1048576.0;
        for (int k = first_scale; k < nc; k++) {
            int n = cs[k].ranks;
            double m = med_of(ms[k], (int)rounds), wv = med_of(wt[k], (int)rounds);
            printf("| %d | %d | %.2f | %.2f | %.2f | %.2f |\n", n, cs[k].zero, m, wv, last[k].bytes / 1048576.0,
                   2.0 * (n - 1) / n * gmib);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "ranks", n);
            cJSON_AddNumberToObject(o, "zero_stage", cs[k].zero);
            cJSON_AddNumberToObject(o, "ms_per_step", m);
            cJSON_AddNumberToObject(o, "wait_ms_per_step", wv);
            cJSON_AddNumberToObject(o, "bytes_sent_per_step_per_rank", last[k].bytes);
            cJSON_AddNumberToObject(o, "ring_model_bytes", 2.0 * (n - 1) / n * (double)last[0].params * 4.0);
            cJSON_AddItemToArray(sa, o);
        }
        cJSON_AddItemToObject(mo, "configurations", ca);
        cJSON_AddItemToObject(mo, "scaling", sa);
        cJSON_AddItemToArray(arr, mo);
    }
    int rc = json ? bench_write_json(json, root) : 0;
    cJSON_Delete(root);
    return rc ? CLI_FAIL : CLI_OK;
}
