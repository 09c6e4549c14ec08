#!/usr/bin/env python3
"""PyTorch side of `amp bench precision --device cuda`: a worker that times
torch.mm on the GPU on request, so amp interleaves its rounds with PyTorch's
in one run (the seeds' benchmark_precision: 4096 x 4096 in f32, tf32, f16,
bf16).

    python3 tools/bench_torch_cuda_mm.py        (PyTorch with CUDA)

Protocol, one line each way:
    startup        -> "ready <torch version> <GPU name> <flags>" or "err <why>"
    "mm N MODE R"  (MODE in f32 tf32 f16 bf16: R back-to-back torch.mm calls
                    after one untimed call when the operands are new, timed
                    on the host from a synchronised GPU to the end of the
                    last call, as amp's side is)
                   -> "ok <seconds per call>"
    "quit" or end of input: exit.
f32 runs with TF32 off and tf32 with it on (torch.backends.cuda.matmul.
allow_tf32, torch's switch for the seeds' "tf32"); f16/bf16 use torch's
defaults for reduced-precision reductions (printed in the ready line).
Operands: torch.randn n x n made once per (N, MODE) on the GPU."""
import sys
import time

try:
    import torch
except Exception as e:  # noqa: BLE001
    print("err cannot import torch: %s" % e, flush=True)
    sys.exit(0)


def main():
    if not torch.cuda.is_available():
        print("err torch.cuda.is_available() is False (torch %s)" % torch.__version__, flush=True)
        return
    m = torch.backends.cuda.matmul
    flags = "fp16_reduced_reduction=%s bf16_reduced_reduction=%s" % (
        getattr(m, "allow_fp16_reduced_precision_reduction", "?"),
        getattr(m, "allow_bf16_reduced_precision_reduction", "?"))
    print("ready %s %s %s" % (torch.__version__, torch.cuda.get_device_name().replace(" ", "_"), flags), flush=True)
    dts = {"f32": torch.float32, "tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    cache = {}
    for line in sys.stdin:
        f = line.split()
        if not f or f[0] == "quit":
            break
        try:
            if f[0] != "mm" or len(f) != 4 or f[2] not in dts:
                raise ValueError("bad request: " + line.strip())
            n, mode, reps = int(f[1]), f[2], int(f[3])
            m.allow_tf32 = mode == "tf32"
            key = (n, mode)
            fresh = key not in cache
            if fresh:
                cache.clear()
                g = torch.Generator(device="cuda").manual_seed(1)
                cache[key] = (torch.randn(n, n, device="cuda", dtype=torch.float32, generator=g).to(dts[mode]),
                              torch.randn(n, n, device="cuda", dtype=torch.float32, generator=g).to(dts[mode]))
            a, b = cache[key]
            if fresh:
                torch.mm(a, b)
            # host wall clock from an idle GPU to the end of the last product,
            # as amp's side measures (launch overheads included on both sides)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(a, b)
            torch.cuda.synchronize()
            print("ok %.9g" % ((time.perf_counter() - t0) / reps), flush=True)
        except Exception as e:  # noqa: BLE001
            print("err %s" % str(e).replace("\n", " "), flush=True)


if __name__ == "__main__":
    main()
