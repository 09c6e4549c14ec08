/* amp compare's table, its deterministic parts (never a timing):
 *   - the speedup column is the median of interleaved rounds with the
 *     lowest and highest round, "1.80x (1.60-2.00)" with lo <= median <= hi,
 *     fp32's own "1.00x"; the notes say how many rounds of how many steps
 *     (it was one run per mode, one after the other: 6.49x then 0.49x for
 *     the same configuration on a busy machine);
 *   - a mode that skipped steps (inf/nan gradients) shows "N of M" in the
 *     skipped column and a note naming it, and the note says when its
 *     accuracy (or validation loss) is worse than fp32's: fp16 with an
 *     initial scale of 1e30 skips every step and learns nothing;
 *   - a mode that skipped nothing gets no such note;
 *   - the note says the GradScaler lowered its scale for a mode with loss
 *     scaling (fp16), "not applied" for the others, whatever the final
 *     scale (it went by the final scale: fp16 from --init-scale 2 with one
 *     skip ends at 1 and was told its updates were merely not applied);
 *   - --speed-rounds / --speed-steps are checked (exit 2, naming them);
 *   - the GPT's table has the same speedup cells.
 * AMP_TEST_PER_CPU_PATH: CTest also runs this file once per CPU path (the
 * amp processes inherit AMP_CPU): the table and its notes on every path.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#define SLICE "--epochs 1 --limit 1024 --test-limit 200 --batch 64 --quiet"

/* the text of column col (0-based) of the table row starting "| label |" */
static void column(const char *out, const char *label, int col, char *buf, size_t n) {
    char start[64];
    snprintf(start, sizeof start, "\n| %s |", label);
    const char *p = strstr(out, start);
    if (!p) fail_msg("no row '%s':\n%s", label, out);
    p++;
    for (int i = 0; i < col; i++) {
        p = strchr(p + 1, '|');
        if (!p) fail_msg("row '%s' has no column %d", label, col);
    }
    const char *e = strchr(p + 1, '|');
    size_t len = (size_t)(e - p - 1);
    while (len && p[1] == ' ') p++, len--;
    while (len && p[len] == ' ') len--;
    snprintf(buf, n, "%.*s", (int)len, p + 1);
}

static void check_speedup(const char *out, const char *label, int col) {
    char c[128];
    column(out, label, col, c, sizeof c);
    double m, lo, hi;
    char tail;
    if (sscanf(c, "%lfx (%lf-%lf%c", &m, &lo, &hi, &tail) != 4 || tail != ')')
        fail_msg("%s: speedup cell '%s' is not 'Mx (LO-HI)'", label, c);
    if (!(lo > 0 && lo <= m && m <= hi)) fail_msg("%s: speedup cell '%s': not lo <= median <= hi", label, c);
}

/* the skipped cell: "0", or "N of M" with a note naming the mode */
static long check_skipped(const char *out, const char *label, int col) {
    char c[128], note[128];
    column(out, label, col, c, sizeof c);
    long k, of;
    snprintf(note, sizeof note, "%s skipped ", label);
    if (!strcmp(c, "0")) {
        if (strstr(out, note)) fail_msg("%s skipped nothing, yet a note says it did:\n%s", label, out);
        return 0;
    }
    if (sscanf(c, "%ld of %ld", &k, &of) != 2 || k < 1 || k > of) fail_msg("%s: skipped cell '%s'", label, c);
    char want[160];
    snprintf(want, sizeof want, "%s skipped %ld of %ld steps", label, k, of);
    if (!strstr(out, want)) fail_msg("no note '%s':\n%s", want, out);
    return k;
}

static void t_mlp(void **s) {
    (void)s;
    char *out, *err;
    int rc = test_run_cli(NULL, "compare --model mlp " SLICE " --speed-rounds 3 --speed-steps 2", &out, &err);
    if (rc != 0) fail_msg("compare: exit %d\n%s", rc, err);
    char c[128];
    column(out, "fp32", 4, c, sizeof c);
    assert_string_equal(c, "1.00x");
    check_speedup(out, "fp16", 4);
    check_speedup(out, "bf16", 4);
    assert_non_null(strstr(out, "3 interleaved rounds of 2 steps"));
    check_skipped(out, "fp16", 7);
    check_skipped(out, "bf16", 7);
    test_free_all(out, err);
}

static void t_skipped_next_to_worse_accuracy(void **s) {
    (void)s;
    char *out, *err;
    int rc = test_run_cli(NULL, "compare --model mlp " SLICE " --speed-rounds 1 --speed-steps 1 --init-scale 1e30", &out, &err);
    if (rc != 0) fail_msg("compare: exit %d\n%s", rc, err);
    char c[128];
    column(out, "fp16", 7, c, sizeof c);
    assert_string_equal(c, "16 of 16");
    check_skipped(out, "fp16", 7);
    /* nothing learned: below fp32, and the note says the skipped steps may be why */
    column(out, "fp16", 2, c, sizeof c);
    assert_true(strtod(c, NULL) < 0);
    assert_non_null(strstr(out, "fp16 skipped 16 of 16 steps"));
    assert_non_null(strstr(out, "its accuracy is"));
    assert_non_null(strstr(out, "below fp32's"));
    /* bf16 has no scaler and skips nothing here */
    assert_int_equal(check_skipped(out, "bf16", 7), 0);
    test_free_all(out, err);
}

static void t_skip_reason(void **s) {
    (void)s;
    char *out, *err;
    /* one poisoned step (the 16th of 16): fp16's scale halves from 2 to 1 */
    int rc = test_run_cli(NULL, "compare --model mlp " SLICE " --speed-rounds 1 --speed-steps 1 --init-scale 2 --inject-nonfinite-every 16",
                          &out, &err);
    if (rc != 0) fail_msg("compare: exit %d\n%s", rc, err);
    char c[128];
    column(out, "fp16", 8, c, sizeof c);
    assert_string_equal(c, "1"); /* the final scale */
    if (!strstr(out, "fp16 skipped 1 of 16 steps (inf/nan gradients; the GradScaler lowered its loss scale each time)"))
        fail_msg("fp16's note does not name the GradScaler:\n%s", out);
    if (!strstr(out, "bf16 skipped 1 of 16 steps (inf/nan gradients; those updates were not applied)"))
        fail_msg("bf16's note:\n%s", out);
    test_free_all(out, err);
}

static void t_bad_options(void **s) {
    (void)s;
    const char *bad[] = {"--speed-rounds 0", "--speed-rounds x", "--speed-rounds 99", "--speed-steps 0", "--speed-steps"};
    for (int i = 0; i < 5; i++) {
        char args[128], *out, *err;
        snprintf(args, sizeof args, "compare --model mlp %s", bad[i]);
        int rc = test_run_cli(NULL, args, &out, &err);
        if (rc != 2 || !strstr(err, "--speed-")) fail_msg("%s: exit %d\n%s", args, rc, err);
        test_free_all(out, err);
    }
}

static void t_gpt(void **s) {
    (void)s;
    char *out, *err;
    int rc = test_run_cli(NULL,
                          "compare --model gpt --n-layer 1 --n-embd 32 --n-head 2 --block-size 32 --batch 4 --max-steps 3 "
                          "--eval-windows 2 --quiet --speed-rounds 2 --speed-steps 1",
                          &out, &err);
    if (rc != 0) fail_msg("compare: exit %d\n%s", rc, err);
    char c[128];
    column(out, "fp32", 4, c, sizeof c);
    assert_string_equal(c, "1.00x");
    check_speedup(out, "fp16 O1", 4);
    check_speedup(out, "bf16 O1", 4);
    check_speedup(out, "bf16 O2", 4);
    assert_non_null(strstr(out, "2 interleaved rounds of 1 step"));
    check_skipped(out, "fp16 O1", 8);
    test_free_all(out, err);
}

AMP_TEST_MAIN(t_mlp, t_skipped_next_to_worse_accuracy, t_skip_reason, t_bad_options, t_gpt)
