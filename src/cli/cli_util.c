#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

int cli_usage_error(void (*usage)(FILE *), const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("amp: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (usage) {
        fputc('\n', stderr);
        usage(stderr);
    }
    return CLI_USAGE;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("amp: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_FAIL;
}

int cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || (errno == ERANGE && fabs(v) == HUGE_VAL)) return -1;
    *out = v;
    return 0;
}

cli_num_text cli_num(double v) {
    cli_num_text t;
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t.s, sizeof t.s, "%.*g", prec, v);
        if (strtod(t.s, NULL) == v) break;
    }
    return t;
}

void cli_print_precision_notes(FILE *f, const char *indent, const char *which) {
    const char *path = amp_cpu_path_name(amp_cpu_active());
    const bool dot = amp_cpu_active() >= AMP_CPU_AVX512BF16;
    const char *prec = amp_get_matmul_precision();
    if (!which || !strcmp(which, "fp32")) {
        if (!strcmp(prec, "medium") && dot)
            fprintf(f, "%sfp32: matmul precision \"medium\": f32 operands rounded to bf16 and multiplied on the bf16 dot product (about twice the f32 rate, about 3 significant digits per product)\n", indent);
        else if (!strcmp(prec, "medium"))
            fprintf(f, "%sfp32: matmul precision \"medium\" computes as \"highest\" here (cpu path %s has no bf16 dot product): f32 FMA\n", indent, path);
        else
            fprintf(f, "%sfp32: f32 FMA products and sums (matmul precision \"%s\"%s)\n", indent, prec,
                    !strcmp(prec, "high") ? ", which runs as \"highest\": bf16x3 is slower than f32 on CPUs" : "");
    }
    if (!which || !strcmp(which, "fp16"))
        fprintf(f, "%sfp16: widened to f32 for the products (amp has no fp16 arithmetic on CPUs): fp16 saves memory and bandwidth, not arithmetic\n", indent);
    if (!which || !strcmp(which, "bf16")) {
        if (dot)
            fprintf(f, "%sbf16: bf16 x bf16 products use the native bf16 dot product (vdpbf16ps, cpu path %s): twice the f32 rate, f32 sums, subnormals flushed\n", indent, path);
        else if (amp_cpu_supported(AMP_CPU_AVX512BF16))
            fprintf(f, "%sbf16: widened to f32 (cpu path %s forced by AMP_CPU; this CPU has the bf16 dot product: avx512bf16)\n", indent, path);
        else
            fprintf(f, "%sbf16: widened to f32 (this CPU has no bf16 dot product): bf16 saves memory and bandwidth, not arithmetic\n", indent);
    }
}

const char *fmt_bytes(size_t b, char *buf, size_t n) {
    if (b >= (size_t)1 << 30) snprintf(buf, n, "%.2f GiB", (double)b / (double)(1 << 30));
    else if (b >= (size_t)1 << 20) snprintf(buf, n, "%.2f MiB", (double)b / (double)(1 << 20));
    else if (b >= 1024) snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    else snprintf(buf, n, "%zu B", b);
    return buf;
}

bool cli_eval_begin(amp_module *m) {
    bool was = amp_module_is_training(m);
    amp_module_train(m, false);
    amp_no_grad_begin();
    return was;
}

void cli_eval_end(amp_module *m, bool was) {
    amp_no_grad_end();
    amp_module_train(m, was);
}

amp_scope *cli_next_batch(amp_loader *l, amp_tensor **x, amp_tensor **y) {
    amp_scope *s = amp_scope_begin();
    if (amp_loader_next(l, x, y)) return s;
    amp_scope_end(s);
    return NULL;
}

int cli_parse_load_dtypes(const char *s, amp_load_dtype *out, int max, char *why, size_t nwhy) {
    int n = 0;
    for (const char *p = s;; p++) {
        const size_t k = strcspn(p, ",");
        char w[32];
        if (k == 0 || k >= sizeof w) {
            snprintf(why, nwhy, "'%.*s' is not a load dtype", (int)(k < 64 ? k : 64), p);
            return -1;
        }
        memcpy(w, p, k);
        w[k] = 0;
        amp_load_dtype d;
        if (amp_load_dtype_parse(w, &d) != AMP_OK) {
            snprintf(why, nwhy, "'%s' is not a load dtype (%s)", w, amp_last_error());
            amp_clear_error();
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (!strcmp(amp_load_dtype_name(out[i]), amp_load_dtype_name(d))) {
                snprintf(why, nwhy, "'%s' is named twice", w);
                return -1;
            }
        if (n == max) {
            snprintf(why, nwhy, "more than %d load dtypes", max);
            return -1;
        }
        out[n++] = d;
        p += k;
        if (!*p) return n;
    }
}
