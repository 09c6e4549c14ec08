/* amp builds without MPI (cmake -DAMP_WITH_MPI=OFF, or no MPI library): the
 * distributed sources compile with AMP_HAVE_MPI undefined, warning-free, and
 * such a library refuses to run as one of several mpirun ranks (each copy
 * would otherwise train alone on all the data). A full build of that
 * configuration is `cmake -S . -B build-nompi -DAMP_WITH_MPI=OFF` (checked
 * by hand and in docs/distributed.md); this test keeps the #ifdef paths
 * compiling without the minutes a second build would add to the suite. */
#include <stdio.h>
#include <stdlib.h>

#include "test_support.h"

static void t_sources_compile_without_mpi(void **state) {
    (void)state;
    const char *files[] = {"group.c", "mpi.c", "agree.c", "dist_msg.c", "ddp.c", "ddp_checkpoint.c"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsyntax-only -fopenmp -I%s/include -I%s/src %s/src/dist/%s "
                 "> /dev/null 2>&1",
                 AMP_SOURCE_DIR, AMP_SOURCE_DIR, AMP_SOURCE_DIR, files[i]);
        if (system(cmd) != 0) {
            fail_msg("src/dist/%s does not compile without MPI (AMP_HAVE_MPI undefined)", files[i]);
        }
    }
}

int main(void) {
    if (system("cc --version > /dev/null 2>&1") != 0) {
        printf("no C compiler: skipped\n");
        return 77;
    }
    return AMP_TEST_RUN(t_sources_compile_without_mpi);
}
