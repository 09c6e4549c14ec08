"""The environment PyTorch's benchmark workers need before torch loads
(tools/bench_torch.py, tools/bench_torch_mm.py): import this module and call
prepare() before `import torch`.

OPENBLAS_CORETYPE: Debian's torch does its f32 products in Debian's OpenBLAS,
a DYNAMIC_ARCH build that picks slow kernels on CPUs newer than it knows unless
told a core, and runs whatever core it is told: SKYLAKEX on a CPU without
AVX-512 dies of SIGILL. The rule (the same as amp's, src/cli/bench_openblas.h),
from the CPU's flags as /proc/cpuinfo lists them: SKYLAKEX with AVX-512 F, BW,
DQ and VL besides AVX2 and FMA; HASWELL with AVX2 and FMA; otherwise left
unset. A value already in the environment (the user's, or the one amp chose
for the worker it started) is kept.

Threads: torch.set_num_threads does not limit OpenBLAS's own threads, so a
worker that claims N threads sets OPENBLAS_NUM_THREADS and OMP_NUM_THREADS to N
before torch loads OpenBLAS; one process serves one thread count.

    /usr/bin/python3 tools/bench_env.py      prints the core type for this CPU
"""
import os


def openblas_coretype(flags):
    """The OPENBLAS_CORETYPE for a CPU with these /proc/cpuinfo flags (a string
    of space-separated words, or an iterable of words), or None."""
    f = set(flags.split()) if isinstance(flags, str) else set(flags)
    if not {"avx2", "fma"} <= f:
        return None
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= f:
        return "SKYLAKEX"
    return "HASWELL"


def cpu_flags(path="/proc/cpuinfo"):
    """The first "flags" line of /proc/cpuinfo ("" if it cannot be read)."""
    try:
        with open(path) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return value.strip()
    except OSError:
        pass
    return ""


def prepare(threads=0):
    """Set OPENBLAS_CORETYPE (unless set) and, for threads > 0, the BLAS and
    OpenMP thread counts. Call before `import torch`."""
    if "OPENBLAS_CORETYPE" not in os.environ:
        core = openblas_coretype(cpu_flags())
        if core:
            os.environ["OPENBLAS_CORETYPE"] = core
    if threads and threads > 0:
        os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)


def threads_arg(argv):
    """The N of "--threads N" or "--threads=N" in argv; 0 when absent or not a
    number ("best")."""
    for i, a in enumerate(argv):
        v = argv[i + 1] if a == "--threads" and i + 1 < len(argv) else a[10:] if a.startswith("--threads=") else None
        if v is not None:
            return int(v) if v.isdigit() else 0
    return 0


if __name__ == "__main__":
    print(openblas_coretype(cpu_flags()) or "(unset: no AVX2 and FMA)")
