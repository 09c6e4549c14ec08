/* amp bench load: training steps on a quiet machine and beside busy
 * processes, on 1 thread and on T threads with the thread count adaptive
 * (the default: fewer while other processes keep cores busy, core/threads.h)
 * and fixed (AMP_ADAPTIVE_THREADS=0: OpenMP's count whatever happens). The
 * busy processes are busy loops this command forks; every configuration is
 * measured in each of R interleaved rounds. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/cli_internal.h"
#include "cli/trainer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench load [--model mlp|gpt|mlp,gpt] [--rounds R] [--busy N] [--threads T]\n"
               "                      [--mlp-steps N] [--gpt-steps N] [--json FILE]\n\n"
               "Median ms per training step of the mlp (fp32, batch 128) and the GPT (the tiny preset,\n"
               "bf16, batch 16) on 1 thread and on T threads, T adaptive (the default: fewer while other\n"
               "processes keep cores busy) and fixed (AMP_ADAPTIVE_THREADS=0), on the machine as it is\n"
               "and beside N busy processes (busy loops this command starts and stops). In each of R\n"
               "rounds every configuration runs once, in a rotated order; each cell is the median of\n"
               "the rounds' median steps, with the lowest and highest round; ratios are per round\n"
               "(same round, same conditions), then their median. Before each timed run the thread\n"
               "count is given 0.5 s to settle (two measurement windows): this is the steady state.\n"
               "  --model LIST     mlp, gpt or both (default mlp,gpt)\n"
               "  --rounds R       (default 5)\n"
               "  --busy N         busy processes beside the runs (default 1)\n"
               "  --threads T      (default: every core amp may use)\n"
               "  --mlp-steps N    timed steps per mlp run, after an untimed warm-up step (default 40)\n"
               "  --gpt-steps N    timed steps per GPT run, after an untimed warm-up step (default 6)\n");
}

enum { MAXR = 25, MAXBUSY = 64, NCONF = 3, NCOMP = 2 };
enum { C_ONE, C_FIXED, C_ADAPT };
static const char *const g_conf_json[NCONF] = {"one_thread", "fixed", "adaptive"};

typedef struct {
    pid_t pid[MAXBUSY];
    int n;
} busy_set;

static void busy_stop(busy_set *b) {
    for (int i = 0; i < b->n; i++) {
        kill(b->pid[i], SIGKILL);
        waitpid(b->pid[i], NULL, 0);
    }
    b->n = 0;
}

/* n busy loops, or CLI_FAIL (the message printed, none left running) when
 * one cannot be started: the table would say "N busy" of fewer */
static int busy_start(busy_set *b, int n) {
    b->n = 0;
    const pid_t self = getpid();
    for (int i = 0; i < n && i < MAXBUSY; i++) {
        fflush(NULL);
        pid_t p = fork();
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the benchmark */
            if (getppid() != self) _exit(0); /* it ended before prctl took effect */
            volatile unsigned long x = 0;
            for (;;) x++;
        }
        if (p < 0) {
            int e = errno;
            busy_stop(b);
            return cli_fail("bench load: cannot start busy process %d of %d: fork: %s", i + 1, n, strerror(e));
        }
        b->pid[b->n++] = p;
        fprintf(stderr, "amp bench load: busy loop %ld started\n", (long)p);
    }
    return CLI_OK;
}

/* what a region starting now would use, asked every 10 ms for 0.5 s: the
 * thread count sees the new conditions for two whole windows */
static void settle(void) {
    for (int i = 0; i < 50; i++) {
        (void)amp_get_active_threads();
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
}

static double load1(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* one run's median ms per step; threads used (mean) into *used */
static int run_one(const char *model, int conf, int T, long steps, uint64_t seed, double *ms, double *used) {
    trainer_cfg cfg;
    trainer_defaults(&cfg);
    cfg.model = model;
    cfg.seed = seed;
    cfg.threads = conf == C_ONE ? 1 : T;
    cfg.max_steps = steps + 1;
    cfg.timing_skip = 1; /* the warm-up step */
    const char *precision = "fp32";
    if (!strcmp(model, "gpt")) {
        cfg.batch = 16;
        cfg.eval_windows = 1;
        precision = "bf16";
    } else {
        cfg.limit = cfg.batch * (steps + 1);
        cfg.test_limit = 100;
    }
    amp_set_adaptive_threads(conf != C_FIXED);
    amp__threads_stats_reset();
    trainer_result res;
    int rc = bench_train_run(&cfg, precision, NULL, &res);
    amp_set_adaptive_threads(true);
    if (rc != CLI_OK) return rc;
    double mean = 0, secs = 0;
    amp__threads_stats(&mean, &secs, NULL);
    *ms = res.step_ms;
    *used = conf == C_ADAPT && secs > 0 ? mean : (conf == C_ONE ? 1 : T);
    return CLI_OK;
}

/* "12.34 (11.90-13.10)" */
static const char *cell(char *buf, size_t n, const double *v, int r, const char *unit) {
    double lo, hi;
    bench_minmax(v, r, &lo, &hi);
    snprintf(buf, n, "%.2f%s (%.2f-%.2f)", bench_median_of(v, r), unit, lo, hi);
    return buf;
}

static int bench_model(const char *model, long steps, int rounds, int T, int nbusy, cJSON *arr, double ratio_out[2]) {
    double ms[NCOMP][NCONF][MAXR], used[NCOMP][NCONF][MAXR];
    busy_set b = {.n = 0};
    for (int r = 0; r < rounds; r++) {
        for (int c = 0; c < NCOMP; c++) {
            const int comp = (r % 2) ? 1 - c : c; /* quiet first, then busy; the other way in odd rounds */
            if (comp && busy_start(&b, nbusy) != CLI_OK) return CLI_FAIL;
            settle();
            for (int k = 0; k < NCONF; k++) {
                const int conf = (k + r) % NCONF;
                fprintf(stderr, "amp bench load: %s round %d/%d, %s, %s\n", model, r + 1, rounds,
                        comp ? "busy" : "quiet", g_conf_json[conf]);
                int rc = run_one(model, conf, T, steps, (uint64_t)r, &ms[comp][conf][r], &used[comp][conf][r]);
                if (rc != CLI_OK) {
                    busy_stop(&b);
                    return rc;
                }
                if (conf != C_ADAPT) settle(); /* the next run starts from what this machine looks like now */
            }
            busy_stop(&b);
        }
    }
    const char *label = !strcmp(model, "gpt") ? "GPT tiny bf16" : "mlp fp32";
    cJSON *mo = cJSON_CreateObject(), *cells = cJSON_CreateArray();
    cJSON_AddStringToObject(mo, "model", model);
    cJSON_AddStringToObject(mo, "precision", !strcmp(model, "gpt") ? "bf16" : "fp32");
    cJSON_AddNumberToObject(mo, "steps", (double)steps);
    for (int comp = 0; comp < NCOMP; comp++) {
        double ra[MAXR], rf[MAXR], raf[MAXR];
        for (int r = 0; r < rounds; r++) {
            ra[r] = ms[comp][C_ADAPT][r] / ms[comp][C_ONE][r];
            rf[r] = ms[comp][C_FIXED][r] / ms[comp][C_ONE][r];
            raf[r] = ms[comp][C_ADAPT][r] / ms[comp][C_FIXED][r];
        }
        char c1[64], c2[64], c3[64], c4[64], c5[64], c6[64];
        char who[32];
        snprintf(who, sizeof who, comp ? "%d busy" : "none", nbusy);
        printf("| %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n", label, who, cell(c1, sizeof c1, ms[comp][C_ONE], rounds, ""),
               cell(c2, sizeof c2, ms[comp][C_FIXED], rounds, ""), cell(c3, sizeof c3, ms[comp][C_ADAPT], rounds, ""),
               cell(c4, sizeof c4, ra, rounds, "x"), cell(c5, sizeof c5, rf, rounds, "x"), cell(c6, sizeof c6, raf, rounds, "x"),
               bench_median_of(used[comp][C_ADAPT], rounds));
        ratio_out[comp] = comp ? bench_median_of(ra, rounds) : bench_median_of(raf, rounds);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "busy_processes", comp ? nbusy : 0);
        for (int k = 0; k < NCONF; k++) {
            cJSON *v = cJSON_CreateObject();
            cJSON_AddNumberToObject(v, "ms_per_step", bench_median_of(ms[comp][k], rounds));
            bench_json_range(v, ms[comp][k], rounds);
            cJSON_AddNumberToObject(v, "threads_mean", bench_median_of(used[comp][k], rounds));
            cJSON_AddItemToObject(o, g_conf_json[k], v);
        }
        cJSON_AddNumberToObject(o, "adaptive_over_one_thread", bench_median_of(ra, rounds));
        cJSON_AddNumberToObject(o, "fixed_over_one_thread", bench_median_of(rf, rounds));
        cJSON_AddNumberToObject(o, "adaptive_over_fixed", bench_median_of(raf, rounds));
        cJSON_AddItemToArray(cells, o);
    }
    cJSON_AddItemToObject(mo, "cells", cells);
    cJSON_AddItemToArray(arr, mo);
    fflush(stdout);
    return CLI_OK;
}

int cmd_bench_load(int argc, char **argv) {
    const char *models = "mlp,gpt", *json = NULL;
    long rounds = 5, nbusy = 1, threads = 0, mlp_steps = 40, gpt_steps = 6;
    for (int i = 1; i < argc; i++) /* --help anywhere, whatever else the line holds */
        if (cli_is_help(argv[i])) {
            usage(stdout);
            return CLI_OK;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v &&
                   (!strcmp(v, "mlp") || !strcmp(v, "gpt") || !strcmp(v, "mlp,gpt") || !strcmp(v, "gpt,mlp")))
            models = v, i++;
        else if (!strcmp(a, "--rounds") && v && !cli_parse_long(v, 1, MAXR, &rounds)) i++;
        else if (!strcmp(a, "--busy") && v && !cli_parse_long(v, 1, MAXBUSY, &nbusy)) i++;
        else if (!strcmp(a, "--threads") && v && !cli_parse_long(v, 2, 1024, &threads)) i++;
        else if (!strcmp(a, "--mlp-steps") && v && !cli_parse_long(v, 1, 100000, &mlp_steps)) i++;
        else if (!strcmp(a, "--gpt-steps") && v && !cli_parse_long(v, 1, 100000, &gpt_steps)) i++;
        else if (!strcmp(a, "--json") && v) json = v, i++;
        else return cli_usage_error(usage, "bench load: bad option '%s'", a);
    }
    if (threads > 0) amp_set_num_threads((int)threads);
    const int T = amp_get_num_threads();
    bench_print_machine();
    if (T < 2) {
        printf("one thread: nothing to compare (--threads 2 or more, on a machine with 2 or more cores)\n");
        return CLI_OK;
    }
    const double la0 = load1();
    printf("\nmedian ms per training step (lowest-highest of %ld interleaved rounds); %d threads adaptive (the\n"
           "default) and fixed (AMP_ADAPTIVE_THREADS=0), 1 thread; beside no other busy process and beside %ld\n"
           "busy loop%s; ratios per round, then their median; mlp %ld steps, GPT %ld steps per run\n\n",
           rounds, T, nbusy, nbusy == 1 ? "" : "s", mlp_steps, gpt_steps);
    printf("| model | busy processes | 1 thread | %d fixed | %d adaptive | adaptive / 1 thread | fixed / 1 thread | "
           "adaptive / fixed | threads used (adaptive) |\n",
           T, T);
    printf("|---|---|---|---|---|---|---|---|---|\n");
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "threads", T);
    cJSON_AddNumberToObject(root, "busy_processes", (double)nbusy);
    cJSON_AddNumberToObject(root, "rounds", (double)rounds);
    cJSON_AddItemToObject(root, "models", arr);
    int rc = CLI_OK;
    char list[32], bar[256] = "", keep[256] = "";
    snprintf(list, sizeof list, "%s", models);
    for (char *save = NULL, *m = strtok_r(list, ",", &save); m && rc == CLI_OK; m = strtok_r(NULL, ",", &save)) {
        double ratio[2];
        rc = bench_model(m, !strcmp(m, "gpt") ? gpt_steps : mlp_steps, (int)rounds, T, (int)nbusy, arr, ratio);
        if (rc != CLI_OK) break;
        size_t l = strlen(bar), lk = strlen(keep);
        snprintf(bar + l, sizeof bar - l, "%s%s %.2fx", l ? ", " : "", m, ratio[1]);
        snprintf(keep + lk, sizeof keep - lk, "%s%s %.2fx", lk ? ", " : "", m, ratio[0]);
    }
    if (rc == CLI_OK) {
        const double la1 = load1();
        const long ncores = sysconf(_SC_NPROCESSORS_ONLN);
        printf("\nbeside %ld busy process%s, %d adaptive threads take %s the 1-thread step (the bar: at most\n"
               "1.3x). Without them, adaptive / fixed: %s (the bar, on a quiet machine: 1.0x, the speed amp\n"
               "had with a fixed count). 1-minute load average %.2f before the runs, %.2f after, on %ld cores.\n%s",
               nbusy, nbusy == 1 ? "" : "es", T, bar, keep, la0, la1, ncores,
               la0 > 0.5 ? "This machine was not quiet: the 'none' rows had competition too (fixed threads may\n"
                           "collapse there as well).\n"
                         : "");
        cJSON_AddNumberToObject(root, "load_average_before", la0);
        cJSON_AddNumberToObject(root, "load_average_after", la1);
        if (bench_write_json(json, root)) rc = CLI_FAIL;
    }
    cJSON_Delete(root);
    return rc;
}
