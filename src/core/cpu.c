/* CPU feature detection and code-path selection (cpuid + xgetbv), AMP_CPU,
 * thread count, version. */
#include <cpuid.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/cpu.h"
#include "core/env.h"
#include "core/error.h"

static bool g_supported[AMP_CPU_PATH_COUNT];
static bool g_has_bf16cvt;             /* AVX512_BF16 (vcvtne2ps2bf16) */
static _Atomic int g_use_bf16cvt = -1; /* -1: follow g_has_bf16cvt */
static _Atomic int g_active = AMP_CPU_SCALAR;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static amp_status g_init_status = AMP_OK;
static char g_init_msg[256];

static const char *g_names[] = {"scalar", "avx2", "avx512", "avx512bf16"};
_Static_assert(sizeof g_names / sizeof g_names[0] == AMP_CPU_PATH_COUNT, "g_names: one name per CPU path");

static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static void detect(void) {
    unsigned a, b, c, d;
    g_supported[AMP_CPU_SCALAR] = true;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
    if (!osxsave || !avx) return;
    uint64_t xcr0 = xgetbv0();
    bool ymm_os = (xcr0 & 0x6) == 0x6;
    bool zmm_os = (xcr0 & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    bool avx2 = b & (1u << 5);
    bool avx512f = b & (1u << 16), avx512dq = b & (1u << 17), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
    g_supported[AMP_CPU_AVX2] = ymm_os && avx2 && fma && f16c;
    g_supported[AMP_CPU_AVX512] = g_supported[AMP_CPU_AVX2] && zmm_os && avx512f && avx512dq && avx512bw && avx512vl;
    /* leaf 7 subleaf 1, eax bit 5: AVX512_BF16 */
    if (g_supported[AMP_CPU_AVX512] && __get_cpuid_count(7, 1, &a, &b, &c, &d)) g_has_bf16cvt = a & (1u << 5);
    /* the avx512bf16 path: the AVX-512 path plus vdpbf16ps for bf16 GEMMs */
    g_supported[AMP_CPU_AVX512BF16] = g_supported[AMP_CPU_AVX512] && g_has_bf16cvt;
}

static void init_once(void) {
    detect();
    /* AMP_CACHE_MB=abc or -1 was ignored silently: name it (the default is used meanwhile) */
    int est = amp__env_check(g_init_msg, sizeof g_init_msg);
    if (est != AMP_OK) g_init_status = (amp_status)est;
    amp_cpu_path best = AMP_CPU_SCALAR;
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++)
        if (g_supported[p]) best = (amp_cpu_path)p;
    atomic_store(&g_active, (int)best);
    const char *env = getenv("AMP_CPU");
    if (env && *env) {
        amp_cpu_path want;
        int found = 0;
        for (int p = 0; p < AMP_CPU_PATH_COUNT; p++)
            if (strcasecmp(env, g_names[p]) == 0) { want = (amp_cpu_path)p; found = 1; }
        if (!found) {
            g_init_status = AMP_ERR_ARG;
            snprintf(g_init_msg, sizeof g_init_msg,
                     "amp_init: AMP_CPU='%s' is not a CPU path (expected scalar, avx2, avx512 or avx512bf16)", env);
        } else if (!g_supported[want]) {
            g_init_status = AMP_ERR_UNSUPPORTED;
            snprintf(g_init_msg, sizeof g_init_msg,
                     "amp_init: AMP_CPU=%s requested but this CPU does not support it (best available: %s)",
                     g_names[want], g_names[best]);
        } else {
            atomic_store(&g_active, (int)want);
        }
    }
}

bool amp__cpu_bf16cvt(void) {
    pthread_once(&g_once, init_once);
    int u = atomic_load_explicit(&g_use_bf16cvt, memory_order_relaxed);
    return u < 0 ? g_has_bf16cvt : (bool)u;
}

bool amp__cpu_bf16cvt_supported(void) {
    pthread_once(&g_once, init_once);
    return g_has_bf16cvt;
}

void amp__cpu_set_bf16cvt(bool on) {
    pthread_once(&g_once, init_once);
    atomic_store(&g_use_bf16cvt, on && g_has_bf16cvt ? 1 : 0);
}

amp_status amp_init(void) {
    pthread_once(&g_once, init_once);
    if (g_init_status != AMP_OK) return amp_error(g_init_status, "%s", g_init_msg);
    return AMP_OK;
}

amp_cpu_path amp_cpu_active(void) {
    pthread_once(&g_once, init_once);
    return (amp_cpu_path)atomic_load_explicit(&g_active, memory_order_relaxed);
}

bool amp_cpu_supported(amp_cpu_path p) {
    pthread_once(&g_once, init_once);
    return (int)p >= 0 && p < AMP_CPU_PATH_COUNT && g_supported[p];
}

amp_cpu_path amp_cpu_best(void) {
    pthread_once(&g_once, init_once);
    amp_cpu_path best = AMP_CPU_SCALAR;
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++)
        if (g_supported[p]) best = (amp_cpu_path)p;
    return best;
}

amp_status amp_cpu_select(amp_cpu_path p) {
    pthread_once(&g_once, init_once);
    if ((int)p < 0 || p >= AMP_CPU_PATH_COUNT)
        return amp_error(AMP_ERR_ARG, "amp_cpu_select: path %d is not a CPU path", (int)p);
    if (!g_supported[p])
        return amp_error(AMP_ERR_UNSUPPORTED, "amp_cpu_select: this CPU does not support the %s path", g_names[p]);
    atomic_store(&g_active, (int)p);
    return AMP_OK;
}

const char *amp_cpu_path_name(amp_cpu_path p) {
    return ((int)p >= 0 && p < AMP_CPU_PATH_COUNT) ? g_names[p] : "invalid-path";
}

amp_status amp_cpu_path_parse(const char *s, amp_cpu_path *out) {
    if (!s || !out) return amp_error(AMP_ERR_ARG, "amp_cpu_path_parse: NULL argument");
    for (int p = 0; p < AMP_CPU_PATH_COUNT; p++)
        if (strcasecmp(s, g_names[p]) == 0) { *out = (amp_cpu_path)p; return AMP_OK; }
    return amp_error(AMP_ERR_FORMAT, "amp_cpu_path_parse: '%s' is not a CPU path (expected scalar, avx2, avx512 or avx512bf16)", s);
}

void amp_set_num_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
}

int amp_get_num_threads(void) { return omp_get_max_threads(); }

#ifndef AMP_VERSION_STRING_BUILD
#define AMP_VERSION_STRING_BUILD AMP_VERSION
#endif
const char *amp_version(void) { return AMP_VERSION_STRING_BUILD; }
