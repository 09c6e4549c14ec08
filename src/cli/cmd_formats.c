/* amp formats [--convert X]: the number formats, with every value computed by
 * amp_format_get_info / amp_format_encode from the conversion code. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

void cmd_formats_usage(FILE *f) {
    fprintf(f, "usage: amp formats [--convert X]\n\n"
               "Prints, for fp32, tf32, fp16, bf16, fp8 e4m3 and fp8 e5m2: the bits (sign/exponent/\n"
               "mantissa), largest finite value, smallest normal and subnormal, machine epsilon,\n"
               "decimal digits, whether the format has inf, and whether fp16-style loss scaling is\n"
               "needed. Every number is decoded from bit patterns by amp's conversion code.\n\n"
               "options:\n"
               "  --convert X   print the nearest value of X in each format (round to nearest,\n"
               "                ties to even, one rounding from X as a double), its bits in hex\n"
               "                and the relative error; fp8 also with saturation (clamp to max)\n"
               "  -h, --help    this text\n");
}

static void print_num(double v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.6g", v);
    printf("%-15s", buf);
}

static int print_table(void) {
    amp_format_info info[AMP_FMT_COUNT];
    for (int f = 0; f < AMP_FMT_COUNT; f++)
        if (amp_format_get_info((amp_format)f, &info[f]) != AMP_OK) return cli_fail("%s", amp_last_error());

    printf("number formats (every value decoded from bit patterns by amp's conversion code)\n\n");
    printf("%-10s %-5s %-8s %-15s%-15s%-15s%-15s%-7s %-4s %s\n", "format", "bits", "s/e/m", "max", "min normal",
           "min subnormal", "epsilon", "digits", "inf", "loss scaling");
    for (int f = 0; f < AMP_FMT_COUNT; f++) {
        const amp_format_info *in = &info[f];
        char sem[16];
        snprintf(sem, sizeof sem, "%d/%d/%d", in->sign_bits, in->exponent_bits, in->mantissa_bits);
        printf("%-10s %-5d %-8s ", in->name, in->total_bits, sem);
        print_num(in->max);
        print_num(in->min_normal);
        print_num(in->min_subnormal);
        print_num(in->epsilon);
        printf("%-7.2f %-4s %s\n", in->decimal_digits, in->has_inf ? "yes" : "no",
               in->needs_loss_scaling ? "yes" : "no");
    }

    const amp_format_info *h = &info[AMP_FMT_F16], *b = &info[AMP_FMT_BF16], *e4 = &info[AMP_FMT_E4M3];
    printf("\nbits: tf32 is stored as fp32 (32 bits) with the low %d mantissa bits zero; %d are significant.\n",
           info[AMP_FMT_F32].mantissa_bits - info[AMP_FMT_TF32].mantissa_bits, info[AMP_FMT_TF32].total_bits);
    printf("fp8 e4m3 is OCP E4M3FN: no inf, S.1111.111 is NaN, overflow gives NaN (or %g saturating).\n", e4->max);
    printf("\nloss scaling: ");
    int first = 1;
    for (int f = 0; f < AMP_FMT_COUNT; f++)
        if (info[f].needs_loss_scaling) {
            printf("%s%s", first ? "" : ", ", info[f].name);
            first = 0;
        }
    printf(" have a narrower exponent range than fp32.\n"
           "  Gradients smaller than fp16's smallest normal (%.3g) lose precision and those below\n"
           "  half its smallest subnormal (%.3g) become zero, so training multiplies the loss by a\n"
           "  scale before backward (GradScaler: 2^16 at first, halved whenever a scaled gradient\n"
           "  overflows past %g, the step then skipped) and divides the gradients by it before the\n"
           "  optimizer step. fp8 training goes further and keeps a scale factor per tensor.\n"
           "  bf16 and tf32 keep fp32's %d exponent bits (max %.3g, same range), so they need no\n"
           "  loss scaling; they give up precision instead (bf16: epsilon %g, %.1f decimal digits).\n",
           h->min_normal, h->min_subnormal / 2, h->max, b->exponent_bits, b->max, b->epsilon, b->decimal_digits);
    return CLI_OK;
}

typedef struct {
    const char *label;
    amp_format fmt;
    bool sat;
} conv_row;

static int print_convert(double x, const char *text) {
    static const conv_row rows[] = {
        {"fp32", AMP_FMT_F32, false},           {"tf32", AMP_FMT_TF32, false},
        {"fp16", AMP_FMT_F16, false},           {"bf16", AMP_FMT_BF16, false},
        {"fp8 e4m3", AMP_FMT_E4M3, false},      {"fp8 e4m3 (sat)", AMP_FMT_E4M3, true},
        {"fp8 e5m2", AMP_FMT_E5M2, false},      {"fp8 e5m2 (sat)", AMP_FMT_E5M2, true},
    };
    printf("nearest value of %s in each format (round to nearest, ties to even)\n\n", text);
    printf("%-16s %-18s %-12s %-14s %s\n", "format", "value", "bits", "rel. error", "note");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const conv_row *r = &rows[i];
        amp_format_info in;
        if (amp_format_get_info(r->fmt, &in) != AMP_OK) return cli_fail("%s", amp_last_error());
        uint32_t bits = amp_format_encode(r->fmt, x, r->sat);
        double v = amp_format_decode(r->fmt, bits);
        int hexdigits = r->fmt == AMP_FMT_F32 || r->fmt == AMP_FMT_TF32 ? 8 : (r->fmt == AMP_FMT_F16 || r->fmt == AMP_FMT_BF16 ? 4 : 2);
        char vbuf[32], bbuf[16], ebuf[32], note[160] = "";
        snprintf(vbuf, sizeof vbuf, "%.9g", v);
        snprintf(bbuf, sizeof bbuf, "0x%0*x", hexdigits, (unsigned)bits);
        if (isnan(v) || isinf(v) || isnan(x) || isinf(x))
            snprintf(ebuf, sizeof ebuf, "%s", isnan(v) || isnan(x) ? "nan" : (v == x ? "0" : "inf"));
        else if (x == 0)
            snprintf(ebuf, sizeof ebuf, "0");
        else
            snprintf(ebuf, sizeof ebuf, "%.4g", (v - x) / x);
        double ax = fabs(x);
        if (isnan(x))
            snprintf(note, sizeof note, "NaN stays NaN");
        else if (isinf(x))
            snprintf(note, sizeof note, r->sat ? "inf saturates to +-%g" : (in.has_inf ? "inf" : "no inf in this format: NaN"),
                     in.max);
        else if (ax > in.max && isnan(v))
            snprintf(note, sizeof note, "overflow: |x| > %g gives NaN (no inf in this format)",
                     in.max + in.epsilon * ldexp(1.0, ilogb(in.max)) / 2);
        else if (ax > in.max && isinf(v))
            snprintf(note, sizeof note, "overflow: |x| >= %g rounds to inf (max finite %g)",
                     in.max + in.epsilon * ldexp(1.0, ilogb(in.max)) / 2, in.max);
        else if (ax > in.max && r->sat && !isfinite(amp_format_decode(r->fmt, amp_format_encode(r->fmt, x, false))))
            snprintf(note, sizeof note, "saturated to the largest finite value");
        else if (ax > in.max)
            snprintf(note, sizeof note, "above max %g, rounds down to it", in.max);
        else if (x != 0 && v == 0)
            snprintf(note, sizeof note, "underflow to zero (below half of %g)", in.min_subnormal);
        else if (v != 0 && fabs(v) < in.min_normal)
            snprintf(note, sizeof note, "subnormal (below %g): fewer significant bits", in.min_normal);
        else if (v == x)
            snprintf(note, sizeof note, "exact");
        else
            snprintf(note, sizeof note, v > x ? "rounded up" : "rounded down");
        printf("%-16s %-18s %-12s %-14s %s\n", r->label, vbuf, bbuf, ebuf, note);
    }
    return CLI_OK;
}

int cmd_formats(int argc, char **argv) {
    const char *conv = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cmd_formats_usage(stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--convert") == 0) {
            if (i + 1 >= argc) return cli_usage_error(cmd_formats_usage, "formats: --convert needs a number");
            conv = argv[++i];
        } else if (strncmp(argv[i], "--convert=", 10) == 0) {
            conv = argv[i] + 10;
        } else {
            return cli_usage_error(cmd_formats_usage, "formats: unknown argument '%s'", argv[i]);
        }
    }
    if (!conv) return print_table();
    double x;
    if (cli_parse_double(conv, &x) != 0)
        return cli_usage_error(cmd_formats_usage, "formats: --convert: '%s' is not a number", conv);
    return print_convert(x, conv);
}
