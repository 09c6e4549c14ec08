#include "test_support.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void amp_test_prepare(void) {
    if (amp_init() != AMP_OK) {
        /* skipped only for a path this CPU lacks; any other error fails */
        const char *env = getenv("AMP_CPU");
        amp_cpu_path want;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", amp_last_error());
        if (env && *env && amp_cpu_path_parse(env, &want) == AMP_OK && !amp_cpu_supported(want)) {
            fprintf(stderr, "skipping: %s\n", msg);
            exit(77);
        }
        fprintf(stderr, "%s\n", msg);
        exit(1);
    }
    /* a fixed thread count: the tests that compare 1 thread with N would
     * otherwise compare 1 with 1 on a machine the other tests keep busy */
    amp_set_adaptive_threads(false);
}

int amp_test_run_list(const char *names, const CMUnitTestFunction *fns, size_t n, CMFixtureFunction setup,
                      CMFixtureFunction teardown) {
    struct CMUnitTest *tests = calloc(n ? n : 1, sizeof *tests);
    char *list = strdup(names);
    if (!tests || !list) {
        fprintf(stderr, "amp_test_run_list: out of memory\n");
        exit(1);
    }
    /* the list as the preprocessor wrote it: names separated by ", " */
    char *p = list;
    for (size_t i = 0; i < n; i++) {
        while (*p == ' ') p++;
        char *end = strchr(p, ',');
        if (end) *end = 0;
        for (char *q = p + strlen(p); q > p && q[-1] == ' ';) *--q = 0;
        tests[i] = (struct CMUnitTest){p, fns[i], NULL, NULL, NULL};
        p = end ? end + 1 : p + strlen(p);
    }
    amp_test_prepare();
    int rc = _cmocka_run_group_tests("tests", tests, n, setup, teardown);
    free(list);
    free(tests);
    return rc;
}

bool amp_test_per_path_run(void) {
    const char *e = getenv("AMP_TEST_PER_PATH");
    return e && *e && strcmp(e, "0") != 0;
}

uint64_t test_rng_u64(test_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint32_t test_rng_u32(test_rng *r) { return (uint32_t)(test_rng_u64(r) >> 32); }

double test_rng_uniform(test_rng *r) { return (double)(test_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }

double test_rng_range(test_rng *r, double lo, double hi) { return lo + (hi - lo) * test_rng_uniform(r); }

double test_rng_normal(test_rng *r) {
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void test_assert_close(double a, double b, double rtol, double atol, const char *what, const char *file, int line) {
    double tol = atol + rtol * fabs(b);
    if (isnan(a) && isnan(b)) return;
    if (isinf(a) && isinf(b) && (a > 0) == (b > 0)) return;
    if (!(fabs(a - b) <= tol)) {
        fail_msg("%s:%d: %s: got %.9g, expected %.9g (|diff| %.3g > tol %.3g)", file, line, what ? what : "value", a, b,
                 fabs(a - b), tol);
    }
}

const char *test_precision_note(const char *which, const char *matmul) {
    static char buf[512];
    const amp_cpu_path active = amp_cpu_active();
    const char *path = amp_cpu_path_name(active);
    const bool dot = active >= AMP_CPU_AVX512BF16; /* vdpbf16ps */
    if (!matmul) matmul = "highest";
    if (!strcmp(which, "fp32")) {
        if (!strcmp(matmul, "medium") && dot)
            snprintf(buf, sizeof buf, "fp32: matmul precision \"medium\": f32 operands rounded to bf16 and multiplied on the "
                                      "bf16 dot product (about twice the f32 rate, about 3 significant digits per product)");
        else if (!strcmp(matmul, "medium"))
            snprintf(buf, sizeof buf,
                     "fp32: matmul precision \"medium\" computes as \"highest\" here (cpu path %s has no bf16 dot product): f32 FMA",
                     path);
        else
            snprintf(buf, sizeof buf, "fp32: f32 FMA products and sums (matmul precision \"%s\"%s)", matmul,
                     !strcmp(matmul, "high") ? ", which runs as \"highest\": bf16x3 is slower than f32 on CPUs" : "");
    } else if (!strcmp(which, "fp16")) {
        /* no path of amp multiplies in fp16, whatever the CPU has (AVX512_FP16) */
        snprintf(buf, sizeof buf, "fp16: widened to f32 for the products (amp has no fp16 arithmetic on CPUs): fp16 saves "
                                  "memory and bandwidth, not arithmetic");
    } else if (!strcmp(which, "bf16")) {
        if (dot)
            snprintf(buf, sizeof buf, "bf16: bf16 x bf16 products use the native bf16 dot product (vdpbf16ps, cpu path %s): "
                                      "twice the f32 rate, f32 sums, subnormals flushed", path);
        else if (amp_cpu_supported(AMP_CPU_AVX512BF16))
            snprintf(buf, sizeof buf,
                     "bf16: widened to f32 (cpu path %s forced by AMP_CPU; this CPU has the bf16 dot product: avx512bf16)", path);
        else
            snprintf(buf, sizeof buf, "bf16: widened to f32 (this CPU has no bf16 dot product): bf16 saves memory and "
                                      "bandwidth, not arithmetic");
    } else {
        fail_msg("test_precision_note: '%s' is not fp32, fp16 or bf16", which);
    }
    return buf;
}

double test_field(const char *out, const char *label) {
    const char *p = strstr(out, label);
    if (!p) fail_msg("no '%s' in:\n%s", label, out);
    p += strlen(label);
    while (*p == ' ') p++;
    return strtod(p, NULL);
}

static bool skipped_key(const char *key, const char *const *skip) {
    for (; skip && *skip; skip++)
        if (!strcmp(key, *skip)) return true;
    return false;
}

void test_assert_same_checkpoint(const char *a, const char *b, const char *const *skip, bool strict) {
    const char *files[] = {"model.safetensors", "training_state.safetensors"};
    for (int k = 0; k < 2; k++) {
        char pa[1200], pb[1200];
        snprintf(pa, sizeof pa, "%s/%s", a, files[k]);
        snprintf(pb, sizeof pb, "%s/%s", b, files[k]);
        amp_safetensors *fa = amp_safetensors_read(pa), *fb = amp_safetensors_read(pb);
        if (!fa || !fb) fail_msg("%s", amp_last_error());
        assert_int_equal(amp_safetensors_count(fa), amp_safetensors_count(fb));
        for (int i = 0; i < amp_safetensors_count(fa); i++) {
            amp_safetensors_info x, y;
            amp_safetensors_info_at(fa, i, &x);
            if (strict) {
                amp_safetensors_info_at(fb, i, &y);
                assert_string_equal(x.name, y.name);
            } else {
                assert_int_equal(amp_safetensors_info_at(fb, amp_safetensors_find(fb, x.name), &y), AMP_OK);
            }
            assert_int_equal(x.end - x.begin, y.end - y.begin);
            if (memcmp(x.data, y.data, x.end - x.begin))
                fail_msg("%s: tensor %s differs between %s and %s", files[k], x.name, a, b);
        }
        if (strict) assert_int_equal(amp_safetensors_meta_count(fa), amp_safetensors_meta_count(fb));
        for (int i = 0; i < amp_safetensors_meta_count(fa); i++) {
            const char *key = amp_safetensors_meta_key(fa, i);
            if (skipped_key(key, skip)) continue;
            const char *vb = amp_safetensors_meta(fb, key);
            if (!vb || strcmp(vb, amp_safetensors_meta(fa, key)))
                fail_msg("%s: metadata %s: %s vs %s", files[k], key, amp_safetensors_meta(fa, key), vb ? vb : "(none)");
        }
        amp_safetensors_free(fa);
        amp_safetensors_free(fb);
    }
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

void test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("test_write_file: cannot open %s", path);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

void test_copy_file(const char *from, const char *to) {
    size_t n;
    char *b = test_read_file(from, &n);
    if (!b) fail_msg("test_copy_file: cannot read %s", from);
    test_write_file(to, b, n);
    free(b);
}

int test_run_cli(const char *extra_env, const char *args, char **out, char **err) {
    char outp[] = "/tmp/amp_test_outXXXXXX", errp[] = "/tmp/amp_test_errXXXXXX";
    int fo = mkstemp(outp), fe = mkstemp(errp);
    if (fo < 0 || fe < 0) return -1;
    close(fo);
    close(fe);
    size_t need = strlen(args) + strlen(AMP_CLI_PATH) + (extra_env ? strlen(extra_env) : 0) + 256;
    char *cmd = malloc(need);
    snprintf(cmd, need, "%s %s %s < /dev/null > %s 2> %s", extra_env ? extra_env : "", AMP_CLI_PATH, args, outp, errp);
    int st = system(cmd);
    free(cmd);
    char *o = test_read_file(outp, NULL), *e = test_read_file(errp, NULL);
    unlink(outp);
    unlink(errp);
    if (out) *out = o; else free(o);
    if (err) *err = e; else free(e);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static char *vformat(const char *fmt, va_list ap) {
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(NULL, 0, fmt, aq);
    va_end(aq);
    char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
    if (s) vsnprintf(s, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    return s;
}

int test_run_clif(const char *extra_env, char **out, char **err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *args = vformat(fmt, ap);
    va_end(ap);
    int rc = args ? test_run_cli(extra_env, args, out, err) : -1;
    free(args);
    return rc;
}

char *test_run_cli_vexpect(const char *extra_env, int want, char **err, const char *fmt, va_list ap) {
    char *args = vformat(fmt, ap);
    char *out = NULL, *e = NULL;
    int rc = args ? test_run_cli(extra_env, args, &out, &e) : -1;
    if (rc != want)
        fail_msg("%s%samp %s: exit %d (expected %d)\nstdout:\n%.3000s\nstderr:\n%s", extra_env ? extra_env : "",
                 extra_env ? " " : "", args ? args : fmt, rc, want, out ? out : "", e ? e : "");
    free(args);
    if (err) *err = e;
    else free(e);
    return out;
}

char *test_run_cli_expect_env(const char *extra_env, int want, char **err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *out = test_run_cli_vexpect(extra_env, want, err, fmt, ap);
    va_end(ap);
    return out;
}

char *test_run_cli_expect(int want, char **err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *out = test_run_cli_vexpect(NULL, want, err, fmt, ap);
    va_end(ap);
    return out;
}

char *test_tmpdir;

int test_tmpdir_setup(void **state) {
    (void)state;
    test_tmpdir = test_mkdtemp();
    return test_tmpdir ? 0 : -1;
}

int test_tmpdir_teardown(void **state) {
    (void)state;
    test_rmtree(test_tmpdir);
    free(test_tmpdir);
    test_tmpdir = NULL;
    return 0;
}

const char *test_tmp_path(const char *name) {
    static char buf[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", test_tmpdir, name);
    return buf[k];
}

const char *test_mpirun_prefix(int np) {
#ifdef AMP_MPIEXEC
    static char buf[1024];
    if (!amp_dist_is_available() || !AMP_MPIEXEC[0]) return NULL;
    snprintf(buf, sizeof buf,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
             "OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 timeout -k 10 300 %s --oversubscribe -np %d",
             AMP_MPIEXEC, np);
    return buf;
#else
    (void)np;
    return NULL;
#endif
}

char *test_mkdtemp(void) {
    char tmpl[] = "/tmp/amp_test_dirXXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

void test_rmtree(const char *path) {
    if (!path) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", path);
}

void amp_test_require_cuda(void) {
    if (amp_cuda_available()) return;
    amp_status st = amp_device_check(AMP_DEVICE_CUDA);
    printf("SKIP: no CUDA device: %s\n", st == AMP_OK ? "(unknown)" : amp_last_error());
    fflush(stdout);
    exit(77);
}

void amp_test_cuda_stop_if_dead(const char *what, const char *err) {
    const char *e = err ? err : amp_last_error();
    if (!e || !strstr(e, "the CUDA context cannot be used any more")) return;
    printf("FATAL: %s: %s\nFATAL: the CUDA context is dead; stopping here (every later GPU call would fail the same way; "
           "the first failure above is the one to look at)\n",
           what ? what : "(unknown)", e);
    fflush(stdout);
    fflush(stderr);
    exit(1);
}

amp_tensor *amp_test_randn(amp_dtype dt, int nd, const int64_t *shape, uint64_t seed, double scale, double shift) {
    amp_generator g = amp_generator_make(seed);
    amp_tensor *f = amp_tensor_randn(AMP_F64, nd, shape, &g);
    assert_non_null(f);
    double *v = amp_tensor_data(f);
    int64_t n = amp_tensor_numel(f);
    /* (without a shift, no + 0.0: that would turn a -0.0 into +0.0) */
    for (int64_t i = 0; i < n; i++) v[i] = shift != 0.0 ? v[i] * scale + shift : v[i] * scale;
    amp_tensor *t = amp_tensor_empty(dt, nd, shape);
    assert_int_equal(amp_tensor_copy_(t, f), AMP_OK);
    amp_tensor_free(f);
    return t;
}

double test_elem_get(const void *p, amp_dtype dt, int64_t i) {
    if (dt == AMP_F32) return ((const float *)p)[i];
    if (dt == AMP_F16) return amp_f16_to_f32(((const uint16_t *)p)[i]);
    return amp_bf16_to_f32(((const uint16_t *)p)[i]);
}

void test_elem_set(void *p, amp_dtype dt, int64_t i, float v) {
    if (dt == AMP_F32)
        ((float *)p)[i] = v;
    else if (dt == AMP_F16)
        ((uint16_t *)p)[i] = amp_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = amp_f32_to_bf16(v);
}

amp_optim *test_optim_new(amp_module *m, const amp_optim_opts *o) {
    amp_tensor *ps[256];
    int n = amp_module_parameters(m, ps, NULL, 256);
    if (n < 0 || n > 256) fail_msg("test_optim_new: %d parameters", n);
    amp_optim *opt = amp_optim_new(ps, n, o);
    if (!opt) fail_msg("amp_optim_new: %s", amp_last_error());
    return opt;
}

void test_free_tensors_n(amp_tensor *const *ts, size_t n) {
    for (size_t i = 0; i < n; i++) amp_tensor_free(ts[i]);
}

void test_free_all_n(void *const *ps, size_t n) {
    for (size_t i = 0; i < n; i++) free(ps[i]);
}

amp_module *test_gpt_new(const amp_gpt_config *c, uint64_t seed) {
    amp_generator g = amp_generator_make(seed);
    amp_module *m = amp_gpt_new(c, &g);
    if (!m) fail_msg("amp_gpt_new: %s", amp_last_error());
    return m;
}

amp_tensor *amp_test_to(const amp_tensor *t, amp_device d) {
    amp_tensor *r = amp_tensor_to((amp_tensor *)t, d);
    if (!r) {
        amp_test_cuda_stop_if_dead("amp_tensor_to", NULL);
        fail_msg("amp_tensor_to(%s) failed: %s", amp_device_name(d), amp_last_error());
    }
    return r;
}

/* ---- the header parser: which functions are public ------------------------------------------- */
int test_header_functions(const char *const *hdrs, int nhdrs, char names[][64], int max) {
    int n = 0;
    for (int h = 0; h < nhdrs; h++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/include/amp/%s", AMP_SOURCE_DIR, hdrs[h]);
        size_t len;
        char *s = test_read_file(path, &len);
        if (!s) fail_msg("cannot read %s", path);
        /* blank out comments, preprocessor lines and brace bodies */
        int depth = 0;
        for (size_t i = 0; i < len; i++) {
            if (s[i] == '/' && s[i + 1] == '*') {
                char *e = strstr(s + i + 2, "*/");
                size_t stop = e ? (size_t)(e - s) + 2 : len;
                for (; i < stop; i++) s[i] = ' ';
                i--;
            } else if (s[i] == '/' && s[i + 1] == '/') {
                for (; i < len && s[i] != '\n'; i++) s[i] = ' ';
            } else if (s[i] == '#' && (i == 0 || s[i - 1] == '\n')) {
                for (; i < len && s[i] != '\n'; i++) {
                    if (s[i] == '\\' && s[i + 1] == '\n') s[i++] = ' ';
                    s[i] = ' ';
                }
            }
        }
        for (size_t i = 0; i < len; i++) {
            if (!strncmp(s + i, "extern \"C\"", 10)) {
                memset(s + i, ' ', 10);
                char *br = strchr(s + i, '{');
                if (br) *br = ' ';
            }
        }
        /* a stray '}' closes the extern "C" block: drop unmatched ones */
        char *flat = calloc(len + 1, 1);
        size_t k = 0;
        for (size_t i = 0; i < len; i++) {
            if (s[i] == '{') depth++;
            else if (s[i] == '}') {
                if (depth > 0) depth--;
            } else if (depth == 0) flat[k++] = s[i];
        }
        char *save, *st = strtok_r(flat, ";", &save);
        for (; st; st = strtok_r(NULL, ";", &save)) {
            if (strstr(st, "typedef")) continue;
            char *par = strchr(st, '(');
            if (!par) continue;
            char *e = par;
            while (e > st && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\t')) e--;
            char *b = e;
            while (b > st && (b[-1] == '_' || (b[-1] >= 'a' && b[-1] <= 'z') || (b[-1] >= 'A' && b[-1] <= 'Z') || (b[-1] >= '0' && b[-1] <= '9'))) b--;
            if (e - b < 5 || strncmp(b, "amp_", 4)) continue;
            if (n < max) {
                snprintf(names[n], 64, "%.*s", (int)(e - b), b);
                n++;
            }
        }
        free(flat);
        free(s);
    }
    return n;
}

amp_tensor *test_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
    int64_t *v = malloc(sizeof(int64_t) * (size_t)(B * T));
    uint64_t s = seed * 2654435761u + 1;
    for (int64_t i = 0; i < B * T; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (int64_t)((s >> 33) % (uint64_t)V);
    }
    amp_tensor *t = amp_tensor_from_data(v, AMP_I64, 2, AMP_SHAPE(B, T));
    free(v);
    return t;
}
