/* amp bench attention: the fused scaled_dot_product_attention kernel against
 * the naive composition (amp_scaled_dot_product_attention_math: matmul,
 * scale, mask, softmax, matmul), causal, forward and forward + backward,
 * f32 and bf16: ms per call (median over interleaved rounds, fused and naive
 * side by side in each round) and the peak memory above the inputs
 * (amp_memory_stats). Shapes are the GPT configs of issue 15 plus a long
 * sequence. */
#include <stdlib.h>
#include <string.h>

#include "cli/bench_util.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench attention [--rounds R] [--threads T] [--json FILE]\n\n"
               "Causal attention q, k, v [B, H, T, 64]: fused kernel vs the naive composition,\n"
               "forward and forward + backward, f32 and bf16; ms per call (median over R\n"
               "interleaved rounds, default 5) and peak memory above the inputs.\n");
}

typedef struct {
    amp_tensor *q, *k, *v, *gy;
    bool fused, backward;
} att_arg;

static void run_att(void *p) {
    att_arg *a = p;
    amp_scope *s = amp_scope_begin();
    amp_sdpa_opts o = AMP_SDPA_DEFAULTS;
    o.is_causal = true;
    amp_tensor *y = a->fused ? amp_scaled_dot_product_attention_ex(a->q, a->k, a->v, &o)
                             : amp_scaled_dot_product_attention_math(a->q, a->k, a->v, &o);
    if (y && a->backward) amp_backward_ex(y, a->gy, false);
    amp_scope_end(s);
}

static double peak_above(att_arg *a) {
    amp_memory_empty_cache();
    amp_memory_reset_peak();
    size_t base = amp_memory_stats().live_total;
    run_att(a);
    return (double)(amp_memory_stats().peak_total - base);
}

int cmd_bench_attention(int argc, char **argv) {
    long rounds = 5;
    bench_opts o = {0};
    for (int i = 1; i < argc && !o.help; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (bench_option(&o, argc, argv, &i, usage)) continue;
        if (!strcmp(a, "--rounds") && v && !cli_parse_long(v, 1, 1000, &rounds)) i++;
        else return cli_usage_error(usage, "bench attention: bad option '%s'", a);
    }
    if (o.help) return CLI_OK;
    if (o.threads > 0) amp_set_num_threads((int)o.threads);
    bench_print_machine();
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "benchmark", "attention");
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "rounds", (double)rounds);
    cJSON *jr = cJSON_AddArrayToObject(root, "results");
    static const struct {
        const char *name;
        int64_t B, H, T;
    } cfg[] = {{"gpt2-124m B4 T64", 4, 12, 64}, {"shakespeare-char B16 T256", 16, 6, 256}, {"long T1024", 1, 12, 1024}};
    const int64_t E = 64;
    amp_generator g = amp_generator_make(1);
    printf("\ncausal, head size 64; ms per call, median of %ld interleaved rounds; memory = peak above the inputs\n\n", rounds);
    printf("| shape | dtype | pass | fused ms | naive ms | naive/fused | fused GFLOP/s | fused MiB | naive MiB |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        for (int d = 0; d < 2; d++) {
            amp_dtype dt = d ? AMP_BF16 : AMP_F32;
            int64_t shape[4] = {cfg[c].B, cfg[c].H, cfg[c].T, E};
            att_arg a = {amp_tensor_randn(dt, 4, shape, &g), amp_tensor_randn(dt, 4, shape, &g),
                         amp_tensor_randn(dt, 4, shape, &g), amp_tensor_randn(dt, 4, shape, &g), true, false};
            for (int bwd = 0; bwd < 2; bwd++) {
                a.backward = bwd;
                amp_tensor_set_requires_grad(a.q, bwd);
                amp_tensor_set_requires_grad(a.k, bwd);
                amp_tensor_set_requires_grad(a.v, bwd);
                double *tf = malloc(sizeof(double) * (size_t)rounds), *tn = malloc(sizeof(double) * (size_t)rounds);
                for (long r = 0; r < rounds; r++) {
                    a.fused = true;
                    tf[r] = bench_time(run_att, &a, 1, 0.0);
                    a.fused = false;
                    tn[r] = bench_time(run_att, &a, 1, 0.0);
                }
                double f = bench_median(tf, (int)rounds), n = bench_median(tn, (int)rounds);
                a.fused = true;
                double mf = peak_above(&a);
                a.fused = false;
                double mn = peak_above(&a);
                /* causal: T (T + 1) / 2 scores per head, 2 products of 2 E flops each; backward 5 products */
                double flop = (double)cfg[c].B * cfg[c].H * cfg[c].T * (cfg[c].T + 1) / 2.0 * E * 2.0 * (bwd ? 7 : 2);
                printf("| %s H%lld | %s | %s | %.2f | %.2f | %.2fx | %.1f | %.1f | %.1f |\n", cfg[c].name,
                       (long long)cfg[c].H, d ? "bf16" : "f32", bwd ? "fwd+bwd" : "fwd", f * 1e3, n * 1e3, n / f,
                       flop / f / 1e9, mf / 1048576.0, mn / 1048576.0);
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "shape", cfg[c].name);
                cJSON_AddNumberToObject(o, "B", (double)cfg[c].B);
                cJSON_AddNumberToObject(o, "H", (double)cfg[c].H);
                cJSON_AddNumberToObject(o, "T", (double)cfg[c].T);
                cJSON_AddNumberToObject(o, "E", (double)E);
                cJSON_AddStringToObject(o, "dtype", d ? "bf16" : "f32");
                cJSON_AddStringToObject(o, "pass", bwd ? "fwd+bwd" : "fwd");
                cJSON_AddNumberToObject(o, "fused_ms", f * 1e3);
                cJSON_AddNumberToObject(o, "naive_ms", n * 1e3);
                cJSON_AddNumberToObject(o, "speedup", n / f);
                cJSON_AddNumberToObject(o, "fused_gflops", flop / f / 1e9);
                cJSON_AddNumberToObject(o, "fused_peak_bytes", mf);
                cJSON_AddNumberToObject(o, "naive_peak_bytes", mn);
                cJSON_AddItemToArray(jr, o);
                free(tf);
                free(tn);
            }
            amp_tensor_free(a.q);
            amp_tensor_free(a.k);
            amp_tensor_free(a.v);
            amp_tensor_free(a.gy);
        }
    }
    printf("\nThe naive composition stores the B x H x T x T weights (and, with backward, their\n"
           "softmax and matmul inputs); the fused kernel keeps 64 x 64 tiles per thread and\n"
           "the f32 row logsumexp per head, and recomputes the weights in the backward.\n");
    int rc = bench_write_json(o.json, root);
    cJSON_Delete(root);
    return rc ? CLI_FAIL : CLI_OK;
}
