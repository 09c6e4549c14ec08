/* The README's loop is examples/typical_loop.c, verbatim (so it stays a
 * complete program that builds and runs: CTest example_typical_loop), and
 * examples/README.md lists every example. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static char *read_rel(const char *rel) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", AMP_SOURCE_DIR, rel);
    char *s = test_read_file(p, NULL);
    if (!s) fail_msg("cannot read %s", rel);
    return s;
}

static void t_readme_loop_is_the_example(void **st) {
    (void)st;
    char *readme = read_rel("README.md"), *prog = read_rel("examples/typical_loop.c");
    char *block = strstr(readme, "```c\n");
    assert_non_null(block);
    block += 5;
    char *end = strstr(block, "```");
    assert_non_null(end);
    size_t n = (size_t)(end - block);
    if (n != strlen(prog) || memcmp(block, prog, n))
        fail_msg("README.md's first C block differs from examples/typical_loop.c; copy the file into the README");
    test_free_all(readme, prog);
}

static void t_examples_listed(void **st) {
    (void)st;
    char *index = read_rel("examples/README.md");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/examples", AMP_SOURCE_DIR);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".c")) continue;
        char link[300];
        snprintf(link, sizeof link, "(%s)", e->d_name);
        if (!strstr(index, link)) fail_msg("examples/README.md does not list %s", e->d_name);
        n++;
    }
    closedir(d);
    assert_true(n >= 11);
    free(index);
}

AMP_TEST_MAIN(t_readme_loop_is_the_example, t_examples_listed)
