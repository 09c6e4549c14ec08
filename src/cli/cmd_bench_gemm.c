/* amp bench gemm: GEMM GFLOP/s per input dtype against the measured peaks of
 * this machine (f32 FMA, and vdpbf16ps where the CPU has AVX512_BF16),
 * OpenBLAS sgemm (loaded at run time with dlopen, never linked) and PyTorch's
 * torch.mm in bf16 (oneDNN; a Python worker, tools/bench_torch_mm.py, timed
 * in the same interleaved rounds), on square sizes (NN, NT, TN), the training
 * shapes of the mlp and cnn models at batch 128, and batch-1 inference
 * through 4096 x 4096 layers.
 *
 * Method: contenders are measured in alternating rounds. After one untimed
 * call each, every round runs a short block of timed calls per contender,
 * each block followed by a 30 ms pause so the threads of the previous library
 * (OpenMP's and OpenBLAS's spin-waiting workers) are asleep before the next
 * one starts. The figure reported is the median over all timed calls.
 * OpenBLAS gets OPENBLAS_CORETYPE from the CPU's flags (bench_openblas_env:
 * SKYLAKEX with AVX-512, HASWELL with AVX2; Debian's build picks slow SSE3
 * kernels on recent CPUs otherwise, and SKYLAKEX on an AVX2-only CPU was a
 * SIGILL) and OPENBLAS_THREAD_TIMEOUT=20 (its workers stop spinning ~1 ms
 * after a call instead of ~0.1 s), both only if the user has not set them;
 * the PyTorch worker inherits them. */
#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "amp/numeric.h"
#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/cli_internal.h"

#define MAX_SIZES 16
#define MAX_SAMPLES 512
#define PAUSE_NS 30000000L

static void usage(FILE *f) {
    fprintf(f,
            "usage: amp bench gemm [--sizes N,N,...] [--threads T] [--dtypes LIST] [--rounds R] [--json FILE]\n"
            "                      [--sections LIST] [--torch-script PATH] [--no-torch]\n"
            "\n"
            "GEMM throughput of amp_gemm (f32 accumulation, f32 output) for f32, f16 and bf16\n"
            "inputs, against the measured peaks of this machine, OpenBLAS sgemm (dlopen'ed\n"
            "libopenblas.so.0, if installed, with OPENBLAS_CORETYPE from this CPU's flags unless\n"
            "set: SKYLAKEX with AVX-512, HASWELL with AVX2) and PyTorch's bf16\n"
            "torch.mm (tools/bench_torch_mm.py under /usr/bin/python3 or $AMP_TORCH_PYTHON,\n"
            "if torch is installed), measured interleaved in the same run. Sections:\n"
            "  peak     register-resident loops, one thread and all threads: f32 FMA, and\n"
            "           vdpbf16ps where the CPU has AVX512_BF16\n"
            "  square   n x n x n, NN, NT and TN, for every --sizes entry\n"
            "  models   training GEMMs of the mlp (784-512-512-10) and cnn at batch 128\n"
            "  batch1   1 x 4096 times 4096 x 4096^T, 4 layers, f32 vs f16 vs bf16 weights\n"
            "\n"
            "options:\n"
            "  --sizes N,N,...  square sizes (default 256,1024,2048,4096; each 1..16384)\n"
            "  --threads T      OpenMP threads for amp and OpenBLAS threads (default: all)\n"
            "  --dtypes LIST    input dtypes among f32,f16,bf16 (default f32,f16,bf16)\n"
            "  --rounds R       alternating measurement rounds (default 6, 1..50)\n"
            "  --sections LIST  which of square,models,batch1 to run after the peaks (default all)\n"
            "  --json FILE      also write the results as JSON (fields: docs/BENCHMARKS.md)\n"
            "  --torch-script P the PyTorch worker (default tools/bench_torch_mm.py)\n"
            "  --no-torch       do not run PyTorch\n"
            "  -h, --help       this text\n"
            "\n"
            "figures are medians over all timed calls; ratios are amp / OpenBLAS and amp / peak.\n");
}

/* ---- OpenBLAS ----------------------------------------------------------- */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
static struct {
    void *h;
    sgemm_fn sgemm;
    char config[160];
} g_ob;

static void openblas_load(int threads) {
    const char *why, *ct = bench_openblas_env(&why);
    printf("OPENBLAS_CORETYPE: %s (%s)\n", ct ? ct : "unset", why);
    setenv("OPENBLAS_THREAD_TIMEOUT", "20", 0);
    g_ob.h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!g_ob.h) return;
    g_ob.sgemm = (sgemm_fn)dlsym(g_ob.h, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))dlsym(g_ob.h, "openblas_set_num_threads");
    char *(*get_config)(void) = (char *(*)(void))dlsym(g_ob.h, "openblas_get_config");
    char *(*get_core)(void) = (char *(*)(void))dlsym(g_ob.h, "openblas_get_corename");
    if (!g_ob.sgemm) {
        dlclose(g_ob.h);
        g_ob.h = NULL;
        return;
    }
    if (set_threads) set_threads(threads);
    snprintf(g_ob.config, sizeof g_ob.config, "%s%s%s", get_config ? get_config() : "OpenBLAS",
             get_core ? ", core " : "", get_core ? get_core() : "");
}

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

/* ---- PyTorch worker (tools/bench_torch_mm.py) ------------------------------ */
static bench_worker g_pt = {.pid = -1};
static char g_pt_version[64];
static int g_pt_threads;

static void torch_stop(void) { bench_worker_stop(&g_pt); }

static bool torch_start(const char *script, int threads) {
    char targ[16], line[256];
    snprintf(targ, sizeof targ, "%d", threads);
    const char *args[] = {script, "--threads", targ, NULL};
    if (!bench_worker_start(&g_pt, args, line, sizeof line)) return false;
    if (sscanf(line, "ready %63s %d", g_pt_version, &g_pt_threads) != 2) {
        torch_stop();
        return false;
    }
    return true;
}

/* one timed torch.mm (seconds), or NAN if the worker failed (it is stopped) */
static double torch_mm(int64_t n, const char *op, const char *dt) {
    if (g_pt.pid < 0) return NAN;
    char req[128], line[256] = "";
    snprintf(req, sizeof req, "mm %lld %s %s 1", (long long)n, op, dt);
    double t;
    if (!bench_worker_ask(&g_pt, req, line, sizeof line) || sscanf(line, "ok %lf", &t) != 1) {
        fprintf(stderr, "amp bench gemm: the PyTorch worker failed (%s); continuing without it\n", line);
        torch_stop();
        return NAN;
    }
    return t;
}

static const char *tname(bool ta, bool tb) { return ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"); }

/* ---- one GEMM job ---------------------------------------------------------- */
/* A job is `calls` amp_gemm calls of one shape (a strided batch each); call i
 * reads the i-th A and B, and all calls accumulate into the same C (beta 1
 * after the first), as conv2d's weight gradient does per image. */
typedef struct {
    const char *name;
    bool ta, tb;
    int64_t m, n, k, batch, calls;
    bool share_a; /* A is one matrix for the whole batch (stride 0) */
    int64_t ldb;  /* 0: dense */
} shape;

typedef struct {
    shape s;
    amp_dtype dt; /* A and B dtype; F32 C */
    bool openblas;
    bool torch;      /* PyTorch's torch.mm in the worker (square shapes) */
    double reported; /* the worker's time of the last call */
    void *a, *b;
    float *c;
    int64_t lda, ldb, ldc, a_elems, b_elems, c_elems; /* per matrix */
    double flops;
    double t[MAX_SAMPLES];
    int nt;
} job;

static double shape_flops(const shape *s) { return 2.0 * (double)s->m * s->n * s->k * s->batch * s->calls; }

/* n values in [-0.5, 0.5) from a xorshift seeded with seed, stored as dt
 * (f32, or rounded once by amp's array conversions) */
static void fill(void *p, amp_dtype dt, int64_t n, uint64_t seed) {
    enum { CHUNK = 4096 };
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    float tmp[CHUNK];
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        const int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        float *v = dt == AMP_F32 ? (float *)p + i0 : tmp;
        for (int64_t i = 0; i < m; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            v[i] = (float)((double)(x >> 11) * (1.0 / 9007199254740992.0) - 0.5);
        }
        if (dt == AMP_F16) amp_f32_to_f16_array((uint16_t *)p + i0, tmp, (size_t)m);
        if (dt == AMP_BF16) amp_f32_to_bf16_array((uint16_t *)p + i0, tmp, (size_t)m);
    }
}

static int job_init(job *j, const shape *s, amp_dtype dt, bool openblas) {
    memset(j, 0, sizeof *j);
    j->s = *s;
    j->dt = dt;
    j->openblas = openblas;
    j->flops = shape_flops(s);
    const int64_t ar = s->ta ? s->k : s->m, ac = s->ta ? s->m : s->k;
    const int64_t br = s->tb ? s->n : s->k, bc = s->tb ? s->k : s->n;
    j->lda = ac, j->ldb = s->ldb ? s->ldb : bc, j->ldc = s->n;
    j->a_elems = ar * j->lda, j->b_elems = br * j->ldb, j->c_elems = s->m * s->n;
    const int64_t na = (s->share_a ? 1 : s->batch) * s->calls, nb = s->batch * s->calls;
    const size_t es = amp_dtype_size(dt);
    j->a = malloc((size_t)(j->a_elems * na) * es);
    j->b = malloc((size_t)(j->b_elems * nb) * es);
    j->c = calloc((size_t)(j->c_elems * s->batch), sizeof(float));
    if (!j->a || !j->b || !j->c) return -1;
    fill(j->a, dt, j->a_elems * na, 1);
    fill(j->b, dt, j->b_elems * nb, 2);
    return 0;
}

static void job_init_torch(job *j, const shape *s, amp_dtype dt) {
    memset(j, 0, sizeof *j);
    j->s = *s;
    j->dt = dt;
    j->torch = true;
    j->flops = shape_flops(s);
}

static void job_free(job *j) {
    free(j->a);
    free(j->b);
    free(j->c);
    j->a = j->b = j->c = NULL;
}

static int job_run(job *j) {
    const shape *s = &j->s;
    if (j->torch) {
        j->reported = torch_mm(s->m, tname(s->ta, s->tb), j->dt == AMP_BF16 ? "bf16" : "f32");
        return isnan(j->reported) ? -1 : 0;
    }
    const size_t es = amp_dtype_size(j->dt);
    const int64_t astride = s->share_a ? 0 : j->a_elems;
    for (int64_t call = 0; call < s->calls; call++) {
        const char *a = (const char *)j->a + (size_t)(call * astride * s->batch) * es;
        const char *b = (const char *)j->b + (size_t)(call * j->b_elems * s->batch) * es;
        const float beta = call == 0 ? 0.0f : 1.0f;
        if (j->openblas) {
            for (int64_t bi = 0; bi < s->batch; bi++)
                g_ob.sgemm(CBLAS_ROW_MAJOR, s->ta ? CBLAS_TRANS : CBLAS_NO_TRANS, s->tb ? CBLAS_TRANS : CBLAS_NO_TRANS,
                           (int)s->m, (int)s->n, (int)s->k, 1.0f, (const float *)a + bi * astride, (int)j->lda,
                           (const float *)b + bi * j->b_elems, (int)j->ldb, beta, j->c + bi * j->c_elems, (int)j->ldc);
        } else {
            amp_gemm_args g = {.trans_a = s->ta, .trans_b = s->tb, .m = s->m, .n = s->n, .k = s->k,
                               .alpha = 1.0f, .beta = beta, .a = a, .a_dtype = j->dt, .lda = j->lda,
                               .stride_a = astride, .b = b, .b_dtype = j->dt, .ldb = j->ldb,
                               .stride_b = j->b_elems, .c = j->c, .c_dtype = AMP_F32, .ldc = j->ldc,
                               .stride_c = j->c_elems, .batch = s->batch};
            if (amp_gemm(&g) != AMP_OK) return -1;
        }
    }
    return 0;
}

static void pause_threads(void) {
    struct timespec ts = {0, PAUSE_NS};
    nanosleep(&ts, NULL);
}

/* Runs the jobs in rounds (see the file comment): one untimed call each,
 * then `rounds` rounds in which every job runs a block of timed calls worth
 * about 0.3 s / rounds (at least one call) followed by a pause. Short blocks
 * alternating between contenders spread a burst of load on a shared machine
 * over all of them instead of one. */
static int measure(job **jobs, int nj, int rounds) {
    int reps[8];
    for (int i = 0; i < nj; i++) {
        double t0 = bench_now();
        if (job_run(jobs[i]) && !jobs[i]->torch) return -1;
        double one = jobs[i]->torch && !isnan(jobs[i]->reported) ? jobs[i]->reported : bench_now() - t0;
        reps[i] = (int)(0.3 / (one * rounds) + 0.5);
        if (reps[i] < 1) reps[i] = 1;
        if (reps[i] > MAX_SAMPLES / rounds) reps[i] = MAX_SAMPLES / rounds;
        pause_threads();
    }
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < nj; i++) {
            job *j = jobs[i];
            for (int q = 0; q < reps[i] && j->nt < MAX_SAMPLES; q++) {
                if (j->torch && g_pt.pid < 0) break;
                double t0 = bench_now();
                if (job_run(j)) {
                    if (j->torch) break; /* the worker is gone: no figure for it */
                    return -1;
                }
                j->t[j->nt++] = j->torch ? j->reported : bench_now() - t0;
            }
            pause_threads();
        }
    }
    return 0;
}

static double job_median(job *j) { return j->nt ? bench_median(j->t, j->nt) : NAN; }
static double job_gflops(job *j) { return j->flops / job_median(j) / 1e9; }

/* ---- FMA peak ------------------------------------------------------------ */
/* the register-resident loop of kernel set K (f32 FMA, or vdpbf16ps for the
 * pair kernels) on `threads` threads: the best of 3 */
static double loop_peak(const gemm_kernel *K, int threads) {
    double best = 0;
    volatile float sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        double flops_total = 0, t0 = bench_now();
#pragma omp parallel num_threads(threads) reduction(+ : flops_total)
        {
            double f = 0;
            float s = K->fma_loop(20000000, &f);
            flops_total += f;
            if (s == 1234.5f) sink = s;
        }
        double g = flops_total / (bench_now() - t0) / 1e9;
        if (g > best) best = g;
    }
    (void)sink;
    return best;
}

/* ---- argument parsing -------------------------------------------------- */
/* s split at its commas into buf (bufsz bytes): items[0..n), n returned; -1
 * when s does not fit or has more than max items. strsep keeps empty items
 * ("1,,2", ",4", "4,") so they are refused instead of skipped as strtok
 * would. */
static int split_list(const char *s, char *buf, size_t bufsz, char **items, int max) {
    if (strlen(s) >= bufsz) return -1;
    strcpy(buf, s);
    int n = 0;
    char *cur = buf;
    for (char *tok; (tok = strsep(&cur, ",")) != NULL; items[n++] = tok)
        if (n >= max) return -1;
    return n;
}

static int parse_sizes(const char *s, int64_t *out, int *n) {
    char buf[256], *items[MAX_SIZES];
    if ((*n = split_list(s, buf, sizeof buf, items, MAX_SIZES)) < 0) return -1;
    for (int k = 0; k < *n; k++) {
        long v;
        if (cli_parse_long(items[k], 1, 16384, &v)) return -1;
        out[k] = v;
    }
    return *n ? 0 : -1;
}

enum { SEC_SQUARE = 1, SEC_MODELS = 2, SEC_BATCH1 = 4 };

/* distinct names among square, models, batch1: a bit set, or -1 */
static int parse_sections(const char *s) {
    char buf[128], *items[3];
    int n = split_list(s, buf, sizeof buf, items, 3), set = 0;
    if (n < 0) return -1;
    for (int k = 0; k < n; k++) {
        const char *tok = items[k];
        const int b = !strcmp(tok, "square") ? SEC_SQUARE : !strcmp(tok, "models") ? SEC_MODELS : !strcmp(tok, "batch1") ? SEC_BATCH1 : 0;
        if (!b || (set & b)) return -1;
        set |= b;
    }
    return set;
}

/* distinct names among f32, f16, bf16 */
static int parse_dtypes(const char *s, amp_dtype *out, int *n) {
    char buf[128], *items[3];
    if ((*n = split_list(s, buf, sizeof buf, items, 3)) < 0) return -1;
    for (int k = 0; k < *n; k++) {
        amp_dtype dt;
        if (amp_dtype_parse(items[k], &dt) != AMP_OK || !(dt == AMP_F32 || dt == AMP_F16 || dt == AMP_BF16)) {
            amp_clear_error();
            return -1;
        }
        for (int i = 0; i < k; i++)
            if (out[i] == dt) return -1;
        out[k] = dt;
    }
    return *n ? 0 : -1;
}

/* ---- sections ----------------------------------------------------------- */
static cJSON *dtype_obj(cJSON *parent, amp_dtype dt) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(parent, amp_dtype_name(dt), o);
    return o;
}

/* One shape: OpenBLAS f32 (if present), amp per dtype and (square shapes,
 * with_torch) PyTorch's bf16 torch.mm, measured together. */
static int run_shape(const shape *s, const amp_dtype *dts, int ndt, int rounds, double *ob_gf, double *gf, double *ms,
                     bool with_torch, double *pt_gf) {
    job jobs[5];
    job *jp[5];
    int nj = 0, ob_idx = -1, pt_idx = -1;
    if (g_ob.h) {
        if (job_init(&jobs[nj], s, AMP_F32, true)) goto nomem;
        ob_idx = nj;
        jp[nj] = &jobs[nj];
        nj++;
    }
    for (int d = 0; d < ndt; d++) {
        if (job_init(&jobs[nj], s, dts[d], false)) goto nomem;
        jp[nj] = &jobs[nj];
        nj++;
    }
    if (with_torch && g_pt.pid >= 0) {
        job_init_torch(&jobs[nj], s, AMP_BF16);
        pt_idx = nj;
        jp[nj] = &jobs[nj];
        nj++;
    }
    if (measure(jp, nj, rounds)) {
        for (int i = 0; i < nj; i++) job_free(&jobs[i]);
        return cli_fail("amp_gemm failed on %s: %s", s->name, amp_last_error());
    }
    *ob_gf = ob_idx >= 0 ? job_gflops(&jobs[ob_idx]) : NAN;
    if (pt_gf) *pt_gf = pt_idx >= 0 && jobs[pt_idx].nt > 0 ? job_gflops(&jobs[pt_idx]) : NAN;
    for (int d = 0; d < ndt; d++) {
        job *j = &jobs[(ob_idx >= 0) + d];
        gf[d] = job_gflops(j);
        ms[d] = job_median(j) * 1e3;
    }
    for (int i = 0; i < nj; i++) job_free(&jobs[i]);
    return 0;
nomem:
    for (int i = 0; i <= nj && i < 5; i++) job_free(&jobs[i]);
    return cli_fail("out of memory for %s", s->name);
}

/* the peak a dtype's kernel runs against: vdpbf16ps for bf16 on the pair kernels */
static double peak_of(amp_dtype dt, double fma, double dp) {
    return dt == AMP_BF16 && amp_gemm_kernel_pairs() && dp > 0 ? dp : fma;
}

static int section_square(const int64_t *sizes, int ns, const amp_dtype *dts, int ndt, int rounds, double peak,
                          double dp_peak, cJSON *root) {
    int f32_i = -1, bf_i = -1;
    for (int d = 0; d < ndt; d++) {
        if (dts[d] == AMP_F32) f32_i = d;
        if (dts[d] == AMP_BF16) bf_i = d;
    }
    const bool torch_col = g_pt.pid >= 0 && bf_i >= 0;
    printf("\n## square GEMM, C = A.B (f32 output), GFLOP/s; ratio to OpenBLAS sgemm and to the peak of the\n"
           "## kernel's instruction (f32 FMA; vdpbf16ps for bf16 on the avx512bf16 path)\n\n");
    printf("| n | op | OpenBLAS sgemm |");
    for (int d = 0; d < ndt; d++) printf(" amp %s | /OB | /peak |", amp_dtype_name(dts[d]));
    if (f32_i >= 0 && bf_i >= 0) printf(" bf16 / f32 |");
    if (torch_col) printf(" PyTorch bf16 mm | amp bf16 / PyTorch |");
    printf("\n|---|---|---|");
    for (int d = 0; d < ndt; d++) printf("---|---|---|");
    if (f32_i >= 0 && bf_i >= 0) printf("---|");
    if (torch_col) printf("---|---|");
    printf("\n");
    cJSON *arr = cJSON_AddArrayToObject(root, "square");
    for (int i = 0; i < ns; i++) {
        for (int op = 0; op < 3; op++) {
            const bool ta = op == 2, tb = op == 1;
            char name[32];
            snprintf(name, sizeof name, "%s n=%lld", tname(ta, tb), (long long)sizes[i]);
            shape s = {name, ta, tb, sizes[i], sizes[i], sizes[i], 1, 1, false, 0};
            double ob, gf[3], ms[3], pt = NAN;
            if (run_shape(&s, dts, ndt, rounds, &ob, gf, ms, torch_col, &pt)) return -1;
            printf("| %lld | %s |", (long long)sizes[i], tname(ta, tb));
            if (isnan(ob))
                printf(" - |");
            else
                printf(" %.1f |", ob);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "n", (double)sizes[i]);
            cJSON_AddStringToObject(o, "op", tname(ta, tb));
            if (!isnan(ob)) cJSON_AddNumberToObject(o, "openblas_gflops", ob);
            for (int d = 0; d < ndt; d++) {
                const double pk = peak_of(dts[d], peak, dp_peak);
                if (isnan(ob))
                    printf(" %.1f | - | %.2f |", gf[d], gf[d] / pk);
                else
                    printf(" %.1f | %.3f | %.2f |", gf[d], gf[d] / ob, gf[d] / pk);
                cJSON *od = dtype_obj(o, dts[d]);
                cJSON_AddNumberToObject(od, "gflops", gf[d]);
                cJSON_AddNumberToObject(od, "ms", ms[d]);
                cJSON_AddStringToObject(od, "kernel", amp_gemm_kernel_name(dts[d], dts[d], AMP_MATMUL_HIGHEST));
                if (!isnan(ob)) cJSON_AddNumberToObject(od, "ratio_openblas", gf[d] / ob);
                cJSON_AddNumberToObject(od, "ratio_peak", gf[d] / pk);
            }
            if (f32_i >= 0 && bf_i >= 0) {
                printf(" %.2fx |", gf[bf_i] / gf[f32_i]);
                cJSON_AddNumberToObject(o, "bf16_over_f32", gf[bf_i] / gf[f32_i]);
            }
            if (torch_col) {
                if (isnan(pt)) {
                    printf(" - | - |");
                } else {
                    printf(" %.1f | %.2fx |", pt, gf[bf_i] / pt);
                    cJSON_AddNumberToObject(o, "torch_bf16_gflops", pt);
                    cJSON_AddNumberToObject(o, "bf16_over_torch_bf16", gf[bf_i] / pt);
                }
            }
            printf("\n");
            fflush(stdout);
            cJSON_AddItemToArray(arr, o);
        }
    }
    return 0;
}

static const shape g_model_shapes[] = {
    /* mlp 784-512-512-10, batch 128: forward y = x.W^T, backward dX = dY.W, dW = dY^T.X */
    {"mlp fc1 fwd  x.W^T", false, true, 128, 512, 784, 1, 1, false, 0},
    {"mlp fc2 fwd  x.W^T", false, true, 128, 512, 512, 1, 1, false, 0},
    {"mlp fc3 fwd  x.W^T", false, true, 128, 10, 512, 1, 1, false, 0},
    {"mlp fc3 dX   dY.W", false, false, 128, 512, 10, 1, 1, false, 0},
    {"mlp fc2 dX   dY.W", false, false, 128, 512, 512, 1, 1, false, 0},
    {"mlp fc1 dX   dY.W", false, false, 128, 784, 512, 1, 1, false, 0},
    {"mlp fc3 dW   dY^T.X", true, false, 10, 512, 128, 1, 1, false, 0},
    {"mlp fc2 dW   dY^T.X", true, false, 512, 512, 128, 1, 1, false, 0},
    {"mlp fc1 dW   dY^T.X", true, false, 512, 784, 128, 1, 1, false, 0},
    /* cnn: conv 1->32 3x3 pad 1 on 28x28, pool, conv 32->64 3x3 pad 1 on 14x14,
     * pool, linear 3136->128, linear 128->10; im2col GEMMs as src/ops/conv.c
     * issues them (forward batched over images with shared W; weight
     * gradient one call per block of images, the columns side by side, so
     * k = images * OH*OW: blocks of about 2 MiB of f32 columns, 9 images of
     * conv2, the whole batch of conv1 in two). */
    {"cnn conv1 fwd  W.col", false, false, 32, 784, 9, 128, 1, true, 0},
    {"cnn conv2 fwd  W.col", false, false, 64, 196, 288, 128, 1, true, 0},
    {"cnn conv2 dcol W^T.dY", true, false, 288, 196, 64, 128, 1, true, 0},
    {"cnn conv1 dW   dY.col^T", false, true, 32, 9, 784 * 64, 1, 2, false, 0},
    {"cnn conv2 dW   dY.col^T", false, true, 64, 288, 196 * 9, 1, 14, false, 0},
    {"cnn fc1 fwd  x.W^T", false, true, 128, 128, 3136, 1, 1, false, 0},
    {"cnn fc2 fwd  x.W^T", false, true, 128, 10, 128, 1, 1, false, 0},
    {"cnn fc2 dX   dY.W", false, false, 128, 128, 10, 1, 1, false, 0},
    {"cnn fc1 dX   dY.W", false, false, 128, 3136, 128, 1, 1, false, 0},
    {"cnn fc2 dW   dY^T.X", true, false, 10, 128, 128, 1, 1, false, 0},
    {"cnn fc1 dW   dY^T.X", true, false, 128, 3136, 128, 1, 1, false, 0},
};

static int section_models(const amp_dtype *dts, int ndt, int rounds, cJSON *root) {
    printf("\n## training GEMMs of the models at batch 128 (f32 output): GFLOP/s (ms)\n\n");
    printf("| GEMM | m x n x k | batch x calls | OpenBLAS f32 |");
    for (int d = 0; d < ndt; d++) printf(" amp %s |", amp_dtype_name(dts[d]));
    printf("\n|---|---|---|---|");
    for (int d = 0; d < ndt; d++) printf("---|");
    printf("\n");
    cJSON *arr = cJSON_AddArrayToObject(root, "models");
    double tot_ms[3] = {0}, tot_ob = 0;
    for (size_t i = 0; i < sizeof g_model_shapes / sizeof g_model_shapes[0]; i++) {
        const shape *s = &g_model_shapes[i];
        double ob, gf[3], ms[3];
        if (run_shape(s, dts, ndt, rounds, &ob, gf, ms, false, NULL)) return -1;
        printf("| %s | %lldx%lldx%lld %s | %lldx%lld |", s->name, (long long)s->m, (long long)s->n, (long long)s->k,
               tname(s->ta, s->tb), (long long)s->batch, (long long)s->calls);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", s->name);
        cJSON_AddStringToObject(o, "op", tname(s->ta, s->tb));
        cJSON_AddNumberToObject(o, "m", (double)s->m);
        cJSON_AddNumberToObject(o, "n", (double)s->n);
        cJSON_AddNumberToObject(o, "k", (double)s->k);
        cJSON_AddNumberToObject(o, "batch", (double)s->batch);
        cJSON_AddNumberToObject(o, "calls", (double)s->calls);
        cJSON_AddNumberToObject(o, "gflop", shape_flops(s) / 1e9);
        if (isnan(ob)) {
            printf(" - |");
        } else {
            double obms = shape_flops(s) / ob / 1e6;
            printf(" %.1f (%.3f) |", ob, obms);
            cJSON_AddNumberToObject(o, "openblas_gflops", ob);
            cJSON_AddNumberToObject(o, "openblas_ms", obms);
            tot_ob += obms;
        }
        for (int d = 0; d < ndt; d++) {
            printf(" %.1f (%.3f) |", gf[d], ms[d]);
            cJSON *od = dtype_obj(o, dts[d]);
            cJSON_AddNumberToObject(od, "gflops", gf[d]);
            cJSON_AddNumberToObject(od, "ms", ms[d]);
            tot_ms[d] += ms[d];
        }
        printf("\n");
        fflush(stdout);
        cJSON_AddItemToArray(arr, o);
    }
    printf("| total | | |");
    if (tot_ob > 0)
        printf(" %.3f ms |", tot_ob);
    else
        printf(" - |");
    for (int d = 0; d < ndt; d++) printf(" %.3f ms |", tot_ms[d]);
    printf("\n");
    return 0;
}

/* Batch-1 inference: y = x . W^T through LAYERS layers of 4096 x 4096,
 * weights of dtype dt, x and y f32. Distinct weights per layer, so they
 * stream from memory (4 x 64 MB in f32) rather than sit in the L3. */
#define B1_N 4096
#define B1_LAYERS 4

typedef struct {
    amp_dtype dt;
    void *w;
    float *x[B1_LAYERS + 1];
    double t[MAX_SAMPLES];
    int nt;
} b1_job;

static int b1_run(b1_job *j) {
    const size_t es = amp_dtype_size(j->dt);
    for (int l = 0; l < B1_LAYERS; l++) {
        amp_gemm_args g = {.trans_b = true, .m = 1, .n = B1_N, .k = B1_N, .alpha = 1.0f, .beta = 0.0f,
                           .a = j->x[l], .a_dtype = AMP_F32, .lda = B1_N,
                           .b = (const char *)j->w + (size_t)l * B1_N * B1_N * es, .b_dtype = j->dt, .ldb = B1_N,
                           .c = j->x[l + 1], .c_dtype = AMP_F32, .ldc = B1_N};
        if (amp_gemm(&g) != AMP_OK) return -1;
    }
    return 0;
}

static int section_batch1(const amp_dtype *dts, int ndt, int rounds, cJSON *root) {
    printf("\n## batch-1 inference: x[1x4096] . W^T through %d layers of 4096x4096 (weights streamed)\n\n",
           B1_LAYERS);
    printf("| weights | ms per layer | weight GB/s | speedup vs f32 |\n|---|---|---|---|\n");
    b1_job jobs[3];
    memset(jobs, 0, sizeof jobs);
    int rc = 0;
    for (int d = 0; d < ndt && !rc; d++) {
        jobs[d].dt = dts[d];
        const size_t es = amp_dtype_size(dts[d]);
        jobs[d].w = malloc((size_t)B1_LAYERS * B1_N * B1_N * es);
        bool ok = jobs[d].w != NULL;
        for (int l = 0; l <= B1_LAYERS; l++) ok = (jobs[d].x[l] = malloc(B1_N * sizeof(float))) != NULL && ok;
        if (!ok) {
            rc = cli_fail("out of memory for the batch-1 weights");
            break;
        }
        /* scaled so activations stay O(1) through the layers */
        fill(jobs[d].w, dts[d], (int64_t)B1_LAYERS * B1_N * B1_N, 3 + (uint64_t)d);
        for (int i = 0; i < B1_N; i++) jobs[d].x[0][i] = (float)((i % 17) - 8) / 8.0f;
    }
    for (int r = 0; r < rounds && !rc; r++) {
        for (int d = 0; d < ndt && !rc; d++) {
            b1_job *j = &jobs[d];
            bool ok = b1_run(j) == 0;
            for (int q = 0; q < 10 && ok && j->nt < MAX_SAMPLES; q++) {
                double t0 = bench_now();
                ok = b1_run(j) == 0;
                j->t[j->nt++] = bench_now() - t0;
            }
            if (!ok) rc = cli_fail("amp_gemm failed in batch-1: %s", amp_last_error());
            pause_threads();
        }
    }
    if (!rc) {
        cJSON *o = cJSON_AddObjectToObject(root, "batch1");
        cJSON_AddNumberToObject(o, "n", B1_N);
        cJSON_AddNumberToObject(o, "layers", B1_LAYERS);
        double f32_ms = NAN;
        for (int d = 0; d < ndt; d++)
            if (dts[d] == AMP_F32) f32_ms = bench_median(jobs[d].t, jobs[d].nt) * 1e3 / B1_LAYERS;
        for (int d = 0; d < ndt; d++) {
            double ms = bench_median(jobs[d].t, jobs[d].nt) * 1e3 / B1_LAYERS;
            double gbs = (double)B1_N * B1_N * amp_dtype_size(dts[d]) / (ms * 1e-3) / 1e9;
            cJSON *od = dtype_obj(o, dts[d]);
            cJSON_AddNumberToObject(od, "ms_per_layer", ms);
            cJSON_AddNumberToObject(od, "weight_gbps", gbs);
            if (!isnan(f32_ms)) {
                cJSON_AddNumberToObject(od, "speedup_vs_f32", f32_ms / ms);
                printf("| %s | %.3f | %.1f | %.2fx |\n", amp_dtype_name(dts[d]), ms, gbs, f32_ms / ms);
            } else {
                printf("| %s | %.3f | %.1f | - |\n", amp_dtype_name(dts[d]), ms, gbs);
            }
        }
    }
    for (int d = 0; d < ndt; d++) {
        free(jobs[d].w);
        for (int l = 0; l <= B1_LAYERS; l++) free(jobs[d].x[l]);
    }
    return rc;
}

int cmd_bench_gemm(int argc, char **argv) {
    int64_t sizes[MAX_SIZES] = {256, 1024, 2048, 4096};
    int ns = 4;
    amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    int ndt = 3;
    long threads = 0, rounds = 6;
    const char *json = NULL, *torch_script = "tools/bench_torch_mm.py";
    bool no_torch = false;
    int sections = SEC_SQUARE | SEC_MODELS | SEC_BATCH1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            usage(stdout);
            return CLI_OK;
        }
        if (i + 1 >= argc && (!strcmp(a, "--sizes") || !strcmp(a, "--threads") || !strcmp(a, "--dtypes") ||
                              !strcmp(a, "--rounds") || !strcmp(a, "--json") || !strcmp(a, "--torch-script") ||
                              !strcmp(a, "--sections")))
            return cli_usage_error(usage, "bench gemm: %s needs a value", a);
        if (!strcmp(a, "--no-torch")) {
            no_torch = true;
        } else if (!strcmp(a, "--torch-script")) {
            torch_script = argv[++i];
        } else if (!strcmp(a, "--sizes")) {
            if (parse_sizes(argv[++i], sizes, &ns))
                return cli_usage_error(usage, "bench gemm: --sizes '%s': expected up to %d comma-separated sizes in 1..16384",
                                       argv[i], MAX_SIZES);
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_long(argv[++i], 1, 1024, &threads))
                return cli_usage_error(usage, "bench gemm: --threads '%s': expected an integer in 1..1024", argv[i]);
        } else if (!strcmp(a, "--dtypes")) {
            if (parse_dtypes(argv[++i], dts, &ndt))
                return cli_usage_error(usage, "bench gemm: --dtypes '%s': expected distinct names among f32,f16,bf16",
                                       argv[i]);
        } else if (!strcmp(a, "--rounds")) {
            if (cli_parse_long(argv[++i], 1, 50, &rounds))
                return cli_usage_error(usage, "bench gemm: --rounds '%s': expected an integer in 1..50", argv[i]);
        } else if (!strcmp(a, "--sections")) {
            if ((sections = parse_sections(argv[++i])) < 0)
                return cli_usage_error(usage, "bench gemm: --sections '%s': expected distinct names among square,models,batch1",
                                       argv[i]);
        } else if (!strcmp(a, "--json")) {
            json = argv[++i];
        } else {
            return cli_usage_error(usage, "bench gemm: unknown option '%s'", a);
        }
    }
    if (threads > 0) amp_set_num_threads((int)threads);
    const int T = amp_get_num_threads();

    bench_print_machine();
    openblas_load(T);
    const gemm_kernel *pairs = amp_gemm_kernel_pairs();
    printf("threads: %d; kernel path: %s%s\n", T, amp_gemm_kernel_active()->name,
           pairs ? " (bf16 x bf16 on the avx512bf16 vdpbf16ps kernels)" : "");
    if (g_ob.h)
        printf("OpenBLAS: %s\n", g_ob.config);
    else
        printf("OpenBLAS: not installed (libopenblas.so.0 not found); amp's numbers only\n");
    if (!no_torch && torch_start(torch_script, T))
        printf("PyTorch: %s, %d threads (%s), bf16 torch.mm measured in the same rounds\n", g_pt_version, g_pt_threads,
               torch_script);
    else
        printf("PyTorch: %s\n", no_torch ? "not run (--no-torch)" : "not available (no torch, or no worker script)");

    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "gemm");
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "threads", T);
    cJSON_AddStringToObject(root, "path", amp_gemm_kernel_active()->name);
    cJSON_AddNumberToObject(root, "rounds", (double)rounds);
    if (g_ob.h) cJSON_AddStringToObject(root, "openblas", g_ob.config);
    else cJSON_AddNullToObject(root, "openblas");

    if (g_pt.pid >= 0) cJSON_AddStringToObject(root, "torch", g_pt_version);
    else cJSON_AddNullToObject(root, "torch");

    const gemm_kernel *K = amp_gemm_kernel_active();
    const double peak1 = loop_peak(K, 1), peak = loop_peak(K, T);
    const double dp1 = pairs ? loop_peak(pairs, 1) : 0, dp = pairs ? loop_peak(pairs, T) : 0;
    printf("\n## peaks (register-resident loops of independent chains, %s path)\n\n", amp_gemm_kernel_active()->name);
    printf("| instruction | 1 thread GFLOP/s | %d threads GFLOP/s |\n|---|---|---|\n", T);
    printf("| f32 FMA | %.1f | %.1f |\n", peak1, peak);
    if (pairs) printf("| vdpbf16ps (bf16 pairs) | %.1f | %.1f |\n", dp1, dp);
    if (pairs) printf("\nvdpbf16ps / FMA: %.2fx\n", dp / peak);
    cJSON *pk = cJSON_AddObjectToObject(root, "peak");
    cJSON_AddNumberToObject(pk, "per_core_gflops", peak1);
    cJSON_AddNumberToObject(pk, "all_threads_gflops", peak);
    if (pairs) {
        cJSON_AddNumberToObject(pk, "dpbf16_per_core_gflops", dp1);
        cJSON_AddNumberToObject(pk, "dpbf16_all_threads_gflops", dp);
    }

    int rc = 0;
    if (sections & SEC_SQUARE) rc = section_square(sizes, ns, dts, ndt, (int)rounds, peak, dp, root);
    if (!rc && (sections & SEC_MODELS)) rc = section_models(dts, ndt, (int)rounds, root);
    if (!rc && (sections & SEC_BATCH1)) rc = section_batch1(dts, ndt, (int)rounds, root);
    torch_stop();
    if (!rc && bench_write_json(json, root)) rc = CLI_FAIL;
    cJSON_Delete(root);
    return rc ? CLI_FAIL : CLI_OK;
}
