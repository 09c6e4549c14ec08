#include "cli/bench_openblas.h"
#include "cli/bench_util.h"
#include "cli/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "amp/amp.h"

bool bench_option(bench_opts *o, int argc, char **argv, int *i, void (*usage)(FILE *)) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (cli_is_help(a)) {
        usage(stdout);
        o->help = true;
        return true;
    }
    if (o->script && !strcmp(a, "--no-torch")) {
        o->no_torch = true;
        return true;
    }
    const char **s = !strcmp(a, "--json") ? &o->json : o->script && !strcmp(a, "--torch-script") ? &o->script : NULL;
    if (s && v) *s = v;
    else if (!(o->threads >= 0 && !strcmp(a, "--threads") && v && !cli_parse_long(v, 1, 1024, &o->threads)))
        return false;
    ++*i;
    return true;
}

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_median_pos(const double *v, int n) {
    double *t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
    if (!t) return -1;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i] > 0) t[k++] = v[i];
    const double m = k ? bench_median(t, k) : -1;
    free(t);
    return m;
}

double bench_median_of(const double *v, int n) {
    double *t = malloc(sizeof *t * (size_t)(n > 0 ? n : 1));
    if (!t) return NAN;
    memcpy(t, v, sizeof *t * (size_t)n);
    const double m = bench_median(t, n);
    free(t);
    return m;
}

void bench_minmax(const double *v, int n, double *lo, double *hi) {
    *lo = *hi = v[0];
    for (int i = 1; i < n; i++) *lo = fmin(*lo, v[i]), *hi = fmax(*hi, v[i]);
}

void bench_json_range(cJSON *o, const double *v, int n) {
    double lo, hi;
    bench_minmax(v, n, &lo, &hi);
    cJSON_AddNumberToObject(o, "ms_per_step_min", lo);
    cJSON_AddNumberToObject(o, "ms_per_step_max", hi);
}

double bench_time(void (*fn)(void *), void *arg, int min_reps, double min_seconds) {
    fn(arg); /* warm-up */
    enum { MAX_SAMPLES = 4096 };
    static _Thread_local double samples[MAX_SAMPLES];
    int n = 0;
    double start = bench_now();
    while (n < MAX_SAMPLES && (n < min_reps || bench_now() - start < min_seconds)) {
        double t0 = bench_now();
        fn(arg);
        samples[n++] = bench_now() - t0;
    }
    return bench_median(samples, n);
}

typedef struct {
    char *dst, *src;
    size_t bytes;
} memcpy_arg;

static void run_memcpy(void *p) {
    memcpy_arg *a = p;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t chunk = (a->bytes / (size_t)nt + 63) & ~(size_t)63;
        size_t lo = (size_t)t * chunk, hi = lo + chunk > a->bytes ? a->bytes : lo + chunk;
        if (lo < hi) memcpy(a->dst + lo, a->src + lo, hi - lo);
    }
}

double bench_memcpy_gbps(size_t bytes) {
    memcpy_arg a = {aligned_alloc(64, (bytes + 63) & ~(size_t)63), aligned_alloc(64, (bytes + 63) & ~(size_t)63), bytes};
    memset(a.src, 1, bytes);
    memset(a.dst, 0, bytes);
    double t = bench_time(run_memcpy, &a, 5, 0.3);
    free(a.dst);
    free(a.src);
    return 2.0 * (double)bytes / t / 1e9;
}

typedef struct {
    float *a, *b, *c;
    size_t n;
} triad_arg;

static void run_triad(void *p) {
    triad_arg *t = p;
    float *restrict a = t->a;
    const float *restrict b = t->b, *restrict c = t->c;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < t->n; i++) a[i] = b[i] + 3.0f * c[i];
}

struct bench_triad {
    triad_arg a;
};

bench_triad *bench_triad_new(size_t n) {
    bench_triad *t = malloc(sizeof *t);
    t->a = (triad_arg){aligned_alloc(64, n * 4), aligned_alloc(64, n * 4), aligned_alloc(64, n * 4), n};
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        t->a.a[i] = 0;
        t->a.b[i] = 1;
        t->a.c[i] = 2;
    }
    return t;
}

double bench_triad_run(bench_triad *t, double min_seconds) {
    double s = bench_time(run_triad, &t->a, 5, min_seconds);
    return 3.0 * 4.0 * (double)t->a.n / s / 1e9;
}

double bench_triad_once(bench_triad *t) {
    double t0 = bench_now();
    run_triad(&t->a);
    return 3.0 * 4.0 * (double)t->a.n / (bench_now() - t0) / 1e9;
}

void bench_triad_free(bench_triad *t) {
    if (!t) return;
    free(t->a.a);
    free(t->a.b);
    free(t->a.c);
    free(t);
}

double bench_triad_gbps(size_t n) {
    bench_triad *t = bench_triad_new(n);
    double g = bench_triad_run(t, 0.3);
    bench_triad_free(t);
    return g;
}

int bench_write_json(const char *path, const cJSON *root) {
    if (!path) return 0;
    char *text = cJSON_Print(root);
    if (!text) {
        fprintf(stderr, "amp: error: cannot serialise JSON for %s\n", path);
        return -1;
    }
    /* a device, a FIFO or a link to one (/dev/stdout, /dev/full) is written in
     * place: a temporary file renamed over it would replace the device */
    struct stat sb;
    bool special = stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
    char *target = NULL;
    if (!special) target = realpath(path, NULL); /* a link to a regular file: replace the file, keep the link */
    const char *dst = target ? target : path;
    size_t len = strlen(dst) + 32;
    char *tmp = malloc(len);
    if (!tmp) {
        free(target);
        cJSON_free(text);
        fprintf(stderr, "amp: error: cannot write %s: out of memory\n", path);
        return -1;
    }
    snprintf(tmp, len, "%s.tmp.%ld", dst, (long)getpid());
    errno = 0;
    FILE *f = fopen(special ? path : tmp, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    int e = errno;
    if (f) {
        if (fflush(f) != 0 || ferror(f)) ok = 0, e = errno;
        if (ok && !special && fsync(fileno(f)) != 0) ok = 0, e = errno;
        if (fclose(f) != 0 && ok) ok = 0, e = errno;
    }
    if (ok && !special && rename(tmp, dst) != 0) ok = 0, e = errno;
    if (!ok) {
        fprintf(stderr, "amp: error: cannot write %s: %s\n", path, strerror(e ? e : EIO));
        if (!special) unlink(tmp);
    }
    free(tmp);
    free(target);
    cJSON_free(text);
    return ok ? 0 : -1;
}

/* the value of the first /proc/cpuinfo line starting with key ("" if none) */
static void cpuinfo_field(const char *key, char *buf, size_t n) {
    buf[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    const size_t klen = strlen(key);
    while (getline(&line, &cap, f) > 0) {
        if (strncmp(line, key, klen) == 0 && (line[klen] == ' ' || line[klen] == '\t' || line[klen] == ':')) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, n, "%s", c);
            }
            break;
        }
    }
    free(line);
    fclose(f);
}

static void cpu_model(char *buf, size_t n) {
    cpuinfo_field("model name", buf, n);
    if (!buf[0]) snprintf(buf, n, "unknown");
}

const char *bench_torch_bf16_note(void) {
    /* the CPU's, not amp's path: AMP_CPU does not change what oneDNN sees */
    return amp_cpu_supported(AMP_CPU_AVX512BF16) ? "its bf16 autocast runs oneDNN's AVX512_BF16 kernels on this CPU"
                                                 : "this CPU has no AVX512_BF16, so its bf16 autocast has no bf16 arithmetic either";
}

void bench_print_amp_notes(void) {
    printf("amp's matrix products on cpu path %s:\n", amp_cpu_path_name(amp_cpu_active()));
    cli_print_precision_notes(stdout, "  - ", NULL);
}

const char *bench_openblas_env(const char **why) {
    const char *w = "set in the environment";
    if (!getenv("OPENBLAS_CORETYPE")) {
        static char flags[8192];
        cpuinfo_field("flags", flags, sizeof flags);
        const char *ct = bench_openblas_coretype(flags);
        if (ct) setenv("OPENBLAS_CORETYPE", ct, 0);
        w = !ct ? "left unset, OpenBLAS's own choice: this CPU has no AVX2 and FMA"
            : !strcmp(ct, "SKYLAKEX") ? "from this CPU's flags: AVX-512 F/BW/DQ/VL"
                                      : "from this CPU's flags: AVX2 and FMA, no AVX-512";
    }
    if (why) *why = w;
    return getenv("OPENBLAS_CORETYPE");
}

cJSON *bench_machine_json(void) {
    char model[256];
    cpu_model(model, sizeof model);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "cpu", model);
    cJSON_AddNumberToObject(m, "cores", (double)sysconf(_SC_NPROCESSORS_ONLN));
    cJSON_AddNumberToObject(m, "threads", amp_get_num_threads());
    cJSON_AddStringToObject(m, "cpu_path", amp_cpu_path_name(amp_cpu_active()));
    cJSON_AddStringToObject(m, "amp_version", amp_version());
    return m;
}

void bench_print_machine(void) {
    char model[256];
    cpu_model(model, sizeof model);
    printf("machine: %s, %ld cores, %d threads, cpu path %s, amp %s\n", model, sysconf(_SC_NPROCESSORS_ONLN),
           amp_get_num_threads(), amp_cpu_path_name(amp_cpu_active()), amp_version());
}

/* ---- helper processes ------------------------------------------------------ */
extern char **environ;

bool bench_worker_start(bench_worker *w, const char *const *args, char *first, size_t n) {
    w->pid = -1;
    w->in = w->out = NULL;
    signal(SIGPIPE, SIG_IGN); /* a worker that dies makes a write fail, not the benchmark */
    const char *py = getenv("AMP_TORCH_PYTHON");
    if (!py || !*py) py = "/usr/bin/python3";
    if (!args || !args[0] || access(args[0], R_OK) != 0 || access(py, X_OK) != 0) return false;
    char *argv[16];
    int na = 0;
    argv[na++] = (char *)py;
    for (int i = 0; args[i] && na < 15; i++) argv[na++] = (char *)args[i];
    argv[na] = NULL;
    int to[2], from[2];
    if (pipe(to)) return false;
    if (pipe(from)) {
        close(to[0]), close(to[1]);
        return false;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclose(&fa, to[1]);
    posix_spawn_file_actions_addclose(&fa, from[0]);
    pid_t pid;
    int rc = posix_spawn(&pid, py, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(to[0]);
    close(from[1]);
    if (rc != 0) {
        close(to[1]), close(from[0]);
        return false;
    }
    w->pid = (int)pid;
    w->in = fdopen(to[1], "w");
    w->out = fdopen(from[0], "r");
    if (!w->in || !w->out || !fgets(first, (int)n, w->out)) {
        bench_worker_stop(w);
        return false;
    }
    return true;
}

bool bench_worker_ask(bench_worker *w, const char *req, char *line, size_t n) {
    if (w->pid < 0) return false;
    if (fprintf(w->in, "%s\n", req) < 0 || fflush(w->in) != 0 || !fgets(line, (int)n, w->out)) {
        bench_worker_stop(w);
        return false;
    }
    return true;
}

bool bench_torch_start(bench_torch *t, const char *script, int threads) {
    t->w[0].pid = t->w[1].pid = -1;
    t->threads = threads;
    t->version[0] = 0;
    bench_openblas_env(NULL); /* the workers inherit it */
    char line[256], targ[16];
    for (int i = 0; i < (threads == 1 ? 1 : 2); i++) {
        snprintf(targ, sizeof targ, "%d", i == 0 ? threads : 1);
        const char *args[] = {script, "--serve", "--threads", targ, NULL};
        char ver[64];
        int got = 0;
        if (!bench_worker_start(&t->w[i], args, line, sizeof line) || sscanf(line, "ready %63s %d", ver, &got) != 2 ||
            got != (i == 0 ? threads : 1)) {
            bench_torch_stop(t);
            return false;
        }
        snprintf(t->version, sizeof t->version, "%s", ver);
    }
    return true;
}

bench_worker *bench_torch_at(bench_torch *t, int n) {
    bench_worker *w = n == t->threads ? &t->w[0] : n == 1 ? &t->w[1] : NULL;
    return w && w->pid >= 0 ? w : NULL;
}

void bench_torch_print(const bench_torch *t, const char *script) {
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("PyTorch %s: measured in the same rounds (%s --serve: one process at %d thread%s; OPENBLAS_CORETYPE=%s)\n",
           t->version, script, t->threads, t->threads == 1 ? "" : "s, one at 1 thread", ct ? ct : "(unset)");
}

void bench_torch_stop(bench_torch *t) {
    bench_worker_stop(&t->w[0]);
    bench_worker_stop(&t->w[1]);
    t->version[0] = 0;
}

void bench_torch_open(bench_torch *t, const char *script, bool no_torch, const char *note) {
    *t = (bench_torch){.w = {{.pid = -1}, {.pid = -1}}};
    if (!no_torch && bench_torch_start(t, script, amp_get_num_threads())) {
        if (note) printf("%s\n", note);
        bench_torch_print(t, script);
    } else {
        printf("PyTorch: %s\n", no_torch ? "not run (--no-torch)" : "not available");
    }
}

double bench_torch_ms(bench_torch *t, int threads, const char *req) {
    bench_worker *w = bench_torch_at(t, threads);
    char line[256];
    double ms;
    if (!w || !bench_worker_ask(w, req, line, sizeof line) || sscanf(line, "ok %lf", &ms) != 1) return -1;
    return ms;
}

double bench_torch_best(double t, double t1) { return t > 0 && t1 > 0 ? fmin(t, t1) : (t > 0 ? t : t1); }

void bench_json_torch(cJSON *o, double t, double t1, double ms) {
    const double best = bench_torch_best(t, t1);
    if (t > 0) cJSON_AddNumberToObject(o, "torch_ms_per_step", t);
    if (t1 > 0) cJSON_AddNumberToObject(o, "torch_ms_per_step_1thread", t1);
    if (best > 0) cJSON_AddNumberToObject(o, "speedup_vs_torch", best / ms);
}

int bench_train_run(trainer_cfg *cfg, const char *precision, const char *opt_level, trainer_result *res) {
    cfg->progress = false;
    if (trainer_resolve_mode(cfg, precision, opt_level, NULL)) return CLI_USAGE;
    /* each run starts as its own process would: the host cache (exact-size
     * free lists, 1 GiB cap) still holds the previous run's blocks, whose
     * sizes this mode mostly does not reuse; they would fill the cap and
     * send its step buffers to fresh pages every step. Its warm-up step
     * fills the cache again. */
    amp_memory_empty_cache();
    if (trainer_run(cfg, res, false) != 0) return cli_fail("%s", amp_last_error());
    return CLI_OK;
}

int bench_finish(int rc, bench_torch *t, const char *note, const char *json, cJSON *root) {
    bench_torch_stop(t);
    if (rc == CLI_OK) {
        printf("%s, and %s.\n", note, bench_torch_bf16_note());
        bench_print_amp_notes();
        if (bench_write_json(json, root)) rc = CLI_FAIL;
    }
    cJSON_Delete(root);
    return rc;
}

void bench_worker_stop(bench_worker *w) {
    if (w->pid < 0) return;
    if (w->in) {
        fputs("quit\n", w->in);
        fclose(w->in);
    }
    if (w->out) fclose(w->out);
    int st;
    waitpid((pid_t)w->pid, &st, 0);
    w->pid = -1;
    w->in = w->out = NULL;
}

/* dense peak TFLOP/s from NVIDIA's datasheets (SXM parts unless named), by
 * device name: f32 (CUDA cores), tf32, f16/bf16 (tensor cores); 0 when the
 * GPU is not listed */
void bench_gpu_peaks(const char *name, double *f32, double *tf32, double *half) {
    static const struct {
        const char *match;
        double f32, tf32, half;
    } t[] = {
        {"H200", 67.0, 494.7, 989.4}, {"H100 PCIe", 51.2, 378.0, 756.0}, {"H100 NVL", 60.0, 417.5, 835.5},
        {"H100", 67.0, 494.7, 989.4}, {"A100", 19.5, 156.0, 312.0},
    };
    *f32 = *tf32 = *half = 0;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (name && strstr(name, t[i].match)) {
            *f32 = t[i].f32, *tf32 = t[i].tf32, *half = t[i].half;
            return;
        }
}
