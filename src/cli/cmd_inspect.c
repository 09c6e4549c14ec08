/* amp inspect: what a safetensors file or a checkpoint directory holds. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/trainer.h"

void cmd_inspect_usage(FILE *f) {
    fprintf(f, "usage: amp inspect [--no-tensors] FILE.safetensors | CHECKPOINT_DIR\n\n"
               "Validates a safetensors file (header, offsets, sizes, data_crc32 when recorded) and lists\n"
               "its metadata (hex floats such as the trainer's shown in decimal: the shortest digits that\n"
               "read back as the same double) and tensors: name, dtype, shape, bytes, then totals per\n"
               "dtype. Given a checkpoint directory (amp train --checkpoint), checks that\n"
               "model.safetensors and training_state.safetensors belong to the same save and lists both.\n\n"
               "  --no-tensors   metadata and totals only\n\n"
               "Exit status: 0 valid, 1 invalid or unreadable, 2 bad usage.\n");
}

/* A hex float ("0x1.0398888p+4", "-0x1p-3"): how the trainer writes its
 * numbers into the metadata (%a, exact). */
static bool is_hex_float(const char *s, size_t n) {
    size_t i = s[0] == '-' || s[0] == '+';
    return n > i + 2 && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X') && (memchr(s, 'p', n) || memchr(s, 'P', n));
}

/* A metadata value as it is, except that each hex float is shown in
 * decimal: the shortest digits that read back as the same double (at most
 * 17 significant). Other numbers are left alone (an integer past 2^53 would
 * not survive a double). */
static void print_value(const char *v) {
    while (*v) {
        size_t len = strcspn(v, " ,;=()[]{}\"");
        char tok[64], *end;
        double x;
        if (len && len < sizeof tok && is_hex_float(v, len)) {
            memcpy(tok, v, len);
            tok[len] = 0;
            x = strtod(tok, &end);
            if (*end == 0 && isfinite(x)) {
                fputs(cli_num(x).s, stdout);
                v += len;
                continue;
            }
        }
        fwrite(v, 1, len, stdout);
        v += len;
        if (*v) putchar(*v++);
    }
}

static void print_file(const char *label, const amp_safetensors *f, bool tensors) {
    char b1[32], b2[32];
    int n = amp_safetensors_count(f);
    printf("%s: %s (JSON header %" PRIu64 " bytes, data %s), %d tensor%s, ", label,
           fmt_bytes((size_t)amp_safetensors_file_bytes(f), b1, sizeof b1), amp_safetensors_header_bytes(f),
           fmt_bytes((size_t)amp_safetensors_data_bytes(f), b2, sizeof b2), n, n == 1 ? "" : "s");
    if (amp_safetensors_has_crc(f)) printf("checksum ok (crc32 %s)\n", amp_safetensors_meta(f, "data_crc32"));
    else printf("no checksum recorded\n");
    int nm = amp_safetensors_meta_count(f);
    if (nm > 0) {
        printf("metadata:\n");
        int w = 0;
        for (int i = 0; i < nm; i++) {
            int l = (int)strlen(amp_safetensors_meta_key(f, i));
            if (l > w) w = l;
        }
        if (w > 40) w = 40;
        for (int i = 0; i < nm; i++) {
            const char *k = amp_safetensors_meta_key(f, i);
            printf("  %-*s  ", w, k);
            print_value(amp_safetensors_meta(f, k));
            putchar('\n');
        }
    }
    /* totals per dtype, in the order dtypes first appear */
    const char *dts[16];
    int64_t cnt[16] = {0}, elems[16] = {0};
    uint64_t bytes[16] = {0};
    int nd = 0;
    int64_t total_elems = 0;
    int w = 4;
    for (int i = 0; i < n; i++) {
        amp_safetensors_info in;
        amp_safetensors_info_at(f, i, &in);
        int l = (int)strlen(in.name);
        if (l > w) w = l;
    }
    if (w > 60) w = 60;
    if (tensors && n > 0) printf("tensors:\n  %-*s  %-7s  %-18s  %s\n", w, "name", "dtype", "shape", "bytes");
    for (int i = 0; i < n; i++) {
        amp_safetensors_info in;
        amp_safetensors_info_at(f, i, &in);
        if (tensors) {
            char shape[160];
            int off = snprintf(shape, sizeof shape, "[");
            for (int d = 0; d < in.ndim && off < (int)sizeof shape - 24; d++)
                off += snprintf(shape + off, sizeof shape - (size_t)off, "%s%" PRId64, d ? "," : "", in.shape[d]);
            snprintf(shape + off, sizeof shape - (size_t)off, "]");
            printf("  %-*s  %-7s  %-18s  %" PRIu64 "\n", w, in.name, in.dtype_name, shape, in.end - in.begin);
        }
        int k = 0;
        while (k < nd && strcmp(dts[k], in.dtype_name)) k++;
        if (k == nd && nd < 16) dts[nd++] = in.dtype_name;
        if (k < 16) {
            cnt[k]++;
            elems[k] += in.numel;
            bytes[k] += in.end - in.begin;
        }
        total_elems += in.numel;
    }
    printf("total: %d tensor%s, %" PRId64 " elements, %s\n", n, n == 1 ? "" : "s", total_elems,
           fmt_bytes((size_t)amp_safetensors_data_bytes(f), b1, sizeof b1));
    for (int k = 0; k < nd; k++)
        printf("  %-7s %" PRId64 " tensor%s, %" PRId64 " elements, %s\n", dts[k], cnt[k], cnt[k] == 1 ? "" : "s", elems[k],
               fmt_bytes((size_t)bytes[k], b1, sizeof b1));
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool tensors = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-tensors")) tensors = false;
        else if (cli_is_help(argv[i])) {
            cmd_inspect_usage(stdout);
            return CLI_OK;
        } else if (argv[i][0] == '-' && argv[i][1]) return cli_usage_error(cmd_inspect_usage, "inspect: unknown option '%s'", argv[i]);
        else if (path) return cli_usage_error(cmd_inspect_usage, "inspect: one FILE or DIR, got '%s' and '%s'", path, argv[i]);
        else path = argv[i];
    }
    if (!path) return cli_usage_error(cmd_inspect_usage, "inspect: no FILE given");
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        amp_checkpoint *c = amp_checkpoint_open(path);
        if (!c) return cli_fail("%s", amp_last_error());
        const char *model = amp_checkpoint_meta(c, "model"), *prec = amp_checkpoint_meta(c, "precision");
        printf("checkpoint %s: step %" PRId64 ", id %s%s%s%s%s; model and training state agree\n\n", path, amp_checkpoint_step(c),
               amp_checkpoint_meta(c, "checkpoint_id"), model ? ", model " : "", model ? model : "", prec ? ", " : "", prec ? prec : "");
        print_file("model.safetensors", amp_checkpoint_model_file(c), tensors);
        printf("\n");
        print_file("training_state.safetensors", amp_checkpoint_state_file(c), tensors);
        amp_checkpoint_close(c);
        return CLI_OK;
    }
    amp_safetensors *f = amp_safetensors_read(path);
    if (!f) return cli_fail("%s", amp_last_error());
    print_file(path, f, tensors);
    amp_safetensors_free(f);
    return CLI_OK;
}
