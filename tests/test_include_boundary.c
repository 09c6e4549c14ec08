/* The boundary between ops and devices (docs/ARCHITECTURE.md): no file
 * under src/ outside src/kernels/ includes a CPU or CUDA kernel header
 * ("kernels/cpu/..." or "kernels/cuda/..."). Ops reach a device only through
 * the backend's entries (kernels/backend.h); the CLI's benchmarks reach the
 * CPU's GEMM paths through the one documented header kernels/cpu_paths.h.
 * Tests under tests/ may include kernel headers (they test kernels
 * directly). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test_support.h"

/* The path of the first forbidden #include in text (a kernels/cpu/ or
 * kernels/cuda/ header, whatever the spacing of the directive and whether
 * it is written with "" or <>), or NULL: *line gets its line number. */
static const char *forbidden_include(const char *text, int *line, char *what, size_t what_len) {
    int ln = 1;
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *q = p;
        while (q < p + len && (*q == ' ' || *q == '\t')) q++;
        if (q < p + len && *q == '#') {
            q++;
            while (q < p + len && (*q == ' ' || *q == '\t')) q++;
            if ((size_t)(p + len - q) > 7 && !strncmp(q, "include", 7)) {
                q += 7;
                while (q < p + len && (*q == ' ' || *q == '\t')) q++;
                if (q < p + len && (*q == '"' || *q == '<')) {
                    const char *s = q + 1;
                    while (!strncmp(s, "../", 3) || !strncmp(s, "./", 2)) s += s[1] == '/' ? 2 : 3;
                    if (!strncmp(s, "src/", 4)) s += 4;
                    if (!strncmp(s, "kernels/cpu/", 12) || !strncmp(s, "kernels/cuda/", 13)) {
                        size_t n = 0;
                        while (s + n < p + len && s[n] != '"' && s[n] != '>' && n + 1 < what_len) n++;
                        memcpy(what, s, n);
                        what[n] = 0;
                        *line = ln;
                        return what;
                    }
                }
            }
        }
        if (!eol) break;
        p = eol + 1;
        ln++;
    }
    return NULL;
}

typedef struct {
    int files;          /* C sources and headers read */
    int bad;            /* forbidden includes found */
    char report[8192];  /* "file:line: header" lines */
} scan_state;

static void scan_dir(const char *root, const char *rel, scan_state *s) {
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/%s", root, rel);
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char sub[1024], path[3072];
        snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        snprintf(path, sizeof path, "%s/%s", root, sub);
        struct stat stt;
        if (stat(path, &stt) != 0) fail_msg("cannot stat %s", path);
        if (S_ISDIR(stt.st_mode)) {
            if (strcmp(sub, "src/kernels") != 0) scan_dir(root, sub, s); /* the kernels own their headers */
            continue;
        }
        size_t len = strlen(e->d_name);
        const char *ext = strrchr(e->d_name, '.');
        if (!ext || len < 2 || (strcmp(ext, ".c") && strcmp(ext, ".h") && strcmp(ext, ".inc") && strcmp(ext, ".cu")))
            continue;
        char *text = test_read_file(path, NULL);
        if (!text) fail_msg("cannot read %s", path);
        s->files++;
        int line;
        char what[256];
        if (forbidden_include(text, &line, what, sizeof what)) {
            s->bad++;
            size_t used = strlen(s->report);
            snprintf(s->report + used, sizeof s->report - used, "  %s:%d includes \"%s\"\n", sub, line, what);
        }
        free(text);
    }
    closedir(d);
}

/* the matcher finds what it must and nothing else */
static void t_matcher(void **st) {
    (void)st;
    int line = 0;
    char w[256];
    assert_non_null(forbidden_include("#include <stdio.h>\n#include \"kernels/cpu/pool.h\"\n", &line, w, sizeof w));
    assert_int_equal(line, 2);
    assert_string_equal(w, "kernels/cpu/pool.h");
    assert_non_null(forbidden_include("  #  include   <kernels/cuda/dl.h>", &line, w, sizeof w));
    assert_string_equal(w, "kernels/cuda/dl.h");
    assert_non_null(forbidden_include("#include \"../kernels/cpu/gemm.h\"\n", &line, w, sizeof w));
    assert_non_null(forbidden_include("#include \"src/kernels/cuda/x.h\"\n", &line, w, sizeof w));
    assert_null(forbidden_include("#include \"kernels/backend.h\"\n#include \"kernels/cpu_paths.h\"\n", &line, w, sizeof w));
    assert_null(forbidden_include("/* the loops are in kernels/cpu/pool.c */\nint x; // #include \"kernels/cpu/a.h\"\n", &line,
                                  w, sizeof w));
}

static void t_no_kernel_headers_outside_kernels(void **st) {
    (void)st;
    scan_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    scan_dir(AMP_SOURCE_DIR, "src", s);
    /* it read the tree: ops, optim, nn, models, cli, tensor, ... */
    assert_true(s->files >= 50);
    if (s->bad)
        fail_msg("%d file(s) outside src/kernels/ include a CPU or CUDA kernel header (go through kernels/backend.h; "
                 "the CLI's benchmarks through kernels/cpu_paths.h):\n%s",
                 s->bad, s->report);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(t_matcher), cmocka_unit_test(t_no_kernel_headers_outside_kernels)};
    return amp_test_run(tests);
}
