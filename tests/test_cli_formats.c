/* `amp formats` and `amp formats --convert X`: the printed values against
 * values computed here from the format definitions (tests/numeric_ref.h). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "numeric_ref.h"
#include "test_support.h"

/* The line of `out` that starts with label followed by a space (and, to tell
 * "fp8 e4m3" from "fp8 e4m3 (sat)", not by "("); NULL if none. */
static const char *find_row(const char *out, const char *label) {
    size_t len = strlen(label);
    for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, label, len) != 0 || p[len] != ' ') continue;
        const char *q = p + len;
        while (*q == ' ') q++;
        if (*q == '(') continue;
        return q;
    }
    return NULL;
}

static void expect_close(double got, double want, double rtol, const char *what, const char *fmt) {
    if (!(fabs(got - want) <= rtol * fabs(want)))
        fail_msg("amp formats: %s %s printed %.9g, expected %.9g", fmt, what, got, want);
}

typedef struct {
    const char *name;
    int total, e, m;
    double max, min_normal, min_sub, eps;
    const char *inf, *scaling;
} row_want;

static void t_table(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    int rc = test_run_cli(NULL, "formats", &out, &err);
    assert_int_equal(rc, 0);
    const row_want rows[] = {
        {"fp32", 32, 8, 23, FLT_MAX, FLT_MIN, 0x1p-149, FLT_EPSILON, "yes", "no"},
        {"tf32", 19, 8, 10, ldexp(2.0 - 0x1p-10, 127), 0x1p-126, 0x1p-136, 0x1p-10, "yes", "no"},
        {"fp16", 16, 5, 10, 65504.0, 0x1p-14, 0x1p-24, 0x1p-10, "yes", "yes"},
        {"bf16", 16, 8, 7, ref_max(&REF_BF16), 0x1p-126, 0x1p-133, 0.0078125, "yes", "no"},
        {"fp8 e4m3", 8, 4, 3, 448.0, 0x1p-6, 0x1p-9, 0.125, "no", "yes"},
        {"fp8 e5m2", 8, 5, 2, 57344.0, 0x1p-14, 0x1p-16, 0.25, "yes", "yes"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row_want *w = &rows[i];
        const char *r = find_row(out, w->name);
        if (!r) fail_msg("amp formats: no row for %s in:\n%s", w->name, out);
        int total, s, e, m;
        double mx, mn, ms, eps, digits;
        char inf[8], sc[8];
        if (sscanf(r, "%d %d/%d/%d %lf %lf %lf %lf %lf %7s %7s", &total, &s, &e, &m, &mx, &mn, &ms, &eps, &digits, inf,
                   sc) != 11)
            fail_msg("amp formats: cannot parse the %s row: %.120s", w->name, r);
        assert_int_equal(total, w->total);
        assert_int_equal(s, 1);
        assert_int_equal(e, w->e);
        assert_int_equal(m, w->m);
        expect_close(mx, w->max, 1e-5, "max", w->name);
        expect_close(mn, w->min_normal, 1e-5, "min normal", w->name);
        expect_close(ms, w->min_sub, 1e-5, "min subnormal", w->name);
        expect_close(eps, w->eps, 1e-5, "epsilon", w->name);
        expect_close(digits, (w->m + 1) * log10(2.0), 0.01, "decimal digits", w->name);
        assert_string_equal(inf, w->inf);
        assert_string_equal(sc, w->scaling);
    }
    /* the spelled-out numbers a reader looks for */
    assert_non_null(strstr(find_row(out, "fp16"), "65504 "));
    assert_non_null(strstr(find_row(out, "fp16"), "5.96046e-08"));
    assert_non_null(strstr(find_row(out, "bf16"), "0.0078125 "));
    assert_non_null(strstr(find_row(out, "fp8 e4m3"), "448 "));
    assert_non_null(strstr(find_row(out, "fp8 e5m2"), "57344 "));
    assert_non_null(strstr(out, "loss scaling"));
    assert_non_null(strstr(out, "bf16 and tf32"));
    test_free_all(out, err);
}

typedef struct {
    const char *label;
    const ref_fmt *ref;
    ref_ovf ovf;
    int tf32; /* bits printed as an f32 pattern */
} conv_want;

static const conv_want g_conv[] = {
    {"fp32", &REF_F32, REF_OVF_INF, 0},           {"tf32", &REF_TF32, REF_OVF_INF, 1},
    {"fp16", &REF_F16, REF_OVF_INF, 0},           {"bf16", &REF_BF16, REF_OVF_INF, 0},
    {"fp8 e4m3", &REF_E4M3, REF_OVF_NAN, 0},      {"fp8 e4m3 (sat)", &REF_E4M3, REF_OVF_SAT, 0},
    {"fp8 e5m2", &REF_E5M2, REF_OVF_INF, 0},      {"fp8 e5m2 (sat)", &REF_E5M2, REF_OVF_SAT, 0},
};

/* Runs --convert x and checks each row's value, bits and relative error
 * against the reference rounding of x. Returns the output (free it). */
static char *check_convert(const char *arg, double x) {
    char *out = NULL, *err = NULL, args[64];
    snprintf(args, sizeof args, "formats --convert %s", arg);
    int rc = test_run_cli(NULL, args, &out, &err);
    if (rc != 0) fail_msg("amp %s exited %d: %s", args, rc, err);
    for (size_t i = 0; i < sizeof g_conv / sizeof g_conv[0]; i++) {
        const conv_want *w = &g_conv[i];
        const char *r = find_row(out, w->label);
        if (!r) fail_msg("amp %s: no row %s in:\n%s", args, w->label, out);
        char vs[64], bs[64], es[64];
        if (sscanf(r, "%63s %63s %63s", vs, bs, es) != 3) fail_msg("amp %s: cannot parse row %s", args, w->label);
        double v = strtod(vs, NULL), want = ref_round(w->ref, x, w->ovf);
        unsigned long bits = strtoul(bs, NULL, 16);
        if (strncmp(bs, "0x", 2) != 0) fail_msg("amp %s: %s bits '%s' not hex", args, w->label, bs);
        double from_bits = ref_decode(w->ref, w->tf32 ? (uint32_t)(bits >> 13) : (uint32_t)bits);
        if (isnan(want)) {
            if (!isnan(v) || !isnan(from_bits)) fail_msg("amp %s: %s should be NaN, printed %s %s", args, w->label, vs, bs);
        } else {
            if (isinf(want) ? v != want : fabs(v - want) > 1e-8 * fabs(want))
                fail_msg("amp %s: %s printed %s, nearest value is %.17g", args, w->label, vs, want);
            if (from_bits != want) fail_msg("amp %s: %s bits %s decode to %.17g, not %.17g", args, w->label, bs, from_bits, want);
            if (isfinite(want) && x != 0) {
                double rel = strtod(es, NULL), wrel = (want - x) / x;
                if (fabs(rel - wrel) > 1e-3 * fabs(wrel) + 1e-12)
                    fail_msg("amp %s: %s relative error %s, expected %.6g", args, w->label, es, wrel);
            }
        }
    }
    free(err);
    return out;
}

static void t_convert_01(void **state) {
    (void)state;
    char *out = check_convert("0.1", 0.1);
    assert_non_null(strstr(find_row(out, "fp16"), "0x2e66"));
    assert_non_null(strstr(find_row(out, "bf16"), "0x3dcd"));
    assert_non_null(strstr(find_row(out, "fp32"), "0x3dcccccd"));
    free(out);
}

static void t_convert_70000(void **state) {
    (void)state;
    char *out = check_convert("70000", 70000.0);
    const char *h = find_row(out, "fp16"), *e4 = find_row(out, "fp8 e4m3"), *e4s = find_row(out, "fp8 e4m3 (sat)");
    const char *e5 = find_row(out, "fp8 e5m2"), *e5s = find_row(out, "fp8 e5m2 (sat)"), *b = find_row(out, "bf16");
    /* fp16 overflows to inf; e4m3 has no inf: NaN, or 448 saturating; e5m2:
     * 70000 is past the midpoint 61440 between 57344 and 2^16, so inf */
    assert_true(strncmp(h, "inf", 3) == 0 && strstr(h, "0x7c00") && strstr(h, "overflow"));
    assert_true(strncmp(e4, "nan", 3) == 0 && strstr(e4, "0x7f"));
    assert_true(strncmp(e4s, "448 ", 4) == 0 && strstr(e4s, "0x7e"));
    assert_true(strncmp(e5, "inf", 3) == 0 && strstr(e5, "0x7c"));
    assert_true(strncmp(e5s, "57344 ", 6) == 0 && strstr(e5s, "0x7b"));
    assert_true(strncmp(b, "70144 ", 6) == 0 && strstr(b, "0x4789"));
    free(out);
    /* more values through the same reference */
    test_free_all(check_convert("65519", 65519.0), check_convert("65520", 65520.0), check_convert("-464", -464.0), check_convert("1e-7", 1e-7), check_convert("3.0e38", 3.0e38));
}

static void t_usage_errors(void **state) {
    (void)state;
    const char *bad[] = {"formats --bogus", "formats --convert", "formats --convert abc", "formats extra"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL, *err = NULL;
        int rc = test_run_cli(NULL, bad[i], &out, &err);
        if (rc != 2) fail_msg("amp %s exited %d, expected 2", bad[i], rc);
        if (!strstr(err, "usage: amp formats")) fail_msg("amp %s: no usage on stderr: %s", bad[i], err);
        test_free_all(out, err);
    }
    char *out = NULL;
    assert_int_equal(test_run_cli(NULL, "formats --help", &out, NULL), 0);
    assert_non_null(strstr(out, "--convert"));
    free(out);
}

AMP_TEST_MAIN(t_table, t_convert_01, t_convert_70000, t_usage_errors)
