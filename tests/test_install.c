/* make install, as a user runs it: `make install PREFIX=<temporary prefix>`
 * from the source tree builds (in its own build directory) and installs
 * only the library, the headers, the pkg-config files and the CLI; then a
 * program outside the tree is built with the README's three lines for a
 * non-system prefix (PKG_CONFIG_PATH, pkg-config, an rpath) and started
 * without LD_LIBRARY_PATH; and again linked statically through amp-static.pc
 * (libamp.a inside the program, nothing of amp loaded at run time). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"

static int sh(const char *cmd, char **out) {
    char buf[8192];
    snprintf(buf, sizeof buf, "%s > /tmp/amp_install_out.%d.txt 2>&1", cmd, (int)getpid());
    int rc = system(buf);
    if (out) {
        snprintf(buf, sizeof buf, "/tmp/amp_install_out.%d.txt", (int)getpid());
        *out = test_read_file(buf, NULL);
        remove(buf);
    }
    return rc;
}

static bool exists(const char *dir, const char *rel) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    return stat(p, &st) == 0;
}

/* The README's lines, with $HOME/.local replaced by prefix. */
static const char *README_LINES[] = {
    "make install PREFIX=$HOME/.local",
    "export PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig",
    "cc my.c -o my $(pkg-config --cflags --libs amp) -Wl,-rpath,$(pkg-config --variable=libdir amp)",
    "cc my.c -o my $(pkg-config --cflags --libs amp-static)",
};

static void t_install(void **s) {
    (void)s;
    if (getenv("AMP_ASAN")) { /* the sanitizer build's libraries need -fsanitize to link against */
        print_message("skipped under make test-asan\n");
        skip();
    }
    /* the README says exactly this */
    char rp[1024];
    snprintf(rp, sizeof rp, "%s/README.md", AMP_SOURCE_DIR);
    char *readme = test_read_file(rp, NULL);
    assert_non_null(readme);
    for (int i = 0; i < 4; i++)
        if (!strstr(readme, README_LINES[i])) fail_msg("README.md lacks the line: %s", README_LINES[i]);
    free(readme);

    char *dir = test_mkdtemp(), cmd[6000], *out = NULL;
    /* 1. make install into a fresh prefix, from the source tree, in its own build directory */
    snprintf(cmd, sizeof cmd, "cd '%s' && make install PREFIX='%s/prefix' BUILD_INSTALL='%s/build' JOBS=2", AMP_SOURCE_DIR, dir, dir);
    if (sh(cmd, &out) != 0) fail_msg("%s failed:\n%s", cmd, out);
    /* it installs cmocka or the dataset nowhere and builds no test, benchmark or example */
    if (strstr(out, "libcmocka") || strstr(out, "fashion")) fail_msg("make install touched test dependencies:\n%s", out);
    free(out);
    char b[1200];
    snprintf(b, sizeof b, "%s/build", dir);
    const char *not_built[] = {"test_tensor", "test_install", "typical_loop", "bench_gemm", "libamp_testsupport.a"};
    for (int i = 0; i < 5; i++)
        if (exists(b, not_built[i])) fail_msg("make install built %s", not_built[i]);
    char p[1200];
    snprintf(p, sizeof p, "%s/prefix", dir);
    const char *files[] = {"include/amp/amp.h", "include/amp/nn.h", "include/amp/initialize.h", "lib/libamp.a", "lib/libamp.so",
                           "lib/pkgconfig/amp.pc", "lib/pkgconfig/amp-static.pc", "bin/amp"};
    for (int i = 0; i < 8; i++)
        if (!exists(p, files[i])) fail_msg("%s was not installed", files[i]);
    snprintf(cmd, sizeof cmd, "find '%s' -type f | sed 's|%s/||' | grep -v '^include/amp/[a-z]*\\.h$' | grep -v '^share/amp/gpt2/' | sort", p, p);
    sh(cmd, &out);
    const char *expect = "bin/amp\nlib/libamp.a\nlib/libamp.so.0.1.0\nlib/pkgconfig/amp-static.pc\nlib/pkgconfig/amp.pc\n";
    if (strcmp(out, expect)) fail_msg("installed files (besides the headers):\n%sexpected:\n%s", out, expect);
    free(out);
    char pc[1300];
    snprintf(pc, sizeof pc, "%s/lib/pkgconfig/amp.pc", p);
    char *pcs = test_read_file(pc, NULL);
    char want[1300];
    snprintf(want, sizeof want, "prefix=%s\n", p);
    if (!strstr(pcs, want)) fail_msg("amp.pc does not name the install prefix:\n%s", pcs);
    free(pcs);

    /* 2. the README's lines: a program built with pkg-config starts without LD_LIBRARY_PATH */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && cp '%s/tests/install/use_amp.c' my.c && env -u LD_LIBRARY_PATH HOME='%s' sh -c '"
             "export PKG_CONFIG_PATH=$HOME/prefix/lib/pkgconfig && "
             "cc my.c -o my $(pkg-config --cflags --libs amp) -Wl,-rpath,$(pkg-config --variable=libdir amp) && ./my && "
             "ldd ./my | grep libamp'",
             dir, AMP_SOURCE_DIR, dir);
    if (sh(cmd, &out) != 0) fail_msg("the README's lines failed:\n%s\n%s", cmd, out);
    if (!strstr(out, "bf16 3")) fail_msg("unexpected output:\n%s", out);
    if (!strstr(out, "amp_matmul: [2,3] @ [2,3]: inner dimensions 3 and 2 differ")) fail_msg("unexpected output:\n%s", out);
    if (!strstr(out, "prefix/lib/libamp.so")) fail_msg("not the installed libamp.so:\n%s", out);
    free(out);

    /* 3. statically: libamp.a inside the program */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && env -u LD_LIBRARY_PATH HOME='%s' sh -c '"
             "export PKG_CONFIG_PATH=$HOME/prefix/lib/pkgconfig && "
             "cc my.c -o my $(pkg-config --cflags --libs amp-static) && ./my && ldd ./my'",
             dir, dir);
    if (sh(cmd, &out) != 0) fail_msg("static link failed:\n%s\n%s", cmd, out);
    if (!strstr(out, "bf16 3")) fail_msg("unexpected output:\n%s", out);
    if (strstr(out, "libamp")) fail_msg("the static program still loads libamp:\n%s", out);
    free(out);

    /* 4. the installed command runs */
    snprintf(cmd, sizeof cmd, "env -u LD_LIBRARY_PATH '%s/bin/amp' formats --convert 70000", p);
    if (sh(cmd, &out) != 0) fail_msg("%s failed:\n%s", cmd, out);
    if (!strstr(out, "65504") && !strstr(out, "inf")) fail_msg("unexpected amp formats output:\n%s", out);
    free(out);
    test_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(t_install)};
    return amp_test_run(tests);
}
