/* Every note the CLI prints about the CPU comes from the CPU and the active
 * path (issue 23): `amp bench gpt` on an AVX2-only CPU said "amp's bf16
 * matrix products use vdpbf16ps on this CPU path" (they are widened there),
 * and the fp16 note said "no fp16 dot product on this CPU", true of amp's
 * paths but not of a CPU with AVX512_FP16. Under the tables of `amp bench
 * gpt` and `amp bench train`:
 *   - "amp's matrix products on cpu path P:" names the active path, and the
 *     three lines under it are the precision notes of that path
 *     (test_precision_note: the same lines as train's summary and compare);
 *   - vdpbf16ps is named only on the avx512bf16 path;
 *   - the PyTorch sentence follows the CPU (AVX512_BF16 or not), not the
 *     path: AMP_CPU does not change what PyTorch runs.
 * Under `amp compare --model gpt`'s table the same three lines follow "cpu
 * path P). What each precision costs here:" (it printed a fixed "matrix
 * products in bf16 (vdpbf16ps where the CPU has it)" on every path).
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes inherit AMP_CPU), so each path's notes are checked on every
 * machine that has it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* Runs amp ARGS and checks that its stdout holds head (with %s for the
 * active path's name) followed by the path's three precision notes, and no
 * vdpbf16ps below the avx512bf16 path; returns stdout. */
static char *expect_notes(const char *args, const char *head) {
    char *out, *err;
    int rc = test_run_cli(NULL, args, &out, &err);
    if (rc != 0) fail_msg("amp %s: exit %d\n%s", args, rc, err);
    free(err);
    const char *path = amp_cpu_path_name(amp_cpu_active());
    char want[1000];
    snprintf(want, sizeof want, head, path);
    const char *which[] = {"fp32", "fp16", "bf16"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(want);
        snprintf(want + n, sizeof want - n, "  - %s\n", test_precision_note(which[i], NULL));
    }
    if (!strstr(out, want)) fail_msg("amp %s on cpu path %s: expected the notes%s\nin\n%s", args, path, want, out);
    if (amp_cpu_active() < AMP_CPU_AVX512BF16 && strstr(out, "vdpbf16ps"))
        fail_msg("amp %s on cpu path %s names vdpbf16ps:\n%s", args, path, out);
    return out;
}

static void check_notes(const char *args) {
    char *out = expect_notes(args, "\namp's matrix products on cpu path %s:\n");
    const char *torch = amp_cpu_supported(AMP_CPU_AVX512BF16) ? "its bf16 autocast runs oneDNN's AVX512_BF16 kernels on this CPU."
                                                              : "this CPU has no AVX512_BF16, so its bf16 autocast has no bf16 "
                                                                "arithmetic either.";
    if (!strstr(out, torch)) fail_msg("amp %s: expected \"%s\" in\n%s", args, torch, out);
    free(out);
}

static void t_bench_gpt_notes(void **s) {
    (void)s;
    check_notes("bench gpt --preset tiny --steps 1 --rounds 1 --no-torch --no-llmc");
}

static void t_bench_train_notes(void **s) {
    (void)s;
    check_notes("bench train --model mlp --batch 32 --steps 1 --rounds 1 --no-torch");
}

static void t_compare_gpt_notes(void **s) {
    (void)s;
    free(expect_notes("compare --model gpt --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch 4 --threads 2 --max-steps 2 "
                      "--eval-windows 2 --speed-rounds 1 --speed-steps 1 --quiet",
                      "cpu path %s). What each precision costs here:\n"));
}

AMP_TEST_MAIN(t_bench_gpt_notes, t_bench_train_notes, t_compare_gpt_notes)
