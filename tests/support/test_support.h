/* Shared helpers for the cmocka test programs. Each tests/test_*.c is one
 * executable; write its main as:
 *
 *   AMP_TEST_MAIN(t_x, t_y, ...)
 *
 * (with group fixtures: AMP_TEST_MAIN_FIXTURES(setup, teardown, t_x, ...);
 * a main with more to do: `return AMP_TEST_RUN(t_x, ...);` at its end; or
 * the cmocka way: amp_test_run(tests) on a CMUnitTest array).
 *
 * A file containing the marker AMP_TEST_PER_CPU_PATH is run by CTest once more
 * per CPU path with AMP_CPU set (the amp processes it starts inherit it) and
 * AMP_TEST_PER_PATH=1; amp_test_run exits 77 (skipped) when this CPU lacks
 * the requested path. */
#ifndef AMP_TEST_SUPPORT_H
#define AMP_TEST_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "amp/amp.h"

/* Check AMP_CPU (exit 77 if the CPU lacks it), then run the group.
 * amp_test_prepare also turns the adaptive thread count off
 * (amp_set_adaptive_threads(false)): a region uses OpenMP's limit
 * (amp_set_num_threads) whatever else runs on the machine, so a test that
 * compares 1 thread with N really runs N (with adaptation, a machine kept
 * busy by ctest -j lowers every region to 1). A test about adaptation turns
 * it on itself. The amp processes a test starts adapt as usual. */
#define amp_test_run(tests) (amp_test_prepare(), cmocka_run_group_tests(tests, NULL, NULL))
void amp_test_prepare(void);
/* A test program's main, without the list of cmocka_unit_test entries
 * written out: AMP_TEST_MAIN(t_a, t_b, ...) defines int main(void) that runs
 * the listed test functions as amp_test_run does (one group named "tests",
 * each test named as written, as cmocka_unit_test names it);
 * AMP_TEST_MAIN_FIXTURES(setup, teardown, t_a, ...) with group fixtures. A
 * main with more to do ends with `return AMP_TEST_RUN(t_a, ...);` (or
 * AMP_TEST_RUN_FIXTURES). No semicolon after AMP_TEST_MAIN(...). */
#define AMP_TEST_RUN_FIXTURES(setup, teardown, ...)                                                           \
    amp_test_run_list(#__VA_ARGS__, (const CMUnitTestFunction[]){__VA_ARGS__},                                \
                      sizeof((const CMUnitTestFunction[]){__VA_ARGS__}) / sizeof(CMUnitTestFunction), setup, \
                      teardown)
#define AMP_TEST_RUN(...) AMP_TEST_RUN_FIXTURES(NULL, NULL, __VA_ARGS__)
#define AMP_TEST_MAIN_FIXTURES(setup, teardown, ...)                \
    int main(void) {                                                \
        return AMP_TEST_RUN_FIXTURES(setup, teardown, __VA_ARGS__); \
    }
#define AMP_TEST_MAIN(...) AMP_TEST_MAIN_FIXTURES(NULL, NULL, __VA_ARGS__)
/* What AMP_TEST_RUN_FIXTURES expands to: names is the list as written
 * ("t_a, t_b"), fns the n functions in that order. */
int amp_test_run_list(const char *names, const CMUnitTestFunction *fns, size_t n, CMFixtureFunction setup,
                      CMFixtureFunction teardown);
/* True in the per-CPU-path runs of a file marked AMP_TEST_PER_CPU_PATH: a
 * test whose full run is long may check a shorter one there (saying what it
 * leaves to the run on the machine's own path). */
bool amp_test_per_path_run(void);
/* In a per-path run, skips the calling test (cmocka's skip()) saying why:
 * for a test that asserts nothing the CPU path changes, or left to the run on
 * the machine's own path. */
#define amp_test_skip_per_path(why)                                          \
    do {                                                                     \
        if (amp_test_per_path_run()) {                                       \
            print_message("skipped in the per-CPU-path run: %s\n", (why)); \
            skip();                                                          \
        }                                                                    \
    } while (0)

/* For the CUDA tests: exits 77 (CTest's "skipped") with "SKIP: no CUDA
 * device: <why>" on stdout unless a CUDA device can be used (amp built with
 * CUDA and a GPU present). */
void amp_test_require_cuda(void);
/* After a CUDA error that leaves the context unusable (amp's message then
 * says "the CUDA context cannot be used any more", e.g. an illegal address):
 * prints one line naming `what` and the error message `err` (NULL: the
 * thread's amp_last_error()), and exits 1, instead of a page of identical
 * failures from every later case. Does nothing for any other message.
 * Call it where a GPU call's failure is reported. */
void amp_test_cuda_stop_if_dead(const char *what, const char *err);
/* For the device tests: a CPU tensor of dtype dt whose values are N(0, 1)
 * draws from amp_generator_make(seed), drawn in float64, times scale plus
 * shift, then converted to dt once. Fails the test if it cannot be made. */
amp_tensor *amp_test_randn(amp_dtype dt, int nd, const int64_t *shape, uint64_t seed, double scale, double shift);
/* Token ids i64 [B, T] in 0..V-1 from a seeded LCG (a language model's input). */
amp_tensor *test_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed);
/* amp_tensor_to(t, d) (a copy of t on device d); where that returns NULL,
 * amp_test_cuda_stop_if_dead, then fails the test with amp's message. */
amp_tensor *amp_test_to(const amp_tensor *t, amp_device d);

/* amp_gpt_new(c, g) with g = amp_generator_make(seed); fails the test with
 * amp's message where it returns NULL. */
amp_module *test_gpt_new(const amp_gpt_config *c, uint64_t seed);

/* amp_optim_new(ps, n, o) over all of m's parameters (at most 256); fails
 * the test with amp's message where it returns NULL. */
amp_optim *test_optim_new(amp_module *m, const amp_optim_opts *o);

/* The clean-up of a test in one line: amp_tensor_free on each tensor, or
 * free on each block, in the order given. */
#define test_free_tensors(...) \
    test_free_tensors_n((amp_tensor *[]){__VA_ARGS__}, sizeof((amp_tensor *[]){__VA_ARGS__}) / sizeof(amp_tensor *))
#define test_free_all(...) test_free_all_n((void *[]){__VA_ARGS__}, sizeof((void *[]){__VA_ARGS__}) / sizeof(void *))
void test_free_tensors_n(amp_tensor *const *ts, size_t n);
void test_free_all_n(void *const *ps, size_t n);

/* Element i of a raw f32, f16 or bf16 buffer (any other dt: read as bf16),
 * as a value / set from a float with amp's round-to-nearest conversion. */
double test_elem_get(const void *p, amp_dtype dt, int64_t i);
void test_elem_set(void *p, amp_dtype dt, int64_t i, float v);

/* A small independent PRNG for test inputs (splitmix64), not the library's. */
typedef struct {
    uint64_t s;
} test_rng;
uint64_t test_rng_u64(test_rng *r);
uint32_t test_rng_u32(test_rng *r);
double test_rng_uniform(test_rng *r);             /* [0,1) */
double test_rng_range(test_rng *r, double lo, double hi);
double test_rng_normal(test_rng *r);              /* Box-Muller */

/* |a-b| <= atol + rtol*|b|, with a message naming what was compared. */
#define assert_close(a, b, rtol, atol, what) test_assert_close((double)(a), (double)(b), rtol, atol, what, __FILE__, __LINE__)
void test_assert_close(double a, double b, double rtol, double atol, const char *what, const char *file, int line);

/* Run the amp CLI (AMP_CLI_PATH) with a shell-quoted argument string; stdin is
 * /dev/null; stdout/stderr captured (malloc'd, NUL-terminated; free them).
 * extra_env (may be NULL) is prepended, e.g. "AMP_CPU=scalar". Returns the
 * exit status, or -1 if the process did not exit normally. */
int test_run_cli(const char *extra_env, const char *args, char **out, char **err);
/* test_run_cli with the argument string made from fmt (printf). */
int test_run_clif(const char *extra_env, char **out, char **err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Runs amp with the argument string made from fmt and fails the test, with
 * both streams, unless it exits with want. Returns stdout (free it); *err
 * receives stderr when err is not NULL (free it). */
char *test_run_cli_expect(int want, char **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* test_run_cli_expect with extra_env (as test_run_cli's; named in the
 * failure message), and its va_list form. */
char *test_run_cli_expect_env(const char *extra_env, int want, char **err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
char *test_run_cli_vexpect(const char *extra_env, int want, char **err, const char *fmt, va_list ap);
/* The command prefix that runs a program on np MPI ranks (Open MPI's
 * mpirun found at build time, with what it needs as root, with more ranks
 * than cores and in containers); pass it as test_run_cli's extra_env. NULL
 * when amp was built without MPI. Static storage. */
const char *test_mpirun_prefix(int np);
/* The line `amp` prints (after its indent, without the newline) to say how
 * the matrix products of compute precision `which` ("fp32", "fp16" or
 * "bf16") run on this process's active CPU path under matmul precision
 * `matmul` (NULL: "highest"): the train summary's "products" line and
 * compare's notes. Written here from what each path does (not taken from the
 * CLI's code), so a CLI that describes another path's arithmetic fails. The
 * amp processes test_run_cli starts inherit AMP_CPU, hence this path.
 * Static storage (overwritten by the next call). */
const char *test_precision_note(const char *which, const char *matmul);

/* The number after `label` (and any spaces) in a CLI's output, e.g. the
 * summary's "test accuracy   97.5"; fails the test when out has no label. */
double test_field(const char *out, const char *label);
/* Fails unless checkpoint directories a and b hold byte-identical tensors in
 * model.safetensors and training_state.safetensors, and the same metadata
 * except the keys in skip (NULL-terminated list). strict: also the same
 * tensor order and the same number of metadata keys. */
void test_assert_same_checkpoint(const char *a, const char *b, const char *const *skip, bool strict);

/* Read a whole file (malloc'd, NUL-terminated); NULL if it cannot be read. */
char *test_read_file(const char *path, size_t *len);
/* Writes n bytes to path (created or truncated); fails the test unless
 * the open, the write and the close all succeed. */
void test_write_file(const char *path, const void *data, size_t n);
/* Copies the file at from to to (test_read_file, then test_write_file). */
void test_copy_file(const char *from, const char *to);
/* A fresh empty temporary directory (malloc'd path); removed by test_rmtree. */
char *test_mkdtemp(void);
void test_rmtree(const char *path);
/* Group fixtures (cmocka_run_group_tests(tests, test_tmpdir_setup,
 * test_tmpdir_teardown)): a fresh temporary directory in test_tmpdir for
 * the group, removed with everything in it at the end. */
extern char *test_tmpdir;
int test_tmpdir_setup(void **state);
int test_tmpdir_teardown(void **state);
/* test_tmpdir + "/" + name, in one of 8 static buffers used in turn (so a
 * call's result survives the next 7 calls). */
const char *test_tmp_path(const char *name);

/* The functions declared in include/amp/<hdrs[i]> (names starting amp_,
 * typedefs and macros left out), in declaration order, into names (at most
 * max); returns how many. Fails the test when a header cannot be read. */
int test_header_functions(const char *const *hdrs, int nhdrs, char names[][64], int max);

#endif
