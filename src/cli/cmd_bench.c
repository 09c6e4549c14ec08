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
};
#define N_PARTS (sizeof g_parts / sizeof g_parts[0])

void cmd_bench_usage(FILE *f) {
    fprintf(f, "usage: amp bench PART [OPTIONS]\n\nparts:\n");
    for (size_t i = 0; i < N_PARTS; i++) fprintf(f, "  %-10s %s\n", g_parts[i].name, g_parts[i].summary);
    fprintf(f, "\nevery part accepts --json FILE (machine-readable results, see docs/BENCHMARKS.md)\n"
               "and --threads T. 'amp bench PART --help' lists a part's own options.\n");
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2) return cli_usage_error(cmd_bench_usage, "bench: no part given");
    for (size_t i = 0; i < N_PARTS; i++)
        if (strcmp(argv[1], g_parts[i].name) == 0) return g_parts[i].run(argc - 1, argv + 1);
    return cli_usage_error(cmd_bench_usage, "bench: unknown part '%s'", argv[1]);
}
