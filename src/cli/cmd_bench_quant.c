/* amp bench quant: the quantized linear (amp_qlinear: x in 8-bit blocks,
 * integer block sums) at SmolLM2-135M's shapes, per weight type and CPU
 * kernel set, beside the f32 and bf16 linear:
 *  - decode: a GEMV (one row of x) is memory-bound, so its figure is the
 *    weight bytes read per second (GB/s) against the triad bandwidth measured
 *    in the same run. The weights cycle through copies totalling more than
 *    the last-level cache (--pool MB), so every call reads DRAM, as a model's
 *    layers do;
 *  - prefill: M rows of x (--prefill M), GFLOP/s (2 M N K per call), for the
 *    integer GEMM and for the alternative of dequantizing the weight to bf16
 *    and running the bf16 GEMM (amp_dequantize + amp_linear).
 * Timings are medians of calls through the public ops (x's quantization and
 * the output included). */
#include <stdlib.h>
#include <string.h>

#include "amp/quant.h"
#include "cli/bench_util.h"
#include "cli/cli.h"
#include "kernels/cpu_paths.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench quant [--threads T] [--prefill M] [--pool MB] [--shapes LIST] [--json FILE]\n\n"
               "The quantized linear (q8_0, q4_0, q4_1 weights; x quantized to 8-bit blocks, integer dot\n"
               "products) at SmolLM2-135M's shapes (OUTxIN: 576x576, 192x576, 1536x576, 576x1536 and the\n"
               "49152x576 head; --shapes picks some, e.g. 576x576,1536x576), per CPU kernel set (avx2,\n"
               "avx512, avx512 with VNNI, those this CPU has), beside the f32 and bf16 linear:\n"
               "decode (one row of x: GB/s of weights read, against the triad bandwidth; the weights\n"
               "cycle through copies totalling --pool MB, default 128, so each call reads memory) and\n"
               "prefill (--prefill M rows, default 128: GFLOP/s, also for the weight dequantized to\n"
               "bf16 and the bf16 GEMM).\n");
}

typedef struct {
    int64_t N, K;
} shape;
static const shape SHAPES[] = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

/* the contenders of one shape */
typedef enum { C_F32, C_BF16, C_Q } ckind;
typedef struct {
    ckind kind;
    amp_qtype qt;
    amp_cpu_path path;
    bool vnni;
    const char *name;
} contender;

typedef struct {
    int n, i;
    amp_tensor **w;   /* float weights (C_F32, C_BF16) */
    amp_qtensor **q;  /* quantized */
    amp_tensor *x;
    bool deq;         /* prefill through the dequantized bf16 weight */
} call_arg;

static void run_call(void *p) {
    call_arg *a = p;
    amp_scope *s = amp_scope_begin();
    int i = a->i;
    a->i = (a->i + 1) % a->n;
    if (a->q && a->deq) {
        amp_tensor *wd = amp_dequantize(a->q[i], AMP_BF16);
        amp_linear(a->x, wd, NULL);
        amp_tensor_free(wd);
    } else if (a->q) {
        amp_qlinear(a->x, a->q[i], NULL);
    } else {
        amp_linear(a->x, a->w[i], NULL);
    }
    amp_scope_end(s);
}

static size_t weight_bytes(const contender *c, int64_t N, int64_t K) {
    if (c->kind == C_F32) return (size_t)(N * K) * 4;
    if (c->kind == C_BF16) return (size_t)(N * K) * 2;
    return (size_t)(N * K / 32) * amp_qtype_block_bytes(c->qt);
}

int cmd_bench_quant(int argc, char **argv) {
    long prefill = 128, pool_mb = 128;
    const char *shapes = NULL;
    bench_opts opt = {0};
    for (int i = 1; i < argc && !opt.help; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (bench_option(&opt, argc, argv, &i, usage)) continue;
        if (!strcmp(a, "--prefill") && v && !cli_parse_long(v, 1, 8192, &prefill)) i++;
        else if (!strcmp(a, "--pool") && v && !cli_parse_long(v, 1, 1L << 16, &pool_mb)) i++;
        else if (!strcmp(a, "--shapes") && v) shapes = v, i++;
        else return cli_usage_error(usage, "bench quant: bad option '%s'", a);
    }
    if (opt.help) return CLI_OK;
    bool want[N_SHAPES];
    for (int s = 0; s < N_SHAPES; s++) want[s] = shapes == NULL;
    for (const char *o = shapes; o && *o;) {
        size_t len = strcspn(o, ",");
        int s = 0;
        char buf[32];
        for (; s < N_SHAPES; s++) {
            snprintf(buf, sizeof buf, "%lldx%lld", (long long)SHAPES[s].N, (long long)SHAPES[s].K);
            if (strlen(buf) == len && !strncmp(buf, o, len)) break;
        }
        if (s == N_SHAPES)
            return cli_usage_error(usage, "bench quant: --shapes: unknown shape '%.*s' (576x576, 192x576, 1536x576, 576x1536, 49152x576)",
                                   (int)len, o);
        want[s] = true;
        o += len + (o[len] == ',');
    }
    if (opt.threads > 0) amp_set_num_threads((int)opt.threads);
    bench_print_machine();
    const amp_cpu_path path0 = amp_cpu_active();
    contender cs[16];
    int nc = 0;
    cs[nc++] = (contender){C_F32, AMP_Q8_0, path0, false, "f32"};
    cs[nc++] = (contender){C_BF16, AMP_Q8_0, path0, false, "bf16"};
    static const amp_cpu_path qpaths[] = {AMP_CPU_AVX2, AMP_CPU_AVX512};
    static const char *const qnames[3][3] = {{"q8_0 avx2", "q8_0 avx512", "q8_0 avx512vnni"},
                                             {"q4_0 avx2", "q4_0 avx512", "q4_0 avx512vnni"},
                                             {"q4_1 avx2", "q4_1 avx512", "q4_1 avx512vnni"}};
    for (int t = 0; t < 3; t++)
        for (int p = 0; p < 3; p++) {
            amp_cpu_path cp = qpaths[p < 2 ? p : 1];
            if (!amp_k_quant_path(cp, p == 2)) continue;
            cs[nc++] = (contender){C_Q, (amp_qtype)t, cp, p == 2, qnames[t][p]};
        }
    bench_triad *tri = bench_triad_new((size_t)1 << 24);
    double tri_s[64];
    int ntri = 0;
    tri_s[ntri++] = bench_triad_run(tri, 0.2);
    printf("\ndecode: one row of x, the weights cycling through copies totalling >= %ld MB (DRAM); prefill: M = %ld rows\n\n",
           pool_mb, prefill);
    printf("| OUTxIN | weights | kernels | decode us | GB/s | of triad | prefill GFLOP/s | deq->bf16 GEMM GFLOP/s |\n"
           "|---|---|---|---|---|---|---|---|\n");
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "prefill_rows", (double)prefill);
    amp_generator g = amp_generator_make(7);
    amp_no_grad_begin();
    int rc = CLI_OK;
    for (int s = 0; s < N_SHAPES && rc == CLI_OK; s++) {
        if (!want[s]) continue;
        const int64_t N = SHAPES[s].N, K = SHAPES[s].K;
        amp_tensor *w32 = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(N, K), &g);
        amp_tensor *x1 = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(1, K), &g);
        amp_tensor *xm = amp_tensor_randn(AMP_F32, 2, AMP_SHAPE(prefill, K), &g);
        amp_tensor *x1b = amp_to(x1, AMP_BF16), *xmb = amp_to(xm, AMP_BF16);
        amp_tensor_keep(x1b);
        amp_tensor_keep(xmb);
        for (int c = 0; c < nc && rc == CLI_OK; c++) {
            const contender *ct = &cs[c];
            if (amp_cpu_select(ct->path) != AMP_OK) continue;
            amp_k_quant_set_vnni(ct->vnni);
            size_t wb = weight_bytes(ct, N, K);
            int copies = (int)(((size_t)pool_mb << 20) / wb) + 1;
            if (copies > 4096) copies = 4096;
            call_arg a = {.n = copies};
            if (ct->kind == C_Q) {
                a.q = calloc((size_t)copies, sizeof *a.q);
                for (int i = 0; i < copies && a.q; i++) a.q[i] = amp_quantize(w32, ct->qt);
            } else {
                a.w = calloc((size_t)copies, sizeof *a.w);
                for (int i = 0; i < copies && a.w; i++) a.w[i] = amp_tensor_keep(amp_to(w32, ct->kind == C_F32 ? AMP_F32 : AMP_BF16));
                if (ct->kind == C_F32 && a.w) { /* amp_to of an f32 tensor to f32 is the tensor itself: a copy */
                    for (int i = 0; i < copies; i++) {
                        amp_tensor_free(a.w[i]);
                        a.w[i] = amp_tensor_keep(amp_contiguous(amp_mul_scalar(w32, 1.0)));
                    }
                }
            }
            if ((!a.q && !a.w) || (a.q && !a.q[copies - 1]) || (a.w && !a.w[copies - 1])) {
                fprintf(stderr, "amp bench quant: %s [%lld, %lld]: %s\n", ct->name, (long long)N, (long long)K, amp_last_error());
                rc = CLI_FAIL;
            } else {
                a.x = ct->kind == C_BF16 ? x1b : x1;
                double t1 = bench_time(run_call, &a, 3 * copies, 0.25);
                tri_s[ntri < 64 ? ntri++ : 63] = bench_triad_run(tri, 0.05);
                a.x = ct->kind == C_BF16 ? xmb : xm;
                a.n = copies < 4 ? copies : 4;
                double tm = bench_time(run_call, &a, 5, 0.2);
                double tdq = -1;
                if (ct->kind == C_Q && ct->path == path0 && ct->vnni == (amp_k_quant_path(path0, true) != NULL)) {
                    a.deq = true;
                    a.x = xmb;
                    tdq = bench_time(run_call, &a, 5, 0.2);
                }
                double gbs = (double)wb / t1 / 1e9, flops = 2.0 * (double)prefill * (double)N * (double)K;
                double tr = tri_s[ntri - 1];
                char dq[32] = "";
                if (tdq > 0) snprintf(dq, sizeof dq, "%.1f", flops / tdq / 1e9);
                printf("| %lldx%lld | %s | %s | %.1f | %.1f | %.0f%% | %.1f | %s |\n", (long long)N, (long long)K,
                       ct->kind == C_F32 ? "f32" : ct->kind == C_BF16 ? "bf16" : amp_qtype_name(ct->qt),
                       ct->kind == C_Q ? ct->name + 5 : amp_cpu_path_name(ct->path), t1 * 1e6, gbs, 100 * gbs / tr,
                       flops / tm / 1e9, dq);
                fflush(stdout);
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "out", (double)N);
                cJSON_AddNumberToObject(o, "in", (double)K);
                cJSON_AddStringToObject(o, "weights", ct->kind == C_F32 ? "f32" : ct->kind == C_BF16 ? "bf16" : amp_qtype_name(ct->qt));
                cJSON_AddStringToObject(o, "kernels", ct->kind == C_Q ? ct->name + 5 : amp_cpu_path_name(ct->path));
                cJSON_AddNumberToObject(o, "decode_us", t1 * 1e6);
                cJSON_AddNumberToObject(o, "decode_gbps", gbs);
                cJSON_AddNumberToObject(o, "triad_gbps", tr);
                cJSON_AddNumberToObject(o, "prefill_gflops", flops / tm / 1e9);
                if (tdq > 0) cJSON_AddNumberToObject(o, "prefill_deq_bf16_gflops", flops / tdq / 1e9);
                cJSON_AddItemToArray(arr, o);
            }
            for (int i = 0; i < copies; i++) {
                if (a.q) amp_qtensor_free(a.q[i]);
                if (a.w) amp_tensor_free(a.w[i]);
            }
            free(a.q);
            free(a.w);
        }
        amp_cpu_select(path0);
        amp_k_quant_set_vnni(true);
        amp_tensor_free(x1b);
        amp_tensor_free(xmb);
        amp_tensor_free(w32);
        amp_tensor_free(x1);
        amp_tensor_free(xm);
    }
    amp_no_grad_end();
    double tmed = bench_median(tri_s, ntri);
    printf("\ntriad bandwidth, median of %d measurements between the rows: %.1f GB/s; threads: %d\n", ntri, tmed,
           amp_get_num_threads());
    cJSON_AddNumberToObject(root, "triad_gbps", tmed);
    cJSON_AddItemToObject(root, "rows", arr);
    bench_triad_free(tri);
    if (rc == CLI_OK && bench_write_json(opt.json, root)) rc = CLI_FAIL;
    cJSON_Delete(root);
    return rc;
}
