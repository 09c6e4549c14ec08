#!/usr/bin/env python3
"""PyTorch side of `amp bench gemm`: a worker process that times torch.mm on
request, so amp can interleave its measurement rounds with PyTorch's in one
run (both share the machine's cores; interleaving spreads a slow moment of a
shared machine over both).

    /usr/bin/python3 tools/bench_torch_mm.py --threads 2

Protocol, one line each way:
    startup      -> "ready <torch version> <threads>"
    "mm N OP DT R"  (OP in NN NT TN, DT in f32 bf16; R timed calls, one
                     untimed call first when the operands are new)
                 -> "ok t1 ... tR" (seconds per call, time.perf_counter
                     around torch.mm only)
    "quit" or end of input: exit.
Errors come back as "err <message>". Operands are torch.rand n x n, made once
per (N, DT) and reused; NT multiplies A by B.t(), TN A.t() by B (views, as a
transposed operand reaches oneDNN from Python)."""
import argparse
import sys
import time

# Debian's torch uses Debian's OpenBLAS for f32: its core type and thread
# count are set before torch loads it (tools/bench_env.py)
import bench_env  # noqa: E402 (tools/, the script's directory)

bench_env.prepare(bench_env.threads_arg(sys.argv[1:]))

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    print("ready %s %d" % (torch.__version__, torch.get_num_threads()), flush=True)
    cache = {}
    dts = {"f32": torch.float32, "bf16": torch.bfloat16}
    for line in sys.stdin:
        f = line.split()
        if not f or f[0] == "quit":
            break
        try:
            if f[0] != "mm" or len(f) != 5 or f[2] not in ("NN", "NT", "TN") or f[3] not in dts:
                raise ValueError("bad request: " + line.strip())
            n, op, dt, reps = int(f[1]), f[2], f[3], int(f[4])
            key = (n, dt)
            if key not in cache:
                torch.manual_seed(n)
                cache.clear()  # one size at a time: the operands of 4096 are 64 MB each
                cache[key] = (torch.rand(n, n).to(dts[dt]), torch.rand(n, n).to(dts[dt]))
                fresh = True
            else:
                fresh = False
            x, y = cache[key]
            A = x.t() if op == "TN" else x
            B = y.t() if op == "NT" else y
            if fresh:
                torch.mm(A, B)
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                torch.mm(A, B)
                ts.append(time.perf_counter() - t0)
            print("ok " + " ".join("%.9f" % t for t in ts), flush=True)
        except Exception as e:  # report and keep serving
            print("err %s" % str(e).replace("\n", " "), flush=True)


if __name__ == "__main__":
    main()
