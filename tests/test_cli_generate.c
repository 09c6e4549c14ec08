/* amp generate and the GPT loader against bad input, each case reproduced
 * from issue 23:
 *   - a checkpoint of another model is refused naming that model (the name
 *     was printed after the checkpoint was closed: "(model zTc...)"). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static char *g_dir;

static int setup(void **state) {
    (void)state;
    g_dir = test_mkdtemp();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    test_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* Runs `amp ARGS`; fails unless the exit status is want; returns stdout (caller frees), *err stderr when asked. */
static char *amp(int want, char **err, const char *fmt, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *out = NULL, *e = NULL;
    int rc = test_run_cli(NULL, args, &out, &e);
    if (rc != want) fail_msg("amp %s: exit %d (expected %d)\nstdout:\n%.2000s\nstderr:\n%s", args, rc, want, out, e);
    if (err) *err = e;
    else free(e);
    return out;
}

/* defect 6: the model named in the refusal is the checkpoint's */
static void t_other_model_named(void **state) {
    (void)state;
    char dir[1100], *err;
    snprintf(dir, sizeof dir, "%s/mlp", g_dir);
    free(amp(0, NULL, "train --limit 256 --batch 64 --test-limit 100 --quiet --threads 2 --stop-after 1 --checkpoint %s", dir));
    free(amp(1, &err, "generate --checkpoint %s", dir));
    if (!strstr(err, "(model mlp)")) fail_msg("the refusal does not name the checkpoint's model mlp:\n%s", err);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(t_other_model_named),
    };
    amp_test_prepare();
    return cmocka_run_group_tests(tests, setup, teardown);
}
