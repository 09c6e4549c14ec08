/* Which OPENBLAS_CORETYPE the benchmarks give OpenBLAS (amp bench gemm's
 * sgemm column; PyTorch's f32 products in the workers). Debian's OpenBLAS is
 * a DYNAMIC_ARCH build that picks slow kernels on CPUs newer than it knows
 * unless OPENBLAS_CORETYPE names a core, and runs whatever core it is told
 * to: SKYLAKEX on a CPU without AVX-512 dies of SIGILL at the first sgemm.
 *
 * The rule, from the CPU's feature flags as the kernel lists them in
 * /proc/cpuinfo (which leaves out what the OS does not enable): "SKYLAKEX"
 * with AVX-512 F, BW, DQ and VL besides AVX2 and FMA; "HASWELL" with AVX2
 * and FMA; otherwise NULL (leave the variable unset: OpenBLAS's own choice).
 * tools/bench_env.py applies the same rule for the Python tools run alone.
 * A header so that tests/test_bench_openblas.c checks it without the CLI. */
#ifndef AMP_CLI_BENCH_OPENBLAS_H
#define AMP_CLI_BENCH_OPENBLAS_H

#include <stdbool.h>
#include <string.h>

/* whether the word list `flags` (words separated by spaces, tabs or line
 * ends) holds the word `name`; one separator set for skipping and for
 * measuring a word, so every pass moves on */
static inline bool bench_cpu_flag(const char *flags, const char *name) {
    static const char sep[] = " \t\n\r";
    const size_t n = strlen(name);
    for (const char *p = flags; p && *p;) {
        p += strspn(p, sep);
        const size_t w = strcspn(p, sep);
        if (w == n && !strncmp(p, name, n)) return true;
        p += w;
    }
    return false;
}

/* the core type for a CPU with these /proc/cpuinfo flags, or NULL */
static inline const char *bench_openblas_coretype(const char *flags) {
    if (!flags || !bench_cpu_flag(flags, "avx2") || !bench_cpu_flag(flags, "fma")) return NULL;
    if (bench_cpu_flag(flags, "avx512f") && bench_cpu_flag(flags, "avx512bw") && bench_cpu_flag(flags, "avx512dq") &&
        bench_cpu_flag(flags, "avx512vl"))
        return "SKYLAKEX";
    return "HASWELL";
}

#endif
