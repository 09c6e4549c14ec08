/* amp inspect: what a safetensors file, a GGUF file or a checkpoint directory holds. */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/trainer.h"

void cmd_inspect_usage(FILE *f) {
    fprintf(f, "usage: amp inspect [--no-tensors] FILE.safetensors | FILE.gguf | CHECKPOINT_DIR\n\n"
               "Validates a safetensors file (header, offsets, sizes, data_crc32 when recorded) and lists\n"
               "its metadata (hex floats such as the trainer's shown in decimal: the shortest digits that\n"
               "read back as the same double) and tensors: name, dtype, shape, bytes, then totals per\n"
               "dtype. Given a checkpoint directory (amp train --checkpoint), checks that\n"
               "model.safetensors and training_state.safetensors belong to the same save and lists both.\n"
               "A GGUF file (llama.cpp's format, recognised by its magic) is validated whole and listed the\n"
               "same way: every key with its type and value (long strings cut at 80 bytes, arrays as their\n"
               "first elements and a count), the tensors with their ggml type, shape (torch order) and\n"
               "bytes, totals per type.\n\n"
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

/* The tensor list of a file (one row each when listing) and the totals per type, in the order
 * types first appear. */
typedef struct {
    int w;
    bool list;
    const char *type[64];
    int64_t cnt[64], elems[64];
    uint64_t bytes[64];
    int ntypes;
    int64_t n, total_elems;
    uint64_t total_bytes;
} tensor_table;

static void table_begin(tensor_table *t, int name_width, bool list, const char *type_col) {
    memset(t, 0, sizeof *t);
    t->w = name_width > 60 ? 60 : name_width;
    t->list = list;
    if (list) printf("tensors:\n  %-*s  %-7s  %-18s  %s\n", t->w, "name", type_col, "shape", "bytes");
}

static void table_row(tensor_table *t, const char *name, const char *type, int ndim, const int64_t *shape, int64_t numel,
                      uint64_t bytes) {
    if (t->list) {
        char sh[160];
        int off = snprintf(sh, sizeof sh, "[");
        for (int d = 0; d < ndim && off < (int)sizeof sh - 24; d++)
            off += snprintf(sh + off, sizeof sh - (size_t)off, "%s%" PRId64, d ? "," : "", shape[d]);
        snprintf(sh + off, sizeof sh - (size_t)off, "]");
        printf("  %-*s  %-7s  %-18s  %" PRIu64 "\n", t->w, name, type, sh, bytes);
    }
    int k = 0;
    while (k < t->ntypes && strcmp(t->type[k], type)) k++;
    if (k == t->ntypes && t->ntypes < 64) t->type[t->ntypes++] = type;
    if (k < 64) {
        t->cnt[k]++;
        t->elems[k] += numel;
        t->bytes[k] += bytes;
    }
    t->n++;
    t->total_elems += numel;
    t->total_bytes += bytes;
}

static void table_end(const tensor_table *t) {
    char b[32];
    printf("total: %" PRId64 " tensor%s, %" PRId64 " elements, %s\n", t->n, t->n == 1 ? "" : "s", t->total_elems,
           fmt_bytes((size_t)t->total_bytes, b, sizeof b));
    for (int k = 0; k < t->ntypes; k++)
        printf("  %-7s %" PRId64 " tensor%s, %" PRId64 " elements, %s\n", t->type[k], t->cnt[k], t->cnt[k] == 1 ? "" : "s",
               t->elems[k], fmt_bytes((size_t)t->bytes[k], b, sizeof b));
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
    int w = 4;
    for (int i = 0; i < n; i++) {
        amp_safetensors_info in;
        amp_safetensors_info_at(f, i, &in);
        int l = (int)strlen(in.name);
        if (l > w) w = l;
    }
    tensor_table t;
    table_begin(&t, w, tensors && n > 0, "dtype");
    for (int i = 0; i < n; i++) {
        amp_safetensors_info in;
        amp_safetensors_info_at(f, i, &in);
        table_row(&t, in.name, in.dtype_name, in.ndim, in.shape, in.numel, in.end - in.begin);
    }
    table_end(&t);
}

/* ---- GGUF ------------------------------------------------------------------------------------ */
/* A string of the file (not NUL-terminated), quoted, escaped, cut after max bytes. */
static void print_gguf_str(const char *s, size_t n, size_t max) {
    putchar('"');
    for (size_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (n > max) printf("... (%zu bytes)", n);
}

/* Bytes of a GGUF scalar value type (0: string, array). */
static const int g_gguf_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* The shortest decimal that reads back as the same float. */
static void print_f32(float x) {
    char buf[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)x);
        if ((float)strtod(buf, NULL) == x || prec == 9) break;
    }
    fputs(buf, stdout);
}

/* An element of a packed little-endian array of scalar type t. */
static void print_gguf_scalar(amp_gguf_type t, const unsigned char *p) {
    uint64_t u = 0;
    for (int k = g_gguf_size[t] - 1; k >= 0; k--) u = (u << 8) | p[k];
    switch (t) {
    case AMP_GGUF_I8: printf("%d", (int8_t)u); break;
    case AMP_GGUF_I16: printf("%d", (int16_t)u); break;
    case AMP_GGUF_I32: printf("%" PRId32, (int32_t)u); break;
    case AMP_GGUF_I64: printf("%" PRId64, (int64_t)u); break;
    case AMP_GGUF_BOOL: fputs(u ? "true" : "false", stdout); break;
    case AMP_GGUF_F32: {
        uint32_t b = (uint32_t)u;
        float x;
        memcpy(&x, &b, 4);
        print_f32(x);
        break;
    }
    case AMP_GGUF_F64: {
        double x;
        memcpy(&x, &u, 8);
        fputs(cli_num(x).s, stdout);
        break;
    }
    default: printf("%" PRIu64, u); break;
    }
}

static void print_gguf_value(const amp_gguf *f, int64_t i) {
    const char *key = amp_gguf_key_at(f, i);
    amp_gguf_type t = amp_gguf_kv_type(f, i);
    const char *s;
    size_t n;
    if (t == AMP_GGUF_STRING) {
        amp_gguf_get_str(f, key, &s, &n);
        print_gguf_str(s, n, 80);
        return;
    }
    if (t != AMP_GGUF_ARRAY) {
        /* a scalar: read it through the getters */
        if (t == AMP_GGUF_BOOL) {
            bool b = false;
            amp_gguf_get_bool(f, key, &b);
            fputs(b ? "true" : "false", stdout);
        } else if (t == AMP_GGUF_F32 || t == AMP_GGUF_F64) {
            double d = 0;
            amp_gguf_get_float(f, key, &d);
            if (t == AMP_GGUF_F32) print_f32((float)d);
            else fputs(cli_num(d).s, stdout);
        } else {
            int64_t v;
            double d;
            if (amp_gguf_get_int(f, key, &v) == AMP_OK) printf("%" PRId64, v);
            else if (amp_gguf_get_float(f, key, &d) == AMP_OK) printf("%.0f", d); /* a u64 above INT64_MAX */
        }
        return;
    }
    amp_gguf_type et = amp_gguf_arr_type(f, i);
    uint64_t len = amp_gguf_arr_len(f, i);
    if (et == AMP_GGUF_ARRAY) {
        fputs("(arrays, not listed)", stdout);
        return;
    }
    uint64_t show = et == AMP_GGUF_STRING ? 4 : 8;
    printf("[");
    if (et == AMP_GGUF_STRING) {
        for (uint64_t j = 0; j < len && j < show; j++) {
            amp_gguf_get_arr_str(f, key, j, &s, &n);
            if (j) printf(", ");
            print_gguf_str(s, n, 40);
        }
    } else {
        amp_gguf_type at;
        const void *p;
        uint64_t cnt;
        amp_gguf_get_arr(f, key, &at, &p, &cnt);
        for (uint64_t j = 0; j < len && j < show; j++) {
            if (j) printf(", ");
            print_gguf_scalar(at, (const unsigned char *)p + j * (uint64_t)g_gguf_size[at]);
        }
    }
    if (len > show) printf(", ... %" PRIu64 " more", len - show);
    printf("]");
}

static void print_gguf(const char *path, const amp_gguf *f, bool tensors) {
    char b1[32];
    int64_t nk = amp_gguf_kv_count(f), nt = amp_gguf_tensor_count(f);
    printf("%s: GGUF v%" PRIu32 ", %s (data from byte %" PRIu64 ", alignment %" PRIu64 "), %" PRId64 " key%s, %" PRId64 " tensor%s\n",
           path, amp_gguf_version(f), fmt_bytes((size_t)amp_gguf_file_bytes(f), b1, sizeof b1), amp_gguf_data_offset(f),
           amp_gguf_alignment(f), nk, nk == 1 ? "" : "s", nt, nt == 1 ? "" : "s");
    if (nk > 0) {
        printf("metadata:\n");
        int w = 0;
        for (int64_t i = 0; i < nk; i++) {
            int l = (int)strlen(amp_gguf_key_at(f, i));
            if (l > w) w = l;
        }
        if (w > 40) w = 40;
        for (int64_t i = 0; i < nk; i++) {
            amp_gguf_type t = amp_gguf_kv_type(f, i);
            char type[48];
            if (t == AMP_GGUF_ARRAY)
                snprintf(type, sizeof type, "%s[%" PRIu64 "]", amp_gguf_type_name(amp_gguf_arr_type(f, i)), amp_gguf_arr_len(f, i));
            else snprintf(type, sizeof type, "%s", amp_gguf_type_name(t));
            printf("  %-*s  %-14s  ", w, amp_gguf_key_at(f, i), type);
            print_gguf_value(f, i);
            putchar('\n');
        }
    }
    int w = 4;
    for (int64_t i = 0; i < nt; i++) {
        amp_gguf_tensor_info in;
        amp_gguf_tensor_at(f, i, &in);
        int l = (int)strlen(in.name);
        if (l > w) w = l;
    }
    tensor_table t;
    table_begin(&t, w, tensors && nt > 0, "type");
    for (int64_t i = 0; i < nt; i++) {
        amp_gguf_tensor_info in;
        amp_gguf_tensor_at(f, i, &in);
        int64_t shape[4], numel = 1;
        for (int d = 0; d < in.ndim; d++) {
            shape[d] = in.ne[in.ndim - 1 - d]; /* torch order */
            numel *= in.ne[d];                 /* bounded by the file's bytes (validated) */
        }
        table_row(&t, in.name, amp_gguf_ggml_type_name(in.ggml_type), in.ndim, shape, numel, in.nbytes);
    }
    table_end(&t);
}

/* A GGUF file: its magic, or the name of one (so that a damaged one gets the GGUF reader's message). */
static bool looks_gguf(const char *path) {
    size_t n = strlen(path);
    if (n >= 5 && !strcasecmp(path + n - 5, ".gguf")) return true;
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return false; /* a FIFO would block fopen */
    FILE *fp = fopen(path, "rb");
    if (!fp) return false;
    char m[4];
    bool yes = fread(m, 1, 4, fp) == 4 && !memcmp(m, "GGUF", 4);
    fclose(fp);
    return yes;
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
    if (looks_gguf(path)) {
        amp_gguf *g = amp_gguf_open(path);
        if (!g) return cli_fail("%s", amp_last_error());
        print_gguf(path, g, tensors);
        amp_gguf_close(g);
        return CLI_OK;
    }
    amp_safetensors *f = amp_safetensors_read(path);
    if (!f) return cli_fail("%s", amp_last_error());
    print_file(path, f, tensors);
    amp_safetensors_free(f);
    return CLI_OK;
}
