/* The OPENBLAS_CORETYPE the benchmarks give OpenBLAS (src/cli/bench_openblas.h),
 * issue 23: `amp bench gemm` set SKYLAKEX whenever the variable was unset,
 * and Debian's OpenBLAS obeys it, so on an AVX2-only CPU (Zen 2) it died of
 * SIGILL (exit 132) at its first sgemm, and PyTorch's columns of amp bench
 * train/gpt showed n/a. Now the core type comes from the CPU's flags:
 *   - the rule on real /proc/cpuinfo flag lines: Zen 2 (AVX2, FMA, no
 *     AVX-512) HASWELL; Zen 4 (AVX-512 F/BW/DQ/VL) SKYLAKEX; Knights Landing
 *     (AVX-512F without BW/DQ/VL) HASWELL; Sandy Bridge (AVX, no AVX2) none;
 *     whole words only ("avx512fp16" is not "avx512f"); words separated
 *     by line ends too (a '\n' made bench_cpu_flag loop for ever);
 *   - `amp bench gemm` prints the core type this machine's flags give, with
 *     AMP_CPU=avx2 too (the CPU decides what OpenBLAS may run, not amp's
 *     path), and keeps a value set in the environment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_openblas.h"
#include "test_support.h"

/* EPYC 7702 (Zen 2), as /proc/cpuinfo lists it */
static const char ZEN2[] =
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx "
    "mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid aperfmperf rapl pni "
    "pclmulqdq monitor ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy "
    "svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext perfctr_core "
    "perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 hw_pstate ssbd mba ibrs ibpb stibp vmmcall fsgsbase bmi1 "
    "avx2 smep bmi2 cqm rdt_a rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves cqm_llc "
    "cqm_occup_llc cqm_mbm_total cqm_mbm_local clzero irperf xsaveerptr rdpru wbnoinvd arat npt lbrv svm_lock "
    "nrip_save tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold avic v_vmsave_vmload vgif "
    "v_spec_ctrl umip rdpid overflow_recov succor smca sme sev sev_es";
/* EPYC 9004 (Zen 4) under a hypervisor */
static const char ZEN4[] =
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx "
    "mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid "
    "tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave "
    "avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext "
    "vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma "
    "clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_bf16 clzero xsaveerptr "
    "arat avx512vbmi umip avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm";
/* Xeon Phi 7250 (Knights Landing): AVX-512F, CD, ER, PF; no BW/DQ/VL */
static const char KNL[] = "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c bmi1 avx2 avx512f avx512pf avx512er "
                          "avx512cd bmi2";
/* Xeon E5-2670 (Sandy Bridge): AVX without AVX2 or FMA */
static const char SNB[] = "fpu sse sse2 ssse3 cx16 sse4_1 sse4_2 x2apic popcnt aes xsave avx";

static void expect(const char *flags, const char *want, const char *what) {
    const char *got = bench_openblas_coretype(flags);
    if (!want ? got != NULL : !got || strcmp(got, want))
        fail_msg("%s: core type %s, expected %s", what, got ? got : "(none)", want ? want : "(none)");
}

static void t_rule(void **s) {
    (void)s;
    expect(ZEN2, "HASWELL", "Zen 2");
    expect(ZEN4, "SKYLAKEX", "Zen 4");
    expect(KNL, "HASWELL", "Knights Landing");
    expect(SNB, NULL, "Sandy Bridge");
    expect("", NULL, "no flags");
    expect(NULL, NULL, "NULL");
    /* whole words: neither a prefix nor a longer name counts */
    expect("avx2 fma avx512fp16 avx512bw avx512dq avx512vl", "HASWELL", "avx512fp16 is not avx512f");
    expect("avx2 fma avx512 avx512bw avx512dq avx512vl", "HASWELL", "avx512 is not avx512f");
    expect("avx2x fma", NULL, "avx2x is not avx2");
    expect("avx2\tfma\tavx512f\tavx512bw\tavx512dq\tavx512vl", "SKYLAKEX", "tab-separated");
    /* a line end between words (it looped for ever: skipped as no separator, measured as one) */
    expect("avx2\nfma", "HASWELL", "newline-separated");
    expect("avx2\r\nfma\n", "HASWELL", "CRLF-separated");
    expect("avx512f avx512bw avx512dq avx512vl fma", NULL, "AVX-512 without AVX2 listed");
}

/* this machine's flags, as the CLI reads them */
static char *machine_flags(void) {
    char *info = test_read_file("/proc/cpuinfo", NULL);
    if (!info) return NULL;
    char *p = strstr(info, "\nflags");
    if (!p) {
        free(info);
        return NULL;
    }
    p = strchr(p, ':');
    char *end = p ? strchr(p, '\n') : NULL;
    if (!p || !end) {
        free(info);
        return NULL;
    }
    *end = 0;
    char *r = strdup(p + 1);
    free(info);
    return r;
}

#define QUICK "bench gemm --sections square --sizes 16 --rounds 1 --dtypes f32 --threads 1 --no-torch"

static void t_bench_gemm_chooses_from_cpu(void **s) {
    (void)s;
    char *flags = machine_flags();
    if (!flags) skip();
    const char *ct = bench_openblas_coretype(flags);
    char want[200];
    if (ct)
        snprintf(want, sizeof want, "\nOPENBLAS_CORETYPE: %s (from this CPU's flags: %s)\n", ct,
                 !strcmp(ct, "SKYLAKEX") ? "AVX-512 F/BW/DQ/VL" : "AVX2 and FMA, no AVX-512");
    else
        snprintf(want, sizeof want, "\nOPENBLAS_CORETYPE: unset (left unset, OpenBLAS's own choice: this CPU has no AVX2 and FMA)\n");
    free(flags);
    /* on the machine's path and on the avx2 path alike (AMP_CPU does not change the CPU) */
    const char *envs[] = {"env -u OPENBLAS_CORETYPE", "env -u OPENBLAS_CORETYPE AMP_CPU=avx2"};
    for (int i = 0; i < 2; i++) {
        if (i == 1 && !amp_cpu_supported(AMP_CPU_AVX2)) break;
        char *out, *err;
        int rc = test_run_cli(envs[i], QUICK, &out, &err);
        if (rc != 0) fail_msg("%s amp " QUICK ": exit %d\n%s", envs[i], rc, err);
        if (!strstr(out, want)) fail_msg("%s amp " QUICK ": expected the line%s in\n%s", envs[i], want, out);
        test_free_all(out, err);
    }
    /* a value the user set is kept, whatever it is */
    char *out, *err;
    int rc = test_run_cli("OPENBLAS_CORETYPE=Haswell", QUICK, &out, &err);
    if (rc != 0) fail_msg("exit %d\n%s", rc, err);
    if (!strstr(out, "\nOPENBLAS_CORETYPE: Haswell (set in the environment)\n")) fail_msg("the user's value was not kept:\n%s", out);
    test_free_all(out, err);
}

AMP_TEST_MAIN(t_rule, t_bench_gemm_chooses_from_cpu)
