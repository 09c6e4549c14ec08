/* amp bench PART: the benchmark programs users run (make bench runs them all). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} bench_part;

static const bench_part g_parts[] = {
    {"convert", "f32 <-> f16/bf16/fp8 conversion throughput per CPU path vs memcpy", cmd_bench_convert},
    {"gemm", "GEMM GFLOP/s per input dtype vs FMA peak and OpenBLAS sgemm", cmd_bench_gemm},
    {"precision", "the seeds' benchmarks: 4096^2 matmul, Linear(1024,10) inference, batch-1 layers", cmd_bench_precision},
    {"attention", "fused scaled_dot_product_attention vs the naive composition: ms and peak memory", cmd_bench_attention},
    {"kernels", "bandwidth-bound ops (elementwise, softmax, layer_norm, sum, casts) vs triad", cmd_bench_kernels},
    {"quant", "quantized linear (q8_0/q4_0/q4_1) decode GB/s vs triad and prefill GFLOP/s, beside f32/bf16", cmd_bench_quant},
    {"train", "ms per training step fp32 / fp16+scaler / bf16 / O2, beside PyTorch CPU", cmd_bench_train},
    {"gpt", "the GPT (shakespeare-char, GPT-2 124M): ms/step and tokens/s beside PyTorch and llm.c", cmd_bench_gpt},
    {"dist", "data parallel under mpirun: 1 rank x 2 threads vs 2 ranks, overlap, bf16 gradients, ZeRO-1, 1-8 ranks", cmd_bench_dist},
    {"infer", "pretrained SmolLM2 / MiniLM per load dtype: prefill, decode, sentences/s vs the bandwidth bound, llama.cpp, PyTorch", cmd_bench_infer},
    {"load", "training steps beside busy processes: 1 thread vs all, adaptive vs fixed thread count", cmd_bench_load},
};
#define N_PARTS (sizeof g_parts / sizeof g_parts[0])

void cmd_bench_list(FILE *f, const char *first, const char *sep) {
    for (size_t i = 0; i < N_PARTS; i++) fprintf(f, "%s%s", i ? sep : first, g_parts[i].name);
}

void cmd_bench_usage(FILE *f) {
    fprintf(f, "usage: amp bench PART [OPTIONS]\n\nparts:\n");
    for (size_t i = 0; i < N_PARTS; i++) fprintf(f, "  %-10s %s\n", g_parts[i].name, g_parts[i].summary);
    fprintf(f, "\n'amp bench --list' prints the part names. Every part accepts --json FILE (machine-readable results, see docs/BENCHMARKS.md)\n"
               "and --threads T. 'amp bench PART --help' lists a part's own options.\n");
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2) return cli_usage_error(cmd_bench_usage, "bench: no part given");
    if (strcmp(argv[1], "--list") == 0) { /* for scripts/bench.sh */
        cmd_bench_list(stdout, "", "\n");
        printf("\n");
        return CLI_OK;
    }
    for (size_t i = 0; i < N_PARTS; i++)
        if (strcmp(argv[1], g_parts[i].name) == 0) return g_parts[i].run(argc - 1, argv + 1);
    for (int i = 1; i < argc; i++) /* no part named: --help is bench's */
        if (cli_is_help(argv[i])) {
            cmd_bench_usage(stdout);
            return CLI_OK;
        }
    return cli_usage_error(cmd_bench_usage, "bench: unknown part '%s'", argv[1]);
}
