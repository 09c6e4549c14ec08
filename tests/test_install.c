/* make install, as a user runs it, and README.md's lines run verbatim.
 *
 * t_install: the lines of README.md's "Using the library" blocks are read from
 * README.md and run as they are (only $HOME becomes a directory of the test):
 * `make install PREFIX=$HOME/.local` from the source tree, which builds (in
 * its own build directory) and installs the library, the headers, the
 * pkg-config files and the CLI; then the README's `cc my.c ...` line builds
 * tests/install/use_amp.c as my.c outside the tree and starts it without
 * LD_LIBRARY_PATH; and again with the static line (libamp.a inside the
 * program). examples/README.md must give the same line.
 *
 * The install's build directory is kept in the test's build tree
 * (AMP_BINARY_DIR/test_install.d/build), as a user's build-install/ is kept
 * between two `make install`: the first run compiles the library once
 * (with the suite's compiler launcher, ccache, when the suite has one),
 * later runs only what changed. The prefix is new each time.
 *
 * t_make_passes_cmake_flags: every Makefile target that configures passes
 * CMAKE_FLAGS to CMake (`make -n`, nothing is built).
 *
 * t_pc_matches_build: amp-static.pc names MPI only in a build with MPI and
 * the CUDA runtime only in a build with CUDA (configure only); the same
 * configures' compile commands give every C file -ffp-contract=off (clang
 * fuses a * b + c into an FMA by default, which the scalar build cannot do,
 * so the CPU paths would round differently) and no CUDA file gets it.
 *
 * t_tsan_needs_clang: -DAMP_TSAN=ON with gcc is refused at configure time,
 * saying why (libgomp is not instrumented: TSan would report races in every
 * parallel kernel). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_support.h"

#ifndef AMP_C_LAUNCHER
#define AMP_C_LAUNCHER ""
#endif

/* Runs cmd with sh, stdout and stderr into *out (when out is not NULL). */
static int sh(const char *cmd, char **out) {
    char path[256], *buf = malloc(strlen(cmd) + 300);
    assert_non_null(buf);
    snprintf(path, sizeof path, "/tmp/amp_install_out.%d.txt", (int)getpid());
    sprintf(buf, "( %s ) > %s 2>&1", cmd, path);
    int rc = system(buf);
    free(buf);
    if (out) {
        *out = test_read_file(path, NULL);
        if (!*out) *out = strdup("");
    }
    remove(path);
    return rc;
}

/* Fails with msg after printing the end of a command's output (cmocka cuts
 * long messages). */
#define fail_out(out, ...)                                                    \
    do {                                                                      \
        size_t n_ = strlen(out);                                              \
        fprintf(stderr, "%s\n", n_ > 6000 ? (out) + n_ - 6000 : (out));       \
        fail_msg(__VA_ARGS__);                                                \
    } while (0)

static bool exists(const char *dir, const char *rel) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    return stat(p, &st) == 0;
}

static char *read_rel(const char *dir, const char *rel) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    char *s = test_read_file(p, NULL);
    if (!s) fail_msg("cannot read %s", p);
    return s;
}

/* The text of the n-th (0-based) ```sh block after the heading `section`
 * in md (malloc'ed, without the fences). */
static char *sh_block(const char *md, const char *section, int n) {
    const char *p = strstr(md, section);
    if (!p) fail_msg("README.md has no section '%s'", section);
    for (int i = 0; i <= n; i++) {
        p = strstr(p, "```sh\n");
        if (!p) fail_msg("README.md's '%s' has fewer than %d sh blocks", section, n + 1);
        p += 6;
    }
    const char *e = strstr(p, "```");
    assert_non_null(e);
    return strndup(p, (size_t)(e - p));
}

/* The line of block that starts with prefix (malloc'ed, no newline). */
static char *line_starting(const char *block, const char *prefix) {
    for (const char *p = block; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (!strncmp(p, prefix, strlen(prefix))) return strndup(p, n);
        p += n + (e != NULL);
    }
    fail_msg("no line starting with '%s' in:\n%s", prefix, block);
    return NULL;
}

/* s with every "$HOME" replaced by home (malloc'ed). */
static char *with_home(const char *s, const char *home) {
    char *r = malloc(strlen(s) * (strlen(home) + 1) + 1), *w = r;
    assert_non_null(r);
    while (*s) {
        if (!strncmp(s, "$HOME", 5)) {
            w += sprintf(w, "%s", home);
            s += 5;
        } else {
            *w++ = *s++;
        }
    }
    *w = 0;
    return r;
}

static void skip_under_asan(void) {
    if (getenv("AMP_ASAN")) { /* the sanitizer build's libraries need -fsanitize to link against */
        print_message("skipped under make test-asan\n");
        skip();
    }
}

/* The environment of a user's shell: nothing of the make or ctest that runs
 * the suite (MAKEFLAGS would carry its variables and jobserver into make
 * install), no LD_LIBRARY_PATH. */
#define CLEAN_ENV "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u LD_LIBRARY_PATH -u CMAKE_FLAGS "

/* Is there an NVIDIA GPU here? (the ways a driver shows one; CMakeLists.txt's
 * AMP_CUDA=AUTO must build the CUDA backend only then) */
static bool gpu_here(void) {
    return sh("ls -d /dev/nvidia[0-9]* /proc/driver/nvidia/gpus/* > /dev/null 2>&1 || "
              "nvidia-smi -L 2> /dev/null | grep -q '^GPU [0-9]*:'",
              NULL) == 0;
}

static void t_install(void **s) {
    (void)s;
    skip_under_asan();
    char *readme = read_rel(AMP_SOURCE_DIR, "README.md");
    char *shared = sh_block(readme, "## Using the library", 0), *stat_block = sh_block(readme, "## Using the library", 1);
    char *make_line = line_starting(shared, "make install PREFIX=");
    char *export_line = line_starting(shared, "export PKG_CONFIG_PATH=");
    char *cc_line = line_starting(shared, "cc my.c -o my ");
    char *cc_static = line_starting(stat_block, "cc my.c -o my ");
    if (!strstr(make_line, "$HOME")) fail_msg("README's install line is not into $HOME: %s", make_line);
    if (!strstr(cc_static, "amp-static")) fail_msg("README's static line does not use amp-static.pc: %s", cc_static);
    test_free_all(shared, stat_block);

    /* examples/README.md gives the same line for FILE.c */
    char *ex = read_rel(AMP_SOURCE_DIR, "examples/README.md");
    const char *tail = cc_line + strlen("cc my.c -o my ");
    char want[2048];
    snprintf(want, sizeof want, "cc FILE.c -o FILE %s", tail);
    if (!strstr(ex, want)) fail_msg("examples/README.md lacks README.md's line:\n%s", want);
    free(ex);

    char root[1024], home[1200], build[1200], prefix[1300], cmd[16384], *out = NULL;
    snprintf(root, sizeof root, "%s/test_install.d", AMP_BINARY_DIR);
    snprintf(home, sizeof home, "%s/home", root);
    snprintf(build, sizeof build, "%s/build", root);
    snprintf(prefix, sizeof prefix, "%s/.local", home);
    test_rmtree(home);
    mkdir(root, 0755);
    assert_int_equal(mkdir(home, 0755), 0);
    char *mk = with_home(make_line, home), *ex_line = with_home(export_line, home);

    /* 1. make install into a new prefix, from the source tree */
    char flags[600] = "";
    if (*AMP_C_LAUNCHER) snprintf(flags, sizeof flags, "-DCMAKE_C_COMPILER_LAUNCHER=%s", AMP_C_LAUNCHER);
    snprintf(cmd, sizeof cmd, "cd '%s' && " CLEAN_ENV "BUILD_INSTALL='%s' JOBS=$(nproc) CMAKE_FLAGS='%s' %s", AMP_SOURCE_DIR, build,
             flags, mk);
    if (sh(cmd, &out) != 0) fail_out(out, "%s failed", cmd);
    /* it installs cmocka or the dataset nowhere and builds no test, benchmark or example */
    if (strstr(out, "libcmocka") || strstr(out, "fashion")) fail_out(out, "make install touched test dependencies");
    const char *not_built[] = {"test_tensor", "test_install", "typical_loop", "bench_gemm", "libamp_testsupport.a"};
    for (int i = 0; i < 5; i++)
        if (exists(build, not_built[i])) fail_msg("make install built %s", not_built[i]);
    const char *files[] = {"include/amp/amp.h", "include/amp/nn.h", "include/amp/initialize.h", "lib/libamp.a", "lib/libamp.so",
                           "lib/pkgconfig/amp.pc", "lib/pkgconfig/amp-static.pc", "bin/amp", "share/amp/gpt2/vocab.bpe"};
    for (int i = 0; i < 9; i++)
        if (!exists(prefix, files[i])) fail_msg("%s was not installed", files[i]);
    char *list = NULL;
    snprintf(cmd, sizeof cmd, "find '%s' -type f | sed 's|%s/||' | grep -v '^include/amp/[a-z]*\\.h$' | grep -v '^share/amp/gpt2/' | sort",
             prefix, prefix);
    sh(cmd, &list);
    const char *expect = "bin/amp\nlib/libamp.a\nlib/libamp.so.0.1.0\nlib/pkgconfig/amp-static.pc\nlib/pkgconfig/amp.pc\n";
    if (strcmp(list, expect)) fail_msg("installed files (besides the headers):\n%sexpected:\n%s", list, expect);
    free(list);
    char *pc = read_rel(prefix, "lib/pkgconfig/amp.pc"), *pcs = read_rel(prefix, "lib/pkgconfig/amp-static.pc");
    snprintf(want, sizeof want, "prefix=%s\n", prefix);
    if (!strstr(pc, want) || !strstr(pcs, want)) fail_msg("the .pc files do not name the install prefix:\n%s%s", pc, pcs);

    /* the configure said whether it built the CUDA backend and why; AUTO
     * builds it only where a GPU is */
    bool cuda = strstr(out, "amp: CUDA backend ON (") != NULL;
    if (!cuda && !strstr(out, "amp: CUDA backend OFF (AMP_CUDA=AUTO: "))
        fail_out(out, "make install did not say whether it built the CUDA backend and why");
    if (!gpu_here()) {
        if (cuda) fail_out(out, "AMP_CUDA=AUTO built the CUDA backend on a machine without a GPU");
        if (!strstr(out, "no NVIDIA GPU") || !strstr(out, "-DAMP_CUDA=ON builds it anyway"))
            fail_out(out, "the configure does not say why CUDA was left out and how to build it");
    }
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.cu.o' | head -1", build);
    char *cu = NULL;
    sh(cmd, &cu);
    if (cuda != (*cu != 0)) fail_msg("CUDA backend %s, but .cu objects: '%s'", cuda ? "ON" : "OFF", cu);
    free(cu);
    /* amp-static.pc names the CUDA runtime and MPI exactly when they were built in */
    if (cuda != (strstr(pcs, "-lcudart_static") != NULL)) fail_msg("CUDA %s, amp-static.pc:\n%s", cuda ? "ON" : "OFF", pcs);
    bool mpi = strstr(out, "amp: data parallel over MPI: ON") != NULL;
    if (!mpi && !strstr(out, "amp: data parallel over MPI: OFF")) fail_out(out, "make install did not say whether MPI is in");
    if (mpi != (strstr(pcs, "mpi") != NULL)) fail_msg("MPI %s, amp-static.pc:\n%s", mpi ? "ON" : "OFF", pcs);
    test_free_all(pc, pcs, out);

    /* 2. README's lines: my.c built with pkg-config starts without LD_LIBRARY_PATH */
    snprintf(cmd, sizeof cmd, "cp '%s/tests/install/use_amp.c' '%s/my.c' && cd '%s' && " CLEAN_ENV "sh -c 'set -e; %s; %s; ./my; ldd ./my'",
             AMP_SOURCE_DIR, home, home, ex_line, cc_line);
    if (sh(cmd, &out) != 0) fail_out(out, "README.md's lines failed:\n%s", cmd);
    if (!strstr(out, "bf16 3\n")) fail_out(out, "unexpected output");
    if (!strstr(out, "amp_matmul: [2,3] @ [2,3]: inner dimensions 3 and 2 differ")) fail_out(out, "unexpected output");
    if (!strstr(out, "exp 2.7183\n")) fail_out(out, "unexpected output");
    /* the installed library finds the installed vocabulary, not the source tree's */
    snprintf(want, sizeof want, "vocab %s/share/amp/gpt2\n", prefix);
    if (!strstr(out, want)) fail_out(out, "the installed library looks for the GPT-2 vocabulary elsewhere (want '%s')", want);
    if (!cuda && !gpu_here() && !strstr(out, "amp was built without CUDA (no NVIDIA GPU was found when it was configured"))
        fail_out(out, "the library does not say why it has no CUDA");
    snprintf(want, sizeof want, "%s/lib/libamp.so.0 ", prefix);
    if (!strstr(out, want)) fail_out(out, "not the installed libamp.so");
    free(out);

    /* 3. the static line: libamp.a inside the program */
    snprintf(cmd, sizeof cmd, "cd '%s' && rm -f my && " CLEAN_ENV "sh -c 'set -e; %s; %s; ./my; ldd ./my'", home, ex_line, cc_static);
    if (sh(cmd, &out) != 0) fail_out(out, "README.md's static line failed:\n%s", cmd);
    if (!strstr(out, "bf16 3\n") || !strstr(out, "exp 2.7183\n")) fail_out(out, "unexpected output");
    if (strstr(out, "libamp")) fail_out(out, "the static program still loads libamp");
    free(out);

    /* 4. the installed command runs */
    snprintf(cmd, sizeof cmd, CLEAN_ENV "'%s/bin/amp' formats --convert 70000", prefix);
    if (sh(cmd, &out) != 0) fail_out(out, "%s failed", cmd);
    if (!strstr(out, "65504") && !strstr(out, "inf")) fail_out(out, "unexpected amp formats output");
    free(out);

    test_rmtree(home);
    test_free_all(mk, ex_line, make_line, export_line, cc_line, cc_static, readme);
}

static void t_make_passes_cmake_flags(void **s) {
    (void)s;
    /* every target of the Makefile (its .PHONY list) */
    char *mf = read_rel(AMP_SOURCE_DIR, "Makefile");
    char *phony = strstr(mf, "\n.PHONY:");
    assert_non_null(phony);
    phony += 8;
    char *eol = strchr(phony, '\n');
    assert_non_null(eol);
    *eol = 0;
    int configuring = 0;
    for (char *t = strtok(phony, " \t"); t; t = strtok(NULL, " \t")) {
        char cmd[2048], *out = NULL;
        /* -n prints the commands; sub-makes run, with -n too */
        snprintf(cmd, sizeof cmd, "cd '%s' && " CLEAN_ENV "make -n %s CMAKE_FLAGS='-DAMP_PROBE_A=1 -DAMP_PROBE_B=2' PREFIX=/nonexistent",
                 AMP_SOURCE_DIR, t);
        if (sh(cmd, &out) != 0) fail_out(out, "%s failed", cmd);
        /* one logical line per command (a recipe line may continue with \) */
        for (char *c = out; (c = strstr(c, "\\\n"));) memmove(c, c + 2, strlen(c + 2) + 1);
        for (char *l = out; *l;) {
            char *e = strchr(l, '\n');
            if (e) *e = 0;
            if (strstr(l, "cmake -S")) {
                configuring++;
                if (!strstr(l, "-DAMP_PROBE_A=1 -DAMP_PROBE_B=2")) fail_msg("make %s configures without CMAKE_FLAGS:\n%s", t, l);
            }
            if (!e) break;
            l = e + 1;
        }
        free(out);
    }
    if (configuring < 4) fail_msg("only %d configure commands among the Makefile's targets", configuring);
    free(mf);
}

/* Every compile command of compile_commands.json in dir: the C files'
 * carry -ffp-contract=off, the CUDA files' do not (nvcc would refuse it).
 * Returns how many C files were seen. */
static int check_fp_contract(const char *dir) {
    char *js = read_rel(dir, "compile_commands.json");
    int nc = 0;
    for (char *e = js; (e = strstr(e, "\"command\": \""));) {
        char *cmd = e + 12, *end = strstr(cmd, "\",\n");
        char *file = strstr(cmd, "\"file\": \"");
        assert_non_null(end);
        assert_non_null(file);
        *end = 0;
        file += 9;
        char *fend = strchr(file, '"');
        assert_non_null(fend);
        *fend = 0;
        size_t fl = strlen(file);
        bool c = fl > 2 && !strcmp(file + fl - 2, ".c"), cu = fl > 3 && !strcmp(file + fl - 3, ".cu");
        if (c && !strstr(cmd, " -ffp-contract=off")) fail_msg("%s is compiled without -ffp-contract=off:\n%s", file, cmd);
        if (cu && strstr(cmd, "-ffp-contract")) fail_msg("%s (CUDA) is compiled with a C flag:\n%s", file, cmd);
        nc += c;
        e = fend + 1;
    }
    free(js);
    return nc;
}

/* Configures (builds nothing) in AMP_BINARY_DIR/test_install.d/NAME, checks
 * its compile commands (check_fp_contract) and returns the amp-static.pc it
 * would install (malloc'ed). */
static char *configure_pc(const char *name, const char *flags) {
    char dir[1200], cmd[4096], *out = NULL;
    snprintf(dir, sizeof dir, "%s/test_install.d", AMP_BINARY_DIR);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/test_install.d/%s", AMP_BINARY_DIR, name);
    snprintf(cmd, sizeof cmd, "cmake -S '%s' -B '%s' -DAMP_BUILD_TESTS=OFF -DAMP_BUILD_EXAMPLES=OFF "
             "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON %s",
             AMP_SOURCE_DIR, dir, flags);
    if (sh(cmd, &out) != 0) fail_out(out, "%s failed", cmd);
    free(out);
    if (check_fp_contract(dir) < 50) fail_msg("%s: fewer C files than the library has in compile_commands.json", dir);
    return read_rel(dir, "amp-static.pc.in");
}

/* -DAMP_TSAN=ON with gcc: refused, saying why (configure only). */
static void t_tsan_needs_clang(void **s) {
    (void)s;
    if (sh("command -v gcc", NULL) != 0) {
        print_message("no gcc here: nothing to refuse\n");
        return;
    }
    char dir[1200], cmd[4096], *out = NULL;
    snprintf(dir, sizeof dir, "%s/test_install.d", AMP_BINARY_DIR);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/test_install.d/tsan-gcc", AMP_BINARY_DIR);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && " CLEAN_ENV "CC=gcc cmake -S '%s' -B '%s' -DAMP_TSAN=ON -DAMP_CUDA=OFF "
             "-DAMP_BUILD_TESTS=OFF -DAMP_BUILD_BENCH=OFF -DAMP_BUILD_EXAMPLES=OFF", dir, AMP_SOURCE_DIR, dir);
    int rc = sh(cmd, &out);
    if (rc == 0 || !strstr(out, "AMP_TSAN needs clang") || !strstr(out, "libgomp"))
        fail_out(out, "%s: exit %d; expected a refusal naming clang and libgomp", cmd, rc);
    free(out);
}

static void t_pc_matches_build(void **s) {
    (void)s;
    skip_under_asan();
    char *pc = configure_pc("pc-plain", "-DAMP_WITH_MPI=OFF -DAMP_CUDA=OFF");
    if (strstr(pc, "mpi") || strstr(pc, "cuda") || !strstr(pc, "Requires: zlib libcjson\n") ||
        !strstr(pc, "Libs: ${libdir}/libamp.a -fopenmp -lm -lpthread\n") ||
        !strstr(pc, "Description: amp linked statically (libamp.a); zlib, cJSON, OpenMP as shared libraries\n"))
        fail_msg("amp-static.pc of a build without MPI and CUDA:\n%s", pc);
    free(pc);
    if (sh("command -v nvcc", NULL) != 0) {
        print_message("no nvcc: the CUDA build's amp-static.pc is not checked\n");
        return;
    }
    /* -DAMP_CUDA=ON needs no GPU */
    pc = configure_pc("pc-cuda", "-DAMP_CUDA=ON -DAMP_CUDA_ARCHITECTURES=90");
    if (!strstr(pc, "-lcudart_static -ldl -lrt -lstdc++\n") || !strstr(pc, "the CUDA runtime (cudart_static) and the kernels for sm_90"))
        fail_msg("amp-static.pc of a CUDA build:\n%s", pc);
    free(pc);
}

AMP_TEST_MAIN(t_make_passes_cmake_flags, t_pc_matches_build, t_tsan_needs_clang, t_install)
