#!/usr/bin/env python3
"""PyTorch's side of test_cuda_attention's t_gpt_shape_time: torch SDPA
(flash attention where it applies) forward and backward at GPT-2 124M's
attention shape (B 4 x 12 heads, T 1024, head dim 64, causal), timed as
amp's side is: the best of 5 rounds, each from a synchronised GPU to the
end of the call.

    python3 tools/bench_torch_sdpa_cuda.py        (PyTorch with CUDA)

Prints one line per dtype and backend choice, in the same units as
test_cuda_attention's "info: GPT-2 attention" lines (ms, TFLOP/s at 2 and 5
causal GEMMs, and x12 layers per step)."""
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001
    print("cannot import torch: %s" % e)
    sys.exit(0)


def bench(dt, backend):
    nb, T, E = 48, 1024, 64
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, go = (torch.randn(4, 12, T, E, device="cuda", dtype=dt, generator=g) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)
    ctx = torch.nn.attention.sdpa_kernel(backend) if backend is not None else None
    tf = tb = 1e30
    if ctx:
        ctx.__enter__()
    try:
        for rep in range(6):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            y.backward(go)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            q.grad = k.grad = v.grad = None
            if rep:  # the first round warms up
                tf = min(tf, (t1 - t0) * 1e3)
                tb = min(tb, (t2 - t1) * 1e3)
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    fl = 2.0 * nb * T * T * E  # one causal GEMM: 2 nb T^2/2 E
    name = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[dt]
    print("torch %s SDPA %s [48, 1024, 64] causal: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms "
          "(%.1f TFLOP/s at 5 GEMMs); x12 layers: %.2f ms per step"
          % (torch.__version__, name + ("" if backend is None else " " + str(backend).split(".")[-1]), tf,
             2 * fl / tf * 1e-9, tb, 5 * fl / tb * 1e-9, 12 * (tf + tb)))


def main():
    if not torch.cuda.is_available():
        print("torch.cuda.is_available() is False (torch %s)" % torch.__version__)
        return
    print("GPU: %s" % torch.cuda.get_device_name())
    B = torch.nn.attention.SDPBackend
    for dt, backend in ((torch.bfloat16, None), (torch.bfloat16, B.FLASH_ATTENTION), (torch.float32, None)):
        try:
            bench(dt, backend)
        except Exception as e:  # noqa: BLE001
            print("torch %s %s: %s" % (dt, backend, e))


if __name__ == "__main__":
    main()
