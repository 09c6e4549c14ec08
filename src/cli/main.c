/* amp — automatic mixed precision for C: the command line. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* own_help: the command reads -h/--help among its options itself (train:
 * its usage depends on --model; bench: each part has its own); for the
 * others the dispatcher prints the usage wherever -h/--help appears. */
static const struct {
    cli_command c;
    bool own_help;
} g_commands[] = {
    {{"train", "train mlp/cnn on Fashion-MNIST or a GPT on text in fp32/fp16/bf16, O0-O3 or a policy", cmd_train, cmd_train_usage}, true},
    {{"generate", "text from a GPT checkpoint or GPT-2 state_dict, with a KV cache", cmd_generate, cmd_generate_usage}, false},
    {{"compare", "fp32 vs fp16 vs bf16 on the same model, seed and data: the evaluation table", cmd_compare, cmd_compare_usage}, false},
    {{"memory", "memory arithmetic per mode beside the allocator's measurements", cmd_memory, cmd_memory_usage}, false},
    {{"formats", "number formats: bits, range, precision; --convert X", cmd_formats, cmd_formats_usage}, false},
    {{"autocast", "the autocast op table: which ops run in half, which in f32", cmd_autocast, cmd_autocast_usage}, false},
    {{"inspect", "list the tensors, dtypes, shapes and metadata of a safetensors file or checkpoint", cmd_inspect, cmd_inspect_usage},
     false},
    {{"predict", "run a saved mlp/cnn on IDX images: accuracy or predictions, in fp32/fp16/bf16", cmd_predict, cmd_predict_usage},
     false},
    {{"embed", "sentence embeddings of a BERT model directory (all-MiniLM-L6-v2) and their cosine similarities", cmd_embed,
      cmd_embed_usage},
     false},
    {{"eval", "a pretrained model per load dtype vs f32: perplexity, KL, top-1 (decoder) or cosine (encoder)", cmd_eval,
      cmd_eval_usage},
     false},
    {{"bench", "benchmarks (make bench runs them all):", cmd_bench, cmd_bench_usage}, true}, /* + the parts (cmd_bench.c) */
};
#define N_COMMANDS (sizeof g_commands / sizeof g_commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: amp [--version] [--help] COMMAND [ARGS]\n\n"
               "automatic mixed precision training and inference for C\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++) {
        fprintf(f, "  %-10s %s", g_commands[i].c.name, g_commands[i].c.summary);
        if (g_commands[i].c.run == cmd_bench) cmd_bench_list(f, " ", ", "); /* from the parts' table: never out of step */
        fputc('\n', f);
    }
    fprintf(f, "\n'amp COMMAND --help' (or 'amp help COMMAND') documents every flag of a command.\n"
               "environment: AMP_CPU=scalar|avx2|avx512|avx512bf16 forces a kernel path; OMP_NUM_THREADS sets threads.\n"
               "exit codes: 0 success, 1 runtime failure, 2 bad usage.\n");
}

static void print_version(void) {
    printf("amp %s\n", amp_version());
    printf("cpu path: %s (supported:", amp_cpu_path_name(amp_cpu_active()));
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++)
        if (amp_cpu_supported((amp_cpu_path)p)) printf(" %s", amp_cpu_path_name((amp_cpu_path)p));
    printf(")\nthreads: %d%s\n", amp_get_num_threads(),
           amp_get_adaptive_threads() ? " (fewer while other processes keep cores busy; AMP_ADAPTIVE_THREADS=0 fixes the count)"
                                      : " (fixed: AMP_ADAPTIVE_THREADS=0)");
    printf("distributed: %s\n", amp_dist_build_info());
    if (!amp_cuda_built()) {
        amp_device_check(AMP_DEVICE_CUDA); /* the configure's reason, compiled into the library */
        const char *why = amp_last_error(), *fn = "amp_device_check: ";
        if (!strncmp(why, fn, strlen(fn))) why += strlen(fn);
        printf("cuda: not built (%s)\n", why);
        amp_clear_error();
    } else if (!amp_cuda_available()) {
        amp_device_check(AMP_DEVICE_CUDA); /* the reason */
        printf("cuda: built, no usable GPU (%s)\n", amp_last_error());
        amp_clear_error();
    } else {
        amp_cuda_info in;
        if (amp_cuda_get_info(&in) == AMP_OK)
            printf("cuda: built, device %d: %s (compute capability %d.%d, %d SMs, %.1f GiB), CUDA runtime %d.%d, driver %d.%d\n",
                   in.device, in.name, in.cc_major, in.cc_minor, in.sm_count, (double)in.total_memory / (1024.0 * 1024 * 1024),
                   in.runtime_version / 1000, in.runtime_version % 1000 / 10, in.driver_version / 1000,
                   in.driver_version % 1000 / 10);
        else
            printf("cuda: built, %d device(s), the device cannot be queried (%s)\n", amp_cuda_device_count(), amp_last_error());
    }
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
    if (strcmp(cmd, "help") == 0 && argc > 2) { /* amp help COMMAND */
        for (size_t i = 0; i < N_COMMANDS; i++)
            if (strcmp(argv[2], g_commands[i].c.name) == 0) {
                g_commands[i].c.usage(stdout);
                return CLI_OK;
            }
        return cli_usage_error(usage, "help: unknown command '%s'", argv[2]);
    }
    if (cli_is_help(cmd) || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        print_version();
        return CLI_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const cli_command *c = &g_commands[i].c;
        if (strcmp(cmd, c->name) != 0) continue;
        /* `amp COMMAND --help`, and -h/--help after other options for the
         * commands that do not read it themselves (train reads it with
         * --model; bench parts such as `amp bench gemm --help` document
         * their own options). A value that is literally -h or --help (a
         * --prompt) cannot be given to those commands. */
        for (int a = 2; a < argc; a++)
            if (cli_is_help(argv[a]) && (a == 2 || !g_commands[i].own_help)) {
                c->usage(stdout);
                return CLI_OK;
            }
        return c->run(argc - 1, argv + 1);
    }
    return cli_usage_error(usage, "unknown command '%s'", cmd);
}
