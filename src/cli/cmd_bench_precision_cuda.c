/* amp bench precision --device cuda: the seeds' benchmark_precision on the
 * GPU, beside PyTorch on the same GPU in the same run.
 *
 * amp's side calls the CUDA backend's GEMM entry (cuBLASLt) on device
 * tensors directly: amp_mm does not dispatch to the backend yet
 * (docs/cuda.md), so this measures the kernel amp_mm will run there, not
 * the op's overhead. Modes: f32 ("highest": CUBLAS_COMPUTE_32F), tf32 (f32
 * operands with precision "high": COMPUTE_32F_FAST_TF32, torch's
 * allow_tf32), f16 and bf16 operands with f32 accumulation and a C of the
 * operands' dtype (what torch.mm returns). PyTorch's side is
 * tools/bench_torch_cuda_mm.py, a worker asked for one round at a time, so
 * amp's and torch's rounds interleave; each round times R back-to-back
 * products and waits for the GPU once (seconds per product = round / R).
 *
 * Measured on an H100 (docs/cuda.md, "Measured on an H100"). Without a GPU
 * it stops with the reason ("no CUDA device: ..."). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/cuda.h"
#include "cli/bench_util.h"
#include "cli/cli.h"
#include "cli/cli_internal.h"

enum { NM = 4, MAXR = 64 };
static const char *g_modes[NM] = {"f32", "tf32", "f16", "bf16"};

static void peaks(const char *name, double pk[NM]) {
    bench_gpu_peaks(name, &pk[0], &pk[1], &pk[2]);
    pk[3] = pk[2];
}

typedef struct {
    amp_gemm_args g;
    amp_tensor *a, *b, *c;
} mode_run;

static amp_status run_round(const amp_backend *be, mode_run *r, int reps, double *sec) {
    double t0 = bench_now();
    for (int i = 0; i < reps; i++) {
        amp_status st = be->gemm->gemm("amp bench precision", &r->g);
        if (st != AMP_OK) return st;
    }
    amp_status st = amp_cuda_synchronize();
    *sec = (bench_now() - t0) / reps;
    return st;
}

static bool torch_round(bench_worker *w, long n, const char *mode, int reps, double *sec) {
    char req[96], line[4096];
    snprintf(req, sizeof req, "mm %ld %s %d", n, mode, reps);
    if (!bench_worker_ask(w, req, line, sizeof line) || strncmp(line, "ok ", 3)) {
        fprintf(stderr, "amp bench precision: the PyTorch worker answered '%s'\n", line);
        return false;
    }
    *sec = strtod(line + 3, NULL);
    return true;
}

int bench_precision_cuda(long n, long reps, long per_round, const char *torch_script, bool no_torch, const char *json) {
    static const char *fn = "amp bench precision";
    const amp_backend *be = amp__backend(fn, AMP_DEVICE_CUDA);
    if (!be) return cli_fail("%s", amp_last_error());
    amp_cuda_info info;
    if (amp_cuda_get_info(&info) != AMP_OK) return cli_fail("%s", amp_last_error());
    printf("GPU: %s (compute capability %d.%d, %d SMs, %.1f GiB), CUDA runtime %d, driver %d, cuBLASLt %d\n", info.name,
           info.cc_major, info.cc_minor, info.sm_count, (double)info.total_memory / (1 << 30), info.runtime_version,
           info.driver_version, info.cublaslt_version);
    double pk[NM];
    peaks(info.name, pk);

    bench_worker w;
    memset(&w, 0, sizeof w);
    bool torch_ok = false;
    char first[512] = "";
    if (!no_torch) {
        const char *args[] = {torch_script, NULL};
        torch_ok = bench_worker_start(&w, args, first, sizeof first) && !strncmp(first, "ready ", 6);
        if (torch_ok) printf("PyTorch: %s\n", first + 6);
        else printf("PyTorch: not measured (%s: %s)\n", torch_script, first[0] ? first : "no worker");
    }

    /* operands: the same random values for every mode, made on the host */
    amp_generator gen = amp_generator_make(1);
    amp_tensor *ha = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(n, n), &gen), *hb = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(n, n), &gen);
    mode_run mr[NM];
    memset(mr, 0, sizeof mr);
    int status = CLI_OK;
    for (int m = 0; m < NM && status == CLI_OK; m++) {
        amp_dtype dt = m < 2 ? AMP_F32 : m == 2 ? AMP_F16 : AMP_BF16;
        amp_tensor *ca = amp_tensor_empty(dt, 2, AMP_SHAPE(n, n)), *cb = amp_tensor_empty(dt, 2, AMP_SHAPE(n, n));
        if (!ca || !cb || amp_tensor_copy_(ca, ha) != AMP_OK || amp_tensor_copy_(cb, hb) != AMP_OK) status = CLI_FAIL;
        mr[m].a = status == CLI_OK ? amp_tensor_to(ca, AMP_DEVICE_CUDA) : NULL;
        mr[m].b = status == CLI_OK ? amp_tensor_to(cb, AMP_DEVICE_CUDA) : NULL;
        mr[m].c = amp_tensor_empty_on(AMP_DEVICE_CUDA, dt, 2, AMP_SHAPE(n, n));
        amp_tensor_free(ca), amp_tensor_free(cb);
        if (!mr[m].a || !mr[m].b || !mr[m].c) {
            status = cli_fail("%s: %s", fn, amp_last_error());
            break;
        }
        mr[m].g = (amp_gemm_args){.m = n, .n = n, .k = n, .alpha = 1.0f, .beta = 0.0f, .a = amp_tensor_data(mr[m].a),
                                  .a_dtype = dt, .lda = n, .b = amp_tensor_data(mr[m].b), .b_dtype = dt, .ldb = n,
                                  .c = amp_tensor_data(mr[m].c), .c_dtype = dt, .ldc = n, .batch = 1,
                                  .precision = m == 1 ? AMP_MATMUL_HIGH : AMP_MATMUL_HIGHEST};
    }
    double ta[NM][MAXR], tt[NM][MAXR];
    const int rounds = (int)(reps < MAXR ? reps : MAXR);
    bool have_t[NM] = {false};
    for (int m = 0; m < NM && status == CLI_OK; m++) { /* warm-up: cuBLASLt's heuristics, torch's handles */
        double s;
        if (run_round(be, &mr[m], 2, &s) != AMP_OK) status = cli_fail("%s", amp_last_error());
        if (torch_ok && !torch_round(&w, n, g_modes[m], 2, &s)) torch_ok = false;
    }
    for (int r = 0; r < rounds && status == CLI_OK; r++)
        for (int m = 0; m < NM && status == CLI_OK; m++) {
            if (run_round(be, &mr[m], (int)per_round, &ta[m][r]) != AMP_OK) status = cli_fail("%s", amp_last_error());
            if (torch_ok) {
                have_t[m] = torch_round(&w, n, g_modes[m], (int)per_round, &tt[m][r]);
                torch_ok = have_t[m];
            }
        }
    /* accuracy: a 64 x 64 corner of each C against float64 on the host */
    double err[NM];
    const int64_t q = n < 64 ? n : 64;
    double *A = malloc(sizeof(double) * (size_t)(n * n)), *B = malloc(sizeof(double) * (size_t)(n * n));
    double *Cq = malloc(sizeof(double) * (size_t)(n * n));
    for (int m = 0; m < NM; m++) err[m] = -1;
    for (int m = 0; m < NM && status == CLI_OK && A && B && Cq; m++) {
        /* the operands as the GPU holds them (rounded to the mode's dtype), widened exactly */
        if (amp_tensor_copy_out(mr[m].a, A, AMP_F64) != AMP_OK || amp_tensor_copy_out(mr[m].b, B, AMP_F64) != AMP_OK ||
            amp_tensor_copy_out(mr[m].c, Cq, AMP_F64) != AMP_OK) {
            status = cli_fail("%s: %s", fn, amp_last_error());
            break;
        }
        double e = 0, mx = 0;
        for (int64_t i = 0; i < q; i++)
            for (int64_t j = 0; j < q; j++) {
                double acc = 0;
                for (int64_t k = 0; k < n; k++) acc += A[i * n + k] * B[k * n + j];
                e = fmax(e, fabs(Cq[i * n + j] - acc));
                mx = fmax(mx, fabs(acc));
            }
        err[m] = mx > 0 ? e / mx : 0;
    }
    free(A), free(B), free(Cq);
    if (status == CLI_OK) {
        printf("\n### matmul %ld x %ld x %ld on the GPU (the seeds' benchmark_precision), %d rounds of %ld products\n\n", n,
               n, n, rounds, per_round);
        printf("| mode | amp ms | amp TFLOP/s | of peak | torch.mm ms | amp / torch time | max rel. error vs float64 |\n"
               "|---|---|---|---|---|---|---|\n");
        cJSON *root = cJSON_CreateObject(), *jm = cJSON_AddArrayToObject(root, "matmul_cuda");
        cJSON_AddStringToObject(root, "gpu", info.name);
        if (first[0]) cJSON_AddStringToObject(root, "torch", first);
        double med[NM], medt[NM];
        for (int m = 0; m < NM; m++) {
            med[m] = bench_median(ta[m], rounds);
            medt[m] = have_t[m] ? bench_median(tt[m], rounds) : 0;
            double tf = 2.0 * (double)n * n * n / med[m] / 1e12;
            char peak[32] = "-", tms[32] = "-", ratio[32] = "-";
            if (pk[m] > 0) snprintf(peak, sizeof peak, "%.0f%%", 100 * tf / pk[m]);
            if (have_t[m]) snprintf(tms, sizeof tms, "%.3f", medt[m] * 1e3), snprintf(ratio, sizeof ratio, "%.3f", med[m] / medt[m]);
            printf("| %s | %.3f | %.1f | %s | %s | %s | %.1e |\n", g_modes[m], med[m] * 1e3, tf, peak, tms, ratio, err[m]);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "mode", g_modes[m]);
            cJSON_AddNumberToObject(o, "amp_seconds", med[m]);
            cJSON_AddNumberToObject(o, "amp_tflops", tf);
            if (pk[m] > 0) cJSON_AddNumberToObject(o, "fraction_of_peak", tf / pk[m]);
            if (have_t[m]) cJSON_AddNumberToObject(o, "torch_seconds", medt[m]);
            cJSON_AddNumberToObject(o, "max_rel_error", err[m]);
            cJSON_AddItemToArray(jm, o);
        }
        printf("\nbf16 / f32 speedup: amp %.2fx", med[0] / med[3]);
        if (have_t[0] && have_t[3]) printf(" (torch %.2fx)", medt[0] / medt[3]);
        printf("; bf16 / tf32: amp %.2fx", med[1] / med[3]);
        if (have_t[1] && have_t[3]) printf(" (torch %.2fx)", medt[1] / medt[3]);
        printf(". The bar: amp within 5%% of torch.mm in every mode (amp / torch time <= 1.05).\n");
        if (bench_write_json(json, root) != 0) status = CLI_FAIL;
        cJSON_Delete(root);
    }
    if (!no_torch) bench_worker_stop(&w);
    for (int m = 0; m < NM; m++) amp_tensor_free(mr[m].a), amp_tensor_free(mr[m].b), amp_tensor_free(mr[m].c);
    amp_tensor_free(ha), amp_tensor_free(hb);
    return status;
}
