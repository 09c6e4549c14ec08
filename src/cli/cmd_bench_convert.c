/* amp bench convert: conversion throughput per CPU path and direction, on one
 * thread and on T threads, beside memcpy bandwidth measured in the same run.
 * GB/s counts bytes read plus bytes written. JSON fields are documented in
 * docs/BENCHMARKS.md (section "amp bench convert"). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_util.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f, "usage: amp bench convert [--threads T] [--size N] [--json FILE]\n\n"
               "Throughput of the array conversions f32 <-> f16, bf16, fp8 e4m3, fp8 e5m2 and\n"
               "stochastic rounding f32 -> bf16, for every CPU path this machine supports, on 1\n"
               "thread and on T threads, with memcpy bandwidth measured in the same run.\n"
               "GB/s counts bytes read + bytes written (f32 -> f16: 6 bytes per element).\n\n"
               "options:\n"
               "  --threads T   threads for the multi-threaded runs (default: OpenMP's, %d here)\n"
               "  --size N      elements per array (default 16777216 = 64 MiB of f32)\n"
               "  --json FILE   also write the results as JSON (fields: docs/BENCHMARKS.md)\n"
               "  -h, --help    this text\n",
               omp_get_max_threads());
}

typedef enum {
    D_F32_F16,
    D_F16_F32,
    D_F32_BF16,
    D_BF16_F32,
    D_F32_E4M3,
    D_E4M3_F32,
    D_F32_E5M2,
    D_E5M2_F32,
    D_SR_BF16,
    D_COUNT
} direction;

static const struct {
    const char *name;
    size_t in_bytes, out_bytes;
} g_dirs[] = {
    {"f32->f16", 4, 2},  {"f16->f32", 2, 4},  {"f32->bf16", 4, 2}, {"bf16->f32", 2, 4},     {"f32->e4m3", 4, 1},
    {"e4m3->f32", 1, 4}, {"f32->e5m2", 4, 1}, {"e5m2->f32", 1, 4}, {"sr f32->bf16", 4, 2},
};
_Static_assert(sizeof g_dirs / sizeof g_dirs[0] == D_COUNT, "g_dirs: one entry per direction");

typedef struct {
    direction dir;
    size_t n;
    float *f32, *f32_out;
    uint16_t *u16, *u16_out;
    uint8_t *u8, *u8_out;
    uint64_t counter;
} run_arg;

static void run_once(void *p) {
    run_arg *a = p;
    switch (a->dir) {
    case D_F32_F16: amp_f32_to_f16_array(a->u16_out, a->f32, a->n); break;
    case D_F16_F32: amp_f16_to_f32_array(a->f32_out, a->u16, a->n); break;
    case D_F32_BF16: amp_f32_to_bf16_array(a->u16_out, a->f32, a->n); break;
    case D_BF16_F32: amp_bf16_to_f32_array(a->f32_out, a->u16, a->n); break;
    case D_F32_E4M3: amp_f32_to_e4m3_array(a->u8_out, a->f32, a->n); break;
    case D_E4M3_F32: amp_e4m3_to_f32_array(a->f32_out, a->u8, a->n); break;
    case D_F32_E5M2: amp_f32_to_e5m2_array(a->u8_out, a->f32, a->n); break;
    case D_E5M2_F32: amp_e5m2_to_f32_array(a->f32_out, a->u8, a->n); break;
    case D_SR_BF16:
        amp_f32_to_bf16_sr_array(a->u16_out, a->f32, a->n, 42, a->counter);
        a->counter += a->n;
        break;
    default: break;
    }
}

/* First touch from the threads that will use the pages. */
static void *alloc_touch(size_t bytes) {
    size_t cap = (bytes + 63) & ~(size_t)63;
    unsigned char *p = aligned_alloc(64, cap ? cap : 64);
    if (!p) return NULL;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < cap; i += 4096) p[i] = 0;
    memset(p, 0, cap);
    return p;
}

int cmd_bench_convert(int argc, char **argv) {
    long threads = omp_get_max_threads(), size = 16777216;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            usage(stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (cli_parse_long(argv[++i], 1, 4096, &threads) != 0)
                return cli_usage_error(usage, "bench convert: --threads: '%s' is not a thread count (1..4096)", argv[i]);
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (cli_parse_long(argv[++i], 1, 1L << 31, &size) != 0)
                return cli_usage_error(usage, "bench convert: --size: '%s' is not an element count (1..2^31)", argv[i]);
        } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else {
            return cli_usage_error(usage, "bench convert: unknown or incomplete argument '%s'", argv[i]);
        }
    }
    const size_t n = (size_t)size;
    const int saved_threads = omp_get_max_threads();
    const amp_cpu_path saved_path = amp_cpu_active();

    run_arg a = {0};
    a.n = n;
    a.f32 = alloc_touch(n * 4);
    a.f32_out = alloc_touch(n * 4);
    a.u16 = alloc_touch(n * 2);
    a.u16_out = alloc_touch(n * 2);
    a.u8 = alloc_touch(n);
    a.u8_out = alloc_touch(n);
    if (!a.f32 || !a.f32_out || !a.u16 || !a.u16_out || !a.u8 || !a.u8_out) {
        free(a.f32), free(a.f32_out), free(a.u16), free(a.u16_out), free(a.u8), free(a.u8_out);
        return cli_fail("bench convert: cannot allocate the arrays for %zu elements", n);
    }
    /* activations-like data: normal values with a spread of magnitudes */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u1 = ((double)(s >> 11) + 1.0) / 9007199254740993.0;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u2 = (double)(s >> 11) / 9007199254740992.0;
        a.f32[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) * 8.0);
    }
    amp_f32_to_bf16_array(a.u16, a.f32, n);
    amp_f32_to_e4m3_array(a.u8, a.f32, n);

    int tlist[2] = {1, (int)threads};
    int ntl = threads > 1 ? 2 : 1;
    double memcpy_gbps[2];
    for (int t = 0; t < ntl; t++) {
        omp_set_num_threads(tlist[t]);
        memcpy_gbps[t] = bench_memcpy_gbps(n * 4);
    }

    bench_print_machine();
    printf("amp bench convert: %zu elements; GB/s counts bytes read + written\n", n);
    printf("memcpy of %zu bytes:", n * 4);
    for (int t = 0; t < ntl; t++) printf("  %d thread%s %.2f GB/s", tlist[t], tlist[t] > 1 ? "s" : "", memcpy_gbps[t]);
    printf("\n\n%-13s %-7s", "direction", "path");
    for (int t = 0; t < ntl; t++) {
        char h[32];
        snprintf(h, sizeof h, "GB/s %dT", tlist[t]);
        printf(" %10s %9s %9s", h, "/memcpy", "Gelem/s");
    }
    printf("\n");

    cJSON *root = cJSON_CreateObject(), *results = cJSON_CreateArray(), *mj = cJSON_CreateArray();
    cJSON_AddStringToObject(root, "benchmark", "convert");
    cJSON_AddItemToObject(root, "machine", bench_machine_json());
    cJSON_AddNumberToObject(root, "elements", (double)n);
    cJSON_AddNumberToObject(root, "threads", (double)threads);
    for (int t = 0; t < ntl; t++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddNumberToObject(m, "threads", tlist[t]);
        cJSON_AddNumberToObject(m, "bytes", (double)(n * 4));
        cJSON_AddNumberToObject(m, "gbps", memcpy_gbps[t]);
        cJSON_AddItemToArray(mj, m);
    }
    cJSON_AddItemToObject(root, "memcpy", mj);

    for (int d = 0; d < D_COUNT; d++) {
        for (int p = 0; p < AMP_CPU_PATH_COUNT; p++) {
            if (!amp_cpu_supported((amp_cpu_path)p)) continue;
            amp_cpu_select((amp_cpu_path)p);
            printf("%-13s %-7s", g_dirs[d].name, amp_cpu_path_name((amp_cpu_path)p));
            for (int t = 0; t < ntl; t++) {
                omp_set_num_threads(tlist[t]);
                a.dir = (direction)d;
                double sec = bench_time(run_once, &a, 3, 0.25);
                double bytes = (double)n * (double)(g_dirs[d].in_bytes + g_dirs[d].out_bytes);
                double gbps = bytes / sec / 1e9, gelem = (double)n / sec / 1e9;
                printf(" %10.2f %9.2f %9.3f", gbps, gbps / memcpy_gbps[t], gelem);
                fflush(stdout);
                cJSON *r = cJSON_CreateObject();
                cJSON_AddStringToObject(r, "direction", g_dirs[d].name);
                cJSON_AddStringToObject(r, "path", amp_cpu_path_name((amp_cpu_path)p));
                cJSON_AddNumberToObject(r, "threads", tlist[t]);
                cJSON_AddNumberToObject(r, "bytes_per_element", (double)(g_dirs[d].in_bytes + g_dirs[d].out_bytes));
                cJSON_AddNumberToObject(r, "seconds", sec);
                cJSON_AddNumberToObject(r, "gbps", gbps);
                cJSON_AddNumberToObject(r, "gelem_per_s", gelem);
                cJSON_AddNumberToObject(r, "memcpy_ratio", gbps / memcpy_gbps[t]);
                cJSON_AddItemToArray(results, r);
            }
            printf("\n");
        }
    }
    cJSON_AddItemToObject(root, "results", results);
    printf("\n/memcpy: conversion GB/s over memcpy GB/s on the same thread count (1.0 = as fast as copying).\n");

    amp_cpu_select(saved_path);
    omp_set_num_threads(saved_threads);
    int rc = bench_write_json(json, root) == 0 ? CLI_OK : CLI_FAIL;
    if (json && rc == CLI_OK) printf("wrote %s\n", json);
    cJSON_Delete(root);
    free(a.f32), free(a.f32_out), free(a.u16), free(a.u16_out), free(a.u8), free(a.u8_out);
    return rc;
}
