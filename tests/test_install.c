/* make install: headers, libraries, amp.pc and the CLI land under a prefix,
 * and a program outside the tree builds with `pkg-config --cflags --libs amp`
 * (static and shared) and runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static int sh(const char *cmd, char **out) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s > /tmp/amp_install_out.txt 2>&1", cmd);
    int rc = system(buf);
    if (out) *out = test_read_file("/tmp/amp_install_out.txt", NULL);
    return rc;
}

static void t_install(void **s) {
    (void)s;
    if (getenv("AMP_ASAN")) { /* the sanitizer build's libraries need -fsanitize to link against */
        print_message("skipped under make test-asan\n");
        skip();
    }
    char *dir = test_mkdtemp(), cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "cmake --install '%s' --prefix '%s/prefix'", AMP_BINARY_DIR, dir);
    if (sh(cmd, &out) != 0) fail_msg("%s failed:\n%s", cmd, out);
    free(out);
    const char *files[] = {"include/amp/amp.h", "include/amp/scaler.h", "lib/libamp.a", "lib/libamp.so", "lib/pkgconfig/amp.pc",
                           "bin/amp"};
    for (int i = 0; i < 6; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/prefix/%s", dir, files[i]);
        char *c = test_read_file(p, NULL);
        if (!c) fail_msg("%s was not installed", files[i]);
        free(c);
    }
    char pc[1024];
    snprintf(pc, sizeof pc, "%s/prefix/lib/pkgconfig/amp.pc", dir);
    char *pcs = test_read_file(pc, NULL);
    char want[1100];
    snprintf(want, sizeof want, "prefix=%s/prefix\n", dir);
    if (!strstr(pcs, want)) fail_msg("amp.pc does not name the install prefix:\n%s", pcs);
    free(pcs);
    for (int shared = 0; shared < 2; shared++) {
        /* static: libamp.a named explicitly; shared: -lamp with an rpath */
        if (shared)
            snprintf(cmd, sizeof cmd,
                     "PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' sh -c 'cc \"%s/tests/install/use_amp.c\" -o \"%s/use1\" "
                     "$(pkg-config --cflags --libs amp) -Wl,-rpath,%s/prefix/lib && \"%s/use1\"'",
                     dir, AMP_SOURCE_DIR, dir, dir, dir);
        else
            snprintf(cmd, sizeof cmd,
                     "PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' sh -c 'cc \"%s/tests/install/use_amp.c\" -o \"%s/use0\" "
                     "$(pkg-config --cflags amp) %s/prefix/lib/libamp.a $(pkg-config --libs-only-l --static amp | sed s/-lamp//) "
                     "-fopenmp && \"%s/use0\"'",
                     dir, AMP_SOURCE_DIR, dir, dir, dir);
        int rc = sh(cmd, &out);
        if (rc != 0) fail_msg("building against the installed amp (%s) failed:\n%s\n%s", shared ? "shared" : "static", cmd, out);
        /* the program prints the autocast output dtype and value, then the error text */
        if (!strstr(out, "bf16 3")) fail_msg("unexpected output:\n%s", out);
        if (!strstr(out, "amp_matmul: [2,3] @ [2,3]: inner dimensions 3 and 2 differ")) fail_msg("unexpected output:\n%s", out);
        free(out);
    }
    test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(t_install)};
    return amp_test_run(tests);
}
