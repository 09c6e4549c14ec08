/* amp — automatic mixed precision for C: the command line. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const cli_command g_commands[] = {
    {"train", "train mlp/cnn on Fashion-MNIST or a GPT on text in fp32/fp16/bf16, O0-O3 or a policy", cmd_train, cmd_train_usage},
    {"generate", "text from a GPT checkpoint or GPT-2 state_dict, with a KV cache", cmd_generate, cmd_generate_usage},
    {"compare", "fp32 vs fp16 vs bf16 on the same model, seed and data: the evaluation table", cmd_compare, cmd_compare_usage},
    {"memory", "memory arithmetic per mode beside the allocator's measurements", cmd_memory, cmd_memory_usage},
    {"formats", "number formats: bits, range, precision; --convert X", cmd_formats, cmd_formats_usage},
    {"autocast", "the autocast op table: which ops run in half, which in f32", cmd_autocast, cmd_autocast_usage},
    {"inspect", "list the tensors, dtypes, shapes and metadata of a safetensors file or checkpoint", cmd_inspect, cmd_inspect_usage},
    {"predict", "run a saved model on IDX images: accuracy or predictions, in fp32/fp16/bf16", cmd_predict, cmd_predict_usage},
    {"bench", "benchmarks: convert, gemm, precision, kernels, train (make bench runs all)", cmd_bench, cmd_bench_usage},
};
#define N_COMMANDS (sizeof g_commands / sizeof g_commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: amp [--version] [--help] COMMAND [ARGS]\n\n"
               "automatic mixed precision training and inference for C\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", g_commands[i].name, g_commands[i].summary);
    fprintf(f, "\n'amp COMMAND --help' documents every flag of a command.\n"
               "environment: AMP_CPU=scalar|avx2|avx512|avx512bf16 forces a kernel path; OMP_NUM_THREADS sets threads.\n"
               "exit codes: 0 success, 1 runtime failure, 2 bad usage.\n");
}

static void print_version(void) {
    printf("amp %s\n", amp_version());
    printf("cpu path: %s (supported:", amp_cpu_path_name(amp_cpu_active()));
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++)
        if (amp_cpu_supported((amp_cpu_path)p)) printf(" %s", amp_cpu_path_name((amp_cpu_path)p));
    printf(")\nthreads: %d\n", amp_get_num_threads());
    printf("distributed: %s\n", amp_dist_build_info());
}

/* Results go to stdout: a failed write there (a full disk, /dev/full, a
 * closed pipe) is a failure of the command, reported and exit 1. */
static int close_stdout(int rc) {
    errno = 0;
    bool bad = fflush(stdout) != 0 || ferror(stdout);
    int e = errno;
    if (fclose(stdout) != 0 && !bad) bad = true, e = errno;
    if (!bad) return rc;
    fprintf(stderr, "amp: error: cannot write standard output: %s\n", strerror(e ? e : EIO));
    return rc == CLI_OK ? CLI_FAIL : rc;
}

static int run(int argc, char **argv);

int main(int argc, char **argv) { return close_stdout(run(argc, argv)); }

static int run(int argc, char **argv) {
    if (argc < 2) return cli_usage_error(usage, "no command given");
    if (amp_init() != AMP_OK) return cli_fail("%s", amp_last_error());
    const char *cmd = argv[1];
    if (cli_is_help(cmd) || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        print_version();
        return CLI_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (strcmp(cmd, g_commands[i].name) == 0) {
            /* `amp COMMAND --help`; later --help flags go to the command (bench parts
             * such as `amp bench gemm --help` document their own options) */
            if (argc > 2 && cli_is_help(argv[2])) {
                g_commands[i].usage(stdout);
                return CLI_OK;
            }
            return g_commands[i].run(argc - 1, argv + 1);
        }
    }
    return cli_usage_error(usage, "unknown command '%s'", cmd);
}
