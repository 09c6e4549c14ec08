/* amp bench precision: the seeds' benchmarks, through amp's public ops.
 *   matmul     benchmark_precision: n x n @ n x n in f32, f16, bf16 (default 4096),
 *              measured in interleaved rounds; plus f32 with matmul precision
 *              "medium" (one bf16 pass) and the bf16x3 split that "high" would
 *              use, to show what each precision costs on this CPU
 *   inference  Linear 1024 -> 10, batch 64, 100 runs, f32 vs autocast f16 / bf16
 *   batch1     batch 1 through 4 layers of 4096 x 4096: f32 vs f16 vs bf16
 *              weights (bandwidth-bound: half weights move half the bytes) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/numeric.h"
#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/cli_internal.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench precision [--n N] [--reps R] [--threads T] [--json FILE]\n"
               "       amp bench precision --device cuda [--n N] [--reps R] [--per-round P] [--torch-script PATH]\n"
               "                           [--no-torch] [--json FILE]\n\n"
               "  matmul     the seeds' benchmark_precision: N x N @ N x N (default 4096) with f32,\n"
               "             f16 and bf16 tensors (amp_mm), f32 with amp_set_matmul_precision(\"medium\")\n"
               "             and the bf16x3 split (a_hi b_hi + a_hi b_lo + a_lo b_hi as one bf16 GEMM\n"
               "             with k = 3N) that \"high\" would use; rounds interleaved, medians\n"
               "  inference  the seeds' Linear(1024, 10), batch 64, 100 runs, no_grad: f32 vs\n"
               "             autocast f16 and bf16\n"
               "  batch1     batch 1 through 4 layers of 4096 x 4096 with f32, f16, bf16 weights\n"
               "  --reps R   rounds of timed matmuls (default 5)\n\n"
               "--device cuda: only the matmul, on the GPU: f32, tf32, f16 and bf16 through the CUDA\n"
               "backend's GEMM (cuBLASLt), interleaved round by round with torch.mm on the same GPU\n"
               "(tools/bench_torch_cuda_mm.py under $AMP_TORCH_PYTHON or /usr/bin/python3), P products\n"
               "per round (default 20); ms, TFLOP/s, fraction of the GPU's dense peak, amp / torch time.\n"
               "Measured on an H100 beside torch.mm: docs/cuda.md, \"Measured on an H100\".\n");
}

typedef struct {
    amp_tensor *a, *b;
    const char *prec; /* matmul precision for the run */
    amp_gemm_args *x3; /* bf16x3: one prepared GEMM instead */
} mm_arg;

static void run_mm(void *p) {
    mm_arg *m = p;
    if (m->x3) {
        amp_gemm(m->x3);
        return;
    }
    amp_set_matmul_precision_thread(m->prec);
    amp_scope *s = amp_scope_begin();
    amp_mm(m->a, m->b);
    amp_scope_end(s);
    amp_set_matmul_precision_thread(NULL);
}

/* bf16x3 operands: A' = [hi(A) | hi(A) | lo(A)] (n x 3n), B' = [hi(B); lo(B);
 * hi(B)] (3n x n), hi = bf16(x), lo = bf16(x - hi), so A'B' = hi hi + hi lo
 * + lo hi in one bf16 GEMM (the split itself is not timed: it favours bf16x3) */
static amp_gemm_args *make_x3(const float *a, const float *b, int64_t n, uint16_t **ab, uint16_t **bb, float **c) {
    *ab = malloc((size_t)(n * 3 * n) * 2);
    *bb = malloc((size_t)(n * 3 * n) * 2);
    *c = malloc((size_t)(n * n) * 4);
    amp_gemm_args *g = calloc(1, sizeof *g);
    if (!*ab || !*bb || !*c || !g) return NULL;
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < n; k++) {
            const float x = a[i * n + k];
            const uint16_t hi = amp_f32_to_bf16(x), lo = amp_f32_to_bf16(x - amp_bf16_to_f32(hi));
            (*ab)[i * 3 * n + k] = hi, (*ab)[i * 3 * n + n + k] = hi, (*ab)[i * 3 * n + 2 * n + k] = lo;
        }
    for (int64_t k = 0; k < n; k++)
        for (int64_t j = 0; j < n; j++) {
            const float y = b[k * n + j];
            const uint16_t hi = amp_f32_to_bf16(y), lo = amp_f32_to_bf16(y - amp_bf16_to_f32(hi));
            (*bb)[k * n + j] = hi, (*bb)[(n + k) * n + j] = lo, (*bb)[(2 * n + k) * n + j] = hi;
        }
    *g = (amp_gemm_args){.m = n, .n = n, .k = 3 * n, .alpha = 1.0f, .a = *ab, .a_dtype = AMP_BF16, .lda = 3 * n,
                         .b = *bb, .b_dtype = AMP_BF16, .ldb = n, .c = *c, .c_dtype = AMP_F32, .ldc = n};
    return g;
}

/* max |x - ref| / max |ref| over an n x n f32 result against float64 */
static double rel_err(const float *c, const double *ref, int64_t nn) {
    double e = 0, m = 0;
    for (int64_t i = 0; i < nn; i++) {
        e = fmax(e, fabs((double)c[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    return m > 0 ? e / m : e;
}

typedef struct {
    amp_tensor *x, *w, *b;
    amp_dtype ac; /* AMP_F32: no autocast */
    int runs;
} inf_arg;

static void run_inf(void *p) {
    inf_arg *m = p;
    amp_no_grad_begin();
    if (m->ac != AMP_F32) amp_autocast_enter(m->ac);
    for (int i = 0; i < m->runs; i++) {
        amp_scope *s = amp_scope_begin();
        amp_linear(m->x, m->w, m->b);
        amp_scope_end(s);
    }
    if (m->ac != AMP_F32) amp_autocast_exit();
    amp_no_grad_end();
}

typedef struct {
    amp_tensor *x, *w[4];
} b1_arg;

static void run_b1(void *p) {
    b1_arg *m = p;
    amp_no_grad_begin();
    amp_scope *s = amp_scope_begin();
    amp_tensor *h = m->x;
    for (int l = 0; l < 4; l++) h = amp_linear(h, m->w[l], NULL);
    amp_scope_end(s);
    amp_no_grad_end();
}

int bench_precision_cuda(long n, long reps, long per_round, const char *torch_script, bool no_torch, const char *json);

int cmd_bench_precision(int argc, char **argv) {
    long n = 4096, reps = 5, per_round = 20;
    const char *device = "cpu";
    bench_opts o = {.script = "tools/bench_torch_cuda_mm.py"};
    for (int i = 1; i < argc && !o.help; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (bench_option(&o, argc, argv, &i, usage)) continue;
        if (!strcmp(a, "--n") && v && !cli_parse_long(v, 16, 16384, &n)) i++;
        else if (!strcmp(a, "--reps") && v && !cli_parse_long(v, 1, 100, &reps)) i++;
        else if (!strcmp(a, "--device") && v) device = v, i++;
        else if (!strcmp(a, "--per-round") && v && !cli_parse_long(v, 1, 1000, &per_round)) i++;
        else return cli_usage_error(usage, "bench precision: bad option '%s'", a);
    }
    if (o.help) return CLI_OK;
    amp_device dev;
    if (amp_device_parse(device, &dev) != AMP_OK) return cli_usage_error(usage, "bench precision: %s", amp_last_error());
    if (dev == AMP_DEVICE_CUDA) return bench_precision_cuda(n, reps, per_round, o.script, o.no_torch, o.json);
    if (o.threads > 0) amp_set_num_threads((int)o.threads);
    bench_print_machine();
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    static const amp_dtype dts[3] = {AMP_F32, AMP_F16, AMP_BF16};
    static const char *names[3] = {"f32", "f16", "bf16"};
    amp_generator g = amp_generator_make(1);

    /* matmul: variants measured in interleaved rounds */
    printf("\n### matmul %ld x %ld x %ld (the seeds' benchmark_precision)\n\n", n, n, n);
    enum { NV = 5 };
    static const char *vnames[NV] = {"f32", "f16", "bf16", "f32, precision medium", "f32 as bf16x3 (\"high\")"};
    amp_tensor *ta[3], *tb[3];
    for (int k = 0; k < 3; k++) {
        amp_tensor *a32 = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(n, n), &g), *b32 = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(n, n), &g);
        ta[k] = k ? amp_to(a32, dts[k]) : a32;
        tb[k] = k ? amp_to(b32, dts[k]) : b32;
        if (k) amp_tensor_free(a32), amp_tensor_free(b32);
    }
    uint16_t *x3a = NULL, *x3b = NULL;
    float *x3c = NULL;
    amp_gemm_args *x3 = make_x3(amp_tensor_data(ta[0]), amp_tensor_data(tb[0]), n, &x3a, &x3b, &x3c);
    if (!x3) return cli_fail("bench precision: out of memory for the bf16x3 operands");
    mm_arg args[NV] = {{ta[0], tb[0], "highest", NULL}, {ta[1], tb[1], "highest", NULL}, {ta[2], tb[2], "highest", NULL},
                       {ta[0], tb[0], "medium", NULL},  {NULL, NULL, NULL, x3}};
    const char *kern[NV] = {amp_gemm_kernel_name(AMP_F32, AMP_F32, AMP_MATMUL_HIGHEST),
                            amp_gemm_kernel_name(AMP_F16, AMP_F16, AMP_MATMUL_HIGHEST),
                            amp_gemm_kernel_name(AMP_BF16, AMP_BF16, AMP_MATMUL_HIGHEST),
                            amp_gemm_kernel_name(AMP_F32, AMP_F32, AMP_MATMUL_MEDIUM),
                            amp_gemm_kernel_name(AMP_BF16, AMP_BF16, AMP_MATMUL_HIGHEST)};
    enum { MAXR = 64 };
    double tv[NV][MAXR];
    const int rounds = (int)(reps < MAXR ? reps : MAXR);
    for (int v = 0; v < NV; v++) run_mm(&args[v]); /* warm-up */
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < NV; v++) {
            double t0 = bench_now();
            run_mm(&args[v]);
            tv[v][r] = bench_now() - t0;
        }
    /* accuracy of each f32 way against float64, on a 256 x 256 corner (rows and columns of the whole k) */
    const int64_t q = n < 256 ? n : 256;
    double *ref = malloc(sizeof(double) * (size_t)(q * q));
    float *got = malloc(sizeof(float) * (size_t)(q * q));
    const float *fa = amp_tensor_data(ta[0]), *fb = amp_tensor_data(tb[0]);
    for (int64_t i = 0; i < q; i++)
        for (int64_t j = 0; j < q; j++) {
            double acc = 0;
            for (int64_t k = 0; k < n; k++) acc += (double)fa[i * n + k] * fb[k * n + j];
            ref[i * q + j] = acc;
        }
    double err[NV];
    for (int v = 0; v < NV; v++) {
        err[v] = -1;
        if (v == 1 || v == 2) continue; /* the half rows multiply other (rounded) inputs */
        if (v == 4) {
            for (int64_t i = 0; i < q; i++) memcpy(got + i * q, x3c + i * n, sizeof(float) * (size_t)q);
        } else {
            amp_set_matmul_precision_thread(args[v].prec);
            amp_tensor *c = amp_mm(ta[0], tb[0]);
            amp_set_matmul_precision_thread(NULL);
            for (int64_t i = 0; i < q; i++) memcpy(got + i * q, (const float *)amp_tensor_data(c) + i * n, sizeof(float) * (size_t)q);
            amp_tensor_free(c);
        }
        err[v] = rel_err(got, ref, q * q);
    }
    free(ref);
    free(got);
    printf("| inputs | kernel | s per matmul | GFLOP/s | speedup vs f32 | max rel. error vs float64 |\n"
           "|---|---|---|---|---|---|\n");
    cJSON *jm = cJSON_AddArrayToObject(root, "matmul");
    double med[NV];
    for (int v = 0; v < NV; v++) med[v] = bench_median(tv[v], rounds);
    for (int v = 0; v < NV; v++) {
        const double gf = 2.0 * (double)n * n * n / med[v] / 1e9;
        char es[32] = "-";
        if (err[v] >= 0) snprintf(es, sizeof es, "%.1e", err[v]);
        printf("| %s | %s | %.3f | %.1f | %.2fx | %s |\n", vnames[v], kern[v], med[v], gf, med[0] / med[v], es);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "dtype", v < 3 ? names[v] : v == 3 ? "f32 medium" : "f32 bf16x3");
        cJSON_AddStringToObject(o, "kernel", kern[v]);
        cJSON_AddNumberToObject(o, "seconds", med[v]);
        cJSON_AddNumberToObject(o, "gflops", gf);
        cJSON_AddNumberToObject(o, "speedup_vs_f32", med[0] / med[v]);
        if (err[v] >= 0) cJSON_AddNumberToObject(o, "max_rel_error", err[v]);
        cJSON_AddItemToArray(jm, o);
    }
    const bool x3_pays = med[4] < med[0];
    printf("\nmatmul precision on this CPU: \"medium\" %s; \"high\" (bf16x3) %s, so amp runs \"high\" as %s.\n",
           strcmp(kern[3], kern[0]) ? "multiplies f32 operands rounded to bf16 on the bf16 dot-product kernels"
                                   : "computes as \"highest\" (no bf16 dot product on this CPU path)",
           x3_pays ? "would be faster than f32" : "is slower than f32 even without the split's cost",
           x3_pays ? "\"highest\" all the same (bf16x3 is not implemented)" : "\"highest\"");
    cJSON_AddBoolToObject(root, "bf16x3_faster_than_f32", x3_pays);
    for (int k = 0; k < 3; k++) amp_tensor_free(ta[k]), amp_tensor_free(tb[k]);
    free(x3a), free(x3b), free(x3c), free(x3);

    /* inference */
    printf("\n### inference: Linear(1024, 10), batch 64, 100 runs, no_grad (the seeds' comparison)\n\n");
    printf("| mode | ms per run | speedup vs f32 |\n|---|---|---|\n");
    cJSON *ji = cJSON_AddArrayToObject(root, "inference");
    amp_tensor *x = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(64, 1024), &g);
    amp_tensor *w = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(10, 1024), &g);
    amp_tensor *b = amp_tensor_randn(AMP_F32, 1, AMP_SHAPE(10), &g);
    amp_tensor_set_requires_grad(w, true);
    amp_tensor_set_requires_grad(b, true);
    double i32 = 0;
    const char *inames[3] = {"f32", "autocast f16", "autocast bf16"};
    for (int k = 0; k < 3; k++) {
        inf_arg ia = {x, w, b, dts[k], 100};
        double t = bench_time(run_inf, &ia, 5, 0.2) / 100.0;
        if (k == 0) i32 = t;
        printf("| %s | %.4f | %.2fx |\n", inames[k], t * 1e3, i32 / t);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", inames[k]);
        cJSON_AddNumberToObject(o, "ms_per_run", t * 1e3);
        cJSON_AddNumberToObject(o, "speedup_vs_f32", i32 / t);
        cJSON_AddItemToArray(ji, o);
    }
    amp_tensor_free(x);
    amp_tensor_free(w);
    amp_tensor_free(b);
    printf("\nThis layer is tiny (64x1024x10: 1.3 MFLOP); per-call overhead (autocast casts of x\n"
           "and W each run) dominates, so mixed precision does not pay here on a CPU. The seeds'\n"
           "0.0430 s -> 0.0003 s was a GPU measurement.\n");

    /* batch 1 */
    printf("\n### batch 1 through 4 layers of 4096 x 4096 (weights streamed from memory)\n\n");
    printf("| weights | ms per layer | weight GB/s | speedup vs f32 |\n|---|---|---|---|\n");
    cJSON *jb = cJSON_AddArrayToObject(root, "batch1");
    double b32 = 0;
    for (int k = 0; k < 3; k++) {
        b1_arg ba;
        ba.x = amp_tensor_randn(dts[k], 2, AMP_SHAPE(1, 4096), &g);
        for (int l = 0; l < 4; l++) ba.w[l] = amp_tensor_uniform(dts[k], 2, AMP_SHAPE(4096, 4096), -0.015, 0.015, &g);
        double t = bench_time(run_b1, &ba, 10, 0.5) / 4.0;
        if (k == 0) b32 = t;
        double gbs = 4096.0 * 4096.0 * (double)amp_dtype_size(dts[k]) / t / 1e9;
        printf("| %s | %.3f | %.1f | %.2fx |\n", names[k], t * 1e3, gbs, b32 / t);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "dtype", names[k]);
        cJSON_AddNumberToObject(o, "ms_per_layer", t * 1e3);
        cJSON_AddNumberToObject(o, "weight_gbps", gbs);
        cJSON_AddNumberToObject(o, "speedup_vs_f32", b32 / t);
        cJSON_AddItemToArray(jb, o);
        amp_tensor_free(ba.x);
        for (int l = 0; l < 4; l++) amp_tensor_free(ba.w[l]);
    }
    int rc = bench_write_json(o.json, root);
    cJSON_Delete(root);
    return rc ? CLI_FAIL : CLI_OK;
}
