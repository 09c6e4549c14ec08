/* What a new user of the amp command met (issue 23, section 5, and the
 * predict message of defect 16), each reproduced:
 *   - every command's --help and -h print its usage to stdout and exit 0,
 *     also after other options (generate, compare, memory and autocast said
 *     "unknown option '--help'" and exited 2); the loop takes the commands
 *     from the top-level help, so a new command is covered or the test fails;
 *   - the top-level help lists every `amp bench` part (it listed 5 of 8);
 *   - `amp bench precision --help` does not claim the GPU path never ran;
 *   - `amp --version` says whether the CUDA backend is built and the GPU;
 *   - `amp generate --stats` puts its line apart from the text when both go
 *     to the same place;
 *   - `amp inspect` prints metadata numbers in decimal, not as hex floats;
 *   - `amp predict` on a GPT checkpoint, or a GPT-2 state_dict without
 *     "model" metadata, says it is a GPT and points to `amp generate` (it
 *     said the "model" metadata was missing);
 *   - `amp help unknown` and `amp bench gemm --sections bad` are usage
 *     errors naming the argument. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test_support.h"

static char g_gpt[1100];

static int setup(void **state) {
    if (test_tmpdir_setup(state)) return -1;
    snprintf(g_gpt, sizeof g_gpt, "%s/gpt", test_tmpdir);
    char args[1400];
    snprintf(args, sizeof args, "train --model gpt --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch 4 --threads 2 --max-steps 2 "
                                "--eval-windows 4 --quiet --checkpoint %s", g_gpt);
    return test_run_cli(NULL, args, NULL, NULL) == 0 ? 0 : -1;
}

/* The command names of the top-level help ("  NAME  summary" under "commands:"). */
static int commands(char names[][32], int max) {
    char *out;
    assert_int_equal(test_run_clif(NULL, &out, NULL, "--help"), 0);
    char *p = strstr(out, "commands:\n");
    assert_non_null(p);
    int n = 0;
    for (p = strchr(p, '\n') + 1; n < max && p[0] == ' ' && p[1] == ' '; p = strchr(p, '\n') + 1)
        sscanf(p, " %31s", names[n++]);
    free(out);
    return n;
}

/* stdout starts with "usage: amp" and holds usage ("usage: amp bench gpt" is
 * "usage: amp bench train --model gpt (or: amp bench gpt)") */
static void expect_usage(const char *args, const char *usage) {
    char *out, *err;
    int rc = test_run_clif(NULL, &out, &err, "%s", args);
    if (rc != 0 || strncmp(out, "usage: amp", 10) || !strstr(out, usage + 7) || err[0])
        fail_msg("amp %s: exit %d (expected 0 and '%s...' on stdout, nothing on stderr)\nstdout:\n%.300s\nstderr:\n%.300s", args, rc,
                 usage, out, err);
    test_free_all(out, err);
}

static void t_help_everywhere(void **state) {
    (void)state;
    /* per command: options that may come before --help (NULL: see the note) */
    static const struct {
        const char *cmd, *before;
    } known[] = {
        {"train", NULL}, /* `amp train --model gpt --help`: cmd_train.c's own parser (its tests) */
        {"generate", "--checkpoint x --tokens 5 --stats"},
        {"compare", "--model gpt --max-steps 3"},
        {"memory", "--model gpt --batch 4"},
        {"formats", "--convert 1.5"},
        {"autocast", "--table cpu --markdown"},
        {"inspect", "--no-tensors x.safetensors"},
        {"predict", "--checkpoint x --limit 5"},
        {"embed", "--model x --load-dtype bf16 --precision bf16"},
        {"eval", "--model x.gguf --tokens 64 --load-dtypes q8_0"},
        {"bench", NULL}, /* the parts below */
    };
    char names[32][32];
    int n = commands(names, 32);
    assert_true(n >= 9);
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(known[k].cmd, names[i])) k++;
        if (k == sizeof known / sizeof known[0]) fail_msg("command '%s' of amp --help is not in this test: add it", names[i]);
        char usage[1100], args[1400];
        snprintf(usage, sizeof usage, "usage: amp %s", names[i]);
        const char *h[] = {"--help", "-h"};
        for (int j = 0; j < 2; j++) {
            snprintf(args, sizeof args, "%s %s", names[i], h[j]);
            expect_usage(args, usage);
            snprintf(args, sizeof args, "help %s", names[i]);
            expect_usage(args, usage);
            if (!known[k].before) continue;
            snprintf(args, sizeof args, "%s %s %s", names[i], known[k].before, h[j]);
            expect_usage(args, usage);
        }
    }
    /* every bench part, alone and after an option */
    char *parts;
    assert_int_equal(test_run_clif(NULL, &parts, NULL, "bench --list"), 0);
    int np = 0;
    for (char *p = strtok(parts, "\n"); p; p = strtok(NULL, "\n"), np++) {
        char usage[1100], args[1100];
        snprintf(usage, sizeof usage, "usage: amp bench %s", p);
        snprintf(args, sizeof args, "bench %s --help", p);
        expect_usage(args, usage);
        snprintf(args, sizeof args, "bench %s --threads 1 -h", p);
        expect_usage(args, usage);
    }
    assert_true(np >= 8);
    free(parts);
    expect_usage("bench --threads 1 --help", "usage: amp bench PART");
}

static void t_bench_parts_listed(void **state) {
    (void)state;
    char *help, *parts;
    assert_int_equal(test_run_clif(NULL, &help, NULL, "--help"), 0);
    assert_int_equal(test_run_clif(NULL, &parts, NULL, "bench --list"), 0);
    char *line = strstr(help, "\n  bench ");
    assert_non_null(line);
    *strchr(line + 1, '\n') = 0;
    for (char *p = strtok(parts, "\n"); p; p = strtok(NULL, "\n")) {
        char word[1100];
        snprintf(word, sizeof word, " %s", p);
        if (!strstr(line, word)) fail_msg("the top-level help's bench line lacks the part '%s':%s", p, line);
    }
    test_free_all(help, parts);
}

static void t_bench_precision_help(void **state) {
    (void)state;
    char *out;
    assert_int_equal(test_run_clif(NULL, &out, NULL, "bench precision --help"), 0);
    if (strstr(out, "never run") || !strstr(out, "H100")) fail_msg("the --device cuda text does not say where it ran:\n%s", out);
    free(out);
}

static void t_version_cuda(void **state) {
    (void)state;
    char *out;
    assert_int_equal(test_run_clif(NULL, &out, NULL, "--version"), 0);
    char *line = strstr(out, "\ncuda: ");
    if (!line) fail_msg("no cuda line:\n%s", out);
    const char *want = !amp_cuda_built() ? "not built" : amp_cuda_available() ? "built, device " : "built, no usable GPU";
    if (!strstr(line, want)) fail_msg("expected '%s' in:\n%s", want, out);
    if (!amp_cuda_built()) { /* the configure's own reason, as the library states it (it said "nvcc was not found" whatever the reason) */
        assert_int_not_equal(amp_device_check(AMP_DEVICE_CUDA), AMP_OK);
        const char *why = strstr(amp_last_error(), "without CUDA");
        assert_non_null(why);
        char *nl = strchr(line + 1, '\n');
        if (nl) *nl = '\0';
        if (!strstr(line, why)) fail_msg("the cuda line does not give the library's reason '%s':\n%s", why, line);
        amp_clear_error();
    }
    free(out);
}

static void t_stats_apart(void **state) {
    (void)state;
    char both[1200], cmd[4000];
    snprintf(both, sizeof both, "%s/both.txt", test_tmpdir);
    const char *args = "generate --checkpoint %s --tokens 12 --prompt ROMEO: --stats";
    char a[1400];
    snprintf(a, sizeof a, args, g_gpt);
    snprintf(cmd, sizeof cmd, "%s %s < /dev/null > %s 2>&1", AMP_CLI_PATH, a, both);
    int st = system(cmd);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *out, *err, *all = test_read_file(both, NULL);
    assert_int_equal(test_run_clif(NULL, &out, &err, "%s", a), 0);
    /* the text as it is, then a blank line, then the line */
    size_t n = strlen(out);
    if (strncmp(all, out, n) || strncmp(all + n, "\namp generate: ", 15))
        fail_msg("text:\n%s\ncombined output:\n%s", out, all);
    assert_int_equal(strncmp(err, "amp generate: ", 14), 0); /* alone on stderr: no blank line first */
    test_free_all(all, out, err);
}

static void t_inspect_decimal(void **state) {
    (void)state;
    char *out;
    assert_int_equal(test_run_clif(NULL, &out, NULL, "inspect --no-tensors %s", g_gpt), 0);
    amp_checkpoint *c = amp_checkpoint_open(g_gpt);
    assert_non_null(c);
    const char *keys[] = {"trainer.loss_acc", "trainer.last_loss", "trainer.val_loss"};
    for (int i = 0; i < 3; i++) {
        const char *raw = amp_checkpoint_meta(c, keys[i]);
        assert_non_null(raw);
        char label[64];
        snprintf(label, sizeof label, "  %s ", keys[i]);
        char *p = strstr(out, label);
        if (!p) fail_msg("no %s in:\n%s", keys[i], out);
        p += strlen(label);
        while (*p == ' ') p++;
        char *end;
        double shown = strtod(p, &end), stored = strtod(raw, NULL);
        if (!strncmp(p, "0x", 2) || strncmp(end, "\n", 1) || shown != stored)
            fail_msg("%s: stored %s, shown %.*s (expected the same number in decimal)", keys[i], raw, (int)strcspn(p, "\n"), p);
    }
    if (strstr(out, "0x1.")) fail_msg("a hex float is left:\n%s", out);
    amp_checkpoint_close(c);
    free(out);
}

static void t_predict_gpt(void **state) {
    (void)state;
    char *err;
    int rc = test_run_clif(NULL, NULL, &err, "predict --checkpoint %s --input /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", g_gpt);
    if (rc != 1 || strstr(err, "no \"model\" metadata") || !strstr(err, "gpt") || !strstr(err, "amp generate"))
        fail_msg("exit %d (expected 1, saying it is a GPT and pointing to amp generate):\n%s", rc, err);
    free(err);
    rc = test_run_clif(NULL, NULL, &err, "predict --model gpt --checkpoint %s --input x", g_gpt);
    if (rc != 2 || !strstr(err, "amp generate")) fail_msg("--model gpt: exit %d (expected 2, pointing to amp generate):\n%s", rc, err);
    free(err);
    /* a GPT-2 state_dict (PyTorch's names, no "model" metadata) is told apart by its tensor names */
    char sd[1200];
    snprintf(sd, sizeof sd, "%s/gpt2.safetensors", test_tmpdir);
    const char hdr[] = "{\"transformer.wte.weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    const unsigned long long len = sizeof hdr - 1;
    unsigned char len_le[8];
    for (int i = 0; i < 8; i++) len_le[i] = (unsigned char)(len >> (8 * i));
    const float w = 0.5f;
    FILE *f = fopen(sd, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(len_le, 1, 8, f), 8);
    assert_int_equal(fwrite(hdr, 1, len, f), len);
    assert_int_equal(fwrite(&w, sizeof w, 1, f), 1);
    assert_int_equal(fclose(f), 0);
    rc = test_run_clif(NULL, NULL, &err, "predict --checkpoint %s --input /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", sd);
    if (rc != 1 || !strstr(err, "holds a GPT (GPT-2 tensor names)") || !strstr(err, "amp generate --checkpoint"))
        fail_msg("GPT-2 state_dict: exit %d (expected 1, naming the GPT-2 tensor names and amp generate):\n%s", rc, err);
    free(err);
}

/* Usage errors name the command, the argument and the problem, exit 2. */
static void t_usage_errors(void **state) {
    (void)state;
    char *err;
    free(test_run_cli_expect(2, &err, "help unknown"));
    if (!strstr(err, "amp: help: unknown command 'unknown'")) fail_msg("amp help unknown:\n%s", err);
    free(err);
    const char *bad[] = {"bad", "square,square", "square,", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        free(test_run_cli_expect(2, &err, "bench gemm --sections '%s'", bad[i]));
        char want[200];
        snprintf(want, sizeof want, "amp: bench gemm: --sections '%s': expected distinct names among square,models,batch1", bad[i]);
        if (!strstr(err, want)) fail_msg("--sections '%s': expected \"%s\":\n%s", bad[i], want, err);
        free(err);
    }
}

AMP_TEST_MAIN_FIXTURES(setup, test_tmpdir_teardown, t_help_everywhere, t_bench_parts_listed, t_bench_precision_help,
                       t_version_cuda, t_stats_apart, t_inspect_decimal, t_predict_gpt, t_usage_errors)
