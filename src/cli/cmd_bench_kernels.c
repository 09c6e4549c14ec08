/* amp bench kernels: bandwidth-bound ops (elementwise, activations, softmax,
 * layer_norm, reductions, casts) in GB/s beside the STREAM-style triad
 * bandwidth measured in the same run. Bytes = elements read + written.
 *
 * Each op is also timed on a cache-resident tensor (16 rows of 4096 per
 * thread: at most 512 KiB read and written per core, inside a 1 MiB L2),
 * in the same units: the rate its computation allows when memory costs
 * nothing. An op whose in-cache rate is below the triad bandwidth cannot
 * reach the triad on this machine whatever its memory access: it is
 * compute-bound here ("bound" column), and the useful question for it is
 * how much of its in-cache rate survives streaming from DRAM. */
#include <stdlib.h>
#include <string.h>

#include "cli/bench_util.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench kernels [--size N] [--threads T] [--ops OP,OP,...] [--json FILE]\n\n"
               "GB/s of large elementwise ops, activations, softmax, log_softmax and layer_norm\n"
               "(rows of 4096), batch_norm (training statistics, 16 x 64 channels), sum, mean\n"
               "over the rows and casts, for f32 and bf16 tensors of N elements (default 2^24),\n"
               "no_grad, against the triad bandwidth a[i] = b[i] + s*c[i]: each run of an op\n"
               "follows a triad pass, and the fraction is the median of these pairs' ratios (a\n"
               "shared machine's bandwidth drifts; each pair sees the same). Each op is also\n"
               "timed on a cache-resident tensor (16 rows of 4096 per thread): the rate its\n"
               "arithmetic allows; below the triad, the op is compute-bound here.\n"
               "--ops: only these (add, mul_scalar, relu, gelu, exp, sigmoid, silu, tanh,\n"
               "softmax, log_softmax, layer_norm, batch_norm, sum, mean_dim1, cast).\n");
}

typedef enum {
    K_ADD, K_MULS, K_RELU, K_GELU, K_EXP, K_SIGMOID, K_SILU, K_TANH, K_SOFTMAX, K_LOGSOFTMAX, K_LAYERNORM,
    K_BATCHNORM, K_SUM, K_MEAN_DIM, K_CAST, K_COUNT
} kop;
static const char *kname[] = {"add",     "mul_scalar",  "relu",       "gelu",       "exp",
                                     "sigmoid", "silu",        "tanh",       "softmax",    "log_softmax",
                                     "layer_norm", "batch_norm", "sum",      "mean_dim1",  "cast"};
_Static_assert(sizeof kname / sizeof kname[0] == K_COUNT, "kname: one name per kernel");
/* tensors read + written, in units of the input size (sum and mean write
 * ~0; batch_norm counts one read and one write, though its statistics read
 * the input a second time) */
static const double kmoves[] = {3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 2};
_Static_assert(sizeof kmoves / sizeof kmoves[0] == K_COUNT, "kmoves: one traffic count per kernel");

typedef struct {
    kop op;
    amp_tensor *a, *b;
} karg;

static void run_k(void *p) {
    karg *k = p;
    amp_scope *s = amp_scope_begin();
    switch (k->op) {
    case K_ADD: amp_add(k->a, k->b); break;
    case K_MULS: amp_mul_scalar(k->a, 1.5); break;
    case K_RELU: amp_relu(k->a); break;
    case K_GELU: amp_gelu(k->a, AMP_GELU_ERF); break;
    case K_EXP: amp_exp(k->a); break;
    case K_SIGMOID: amp_sigmoid(k->a); break;
    case K_SILU: amp_silu(k->a); break;
    case K_TANH: amp_tanh(k->a); break;
    case K_SOFTMAX: amp_softmax(k->a, 1); break;
    case K_LOGSOFTMAX: amp_log_softmax(k->a, 1); break;
    case K_LAYERNORM: amp_layer_norm(k->a, 1, NULL, NULL, 1e-5); break;
    case K_BATCHNORM: {
        int64_t n = amp_tensor_numel(k->a);
        amp_tensor *x = amp_reshape(k->a, 3, AMP_SHAPE(16, 64, n / 1024));
        amp_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5);
        break;
    }
    case K_SUM: amp_sum(k->a, NULL, 0, false); break;
    case K_MEAN_DIM: amp_mean(k->a, (int[]){1}, 1, false); break;
    case K_CAST: amp_to(k->a, amp_tensor_dtype(k->a) == AMP_F32 ? AMP_BF16 : AMP_F32); break;
    default: break;
    }
    amp_scope_end(s);
}

int cmd_bench_kernels(int argc, char **argv) {
    long n = 1L << 24, threads = 0;
    const char *json = NULL, *ops = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            usage(stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--size") && v && !cli_parse_long(v, 4096, 1L << 30, &n)) i++;
        else if (!strcmp(a, "--threads") && v && !cli_parse_long(v, 1, 1024, &threads)) i++;
        else if (!strcmp(a, "--json") && v) json = v, i++;
        else if (!strcmp(a, "--ops") && v) ops = v, i++;
        else return cli_usage_error(usage, "bench kernels: bad option '%s'", a);
    }
    bool want[K_COUNT];
    for (int k = 0; k < K_COUNT; k++) want[k] = ops == NULL;
    for (const char *o = ops; o && *o;) {
        size_t len = strcspn(o, ",");
        int k = 0;
        while (k < K_COUNT && !(strlen(kname[k]) == len && !strncmp(kname[k], o, len))) k++;
        if (k == K_COUNT) return cli_usage_error(usage, "bench kernels: --ops: unknown op '%.*s'", (int)len, o);
        want[k] = true;
        o += len + (o[len] == ',');
    }
    if (threads > 0) amp_set_num_threads((int)threads);
    n = (n + 4095) / 4096 * 4096;
    bench_print_machine();
    bench_triad *tri = bench_triad_new((size_t)n);
    static double tris[2 * K_COUNT * 64];
    int ntri = 0;
    cJSON *root = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "elements", (double)n);
    amp_generator g = amp_generator_make(3);
    amp_no_grad_begin();
    amp_tensor *in[2][2], *small[2][2];
    amp_dtype dts[2] = {AMP_F32, AMP_BF16};
    const int64_t nsmall = (int64_t)16 * 4096 * amp_get_num_threads();
    for (int d = 0; d < 2; d++)
        for (int j = 0; j < 2; j++) {
            in[d][j] = amp_tensor_randn(dts[d], 2, AMP_SHAPE(n / 4096, 4096), &g);
            small[d][j] = amp_tensor_randn(dts[d], 2, AMP_SHAPE(nsmall / 4096, 4096), &g);
        }
    cJSON_AddNumberToObject(root, "in_cache_elements", (double)nsmall);
    printf("\nin cache: %lld elements (16 rows of 4096 per thread); bound: compute when the in-cache\n"
           "rate is below the triad bandwidth, else memory\n\n",
           (long long)nsmall);
    printf("| op | triad GB/s | f32 GB/s | f32 / triad | bf16 GB/s | bf16 / triad | f32 in cache | bf16 in cache | bf16 / in cache | bf16 bound |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < K_COUNT; k++) {
        if (!want[k]) continue;
        double gbs[2], l2[2], frac[2], tri_k[2];
        for (int d = 0; d < 2; d++) {
            karg ka = {(kop)k, in[d][0], in[d][1]};
            run_k(&ka); /* warm-up */
            /* pairs: one triad pass, then one run of the op, each timed
             * alone; the fraction is the median of the pairs' ratios, so a
             * neighbour's burst on the shared memory bus hits both sides of
             * a pair rather than one column of the table */
            enum { MAX_PAIRS = 64 };
            double tg[MAX_PAIRS], og[MAX_PAIRS], rg[MAX_PAIRS];
            int np = 0;
            double start = bench_now();
            while (np < MAX_PAIRS && (np < 11 || bench_now() - start < 0.4)) {
                tg[np] = bench_triad_once(tri);
                double t0 = bench_now();
                run_k(&ka);
                og[np] = kmoves[k] * (double)n * (double)amp_dtype_size(dts[d]) / (bench_now() - t0) / 1e9;
                rg[np] = og[np] / tg[np];
                if (ntri < (int)(sizeof tris / sizeof *tris)) tris[ntri++] = tg[np];
                np++;
            }
            gbs[d] = bench_median(og, np);
            tri_k[d] = bench_median(tg, np);
            frac[d] = bench_median(rg, np);
            karg ks = {(kop)k, small[d][0], small[d][1]};
            double ts = bench_time(run_k, &ks, 50, 0.15);
            l2[d] = kmoves[k] * (double)nsmall * (double)amp_dtype_size(dts[d]) / ts / 1e9;
        }
        double triad = 0.5 * (tri_k[0] + tri_k[1]);
        const char *bound = l2[1] < triad ? "compute" : "memory";
        printf("| %s | %.1f | %.1f | %.0f%% | %.1f | %.0f%% | %.1f | %.1f | %.0f%% | %s |\n", kname[k], triad, gbs[0],
               100 * frac[0], gbs[1], 100 * frac[1], l2[0], l2[1], 100 * gbs[1] / l2[1], bound);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", kname[k]);
        cJSON_AddNumberToObject(o, "triad_gbps", triad);
        cJSON_AddNumberToObject(o, "f32_gbps", gbs[0]);
        cJSON_AddNumberToObject(o, "bf16_gbps", gbs[1]);
        cJSON_AddNumberToObject(o, "f32_fraction_of_triad", frac[0]);
        cJSON_AddNumberToObject(o, "bf16_fraction_of_triad", frac[1]);
        cJSON_AddNumberToObject(o, "f32_in_cache_gbps", l2[0]);
        cJSON_AddNumberToObject(o, "bf16_in_cache_gbps", l2[1]);
        cJSON_AddNumberToObject(o, "bf16_fraction_of_in_cache", gbs[1] / l2[1]);
        cJSON_AddStringToObject(o, "bf16_bound", bound);
        cJSON_AddItemToArray(arr, o);
    }
    amp_no_grad_end();
    for (int d = 0; d < 2; d++)
        for (int j = 0; j < 2; j++) {
            amp_tensor_free(in[d][j]);
            amp_tensor_free(small[d][j]);
        }
    bench_triad_free(tri);
    double tmed = bench_median(tris, ntri);
    cJSON_AddNumberToObject(root, "triad_gbps", tmed);
    printf("\ntriad bandwidth (3 x %ld floats), median of the %d measurements: %.1f GB/s\n", n, ntri, tmed);
    cJSON_AddItemToObject(root, "ops", arr);
    printf("\nbytes counted: inputs read + output written (sum: input only); cast is f32->bf16\n"
           "for the f32 column and bf16->f32 for the bf16 column.\n");
    int rc = bench_write_json(json, root);
    cJSON_Delete(root);
    return rc ? CLI_FAIL : CLI_OK;
}
