#!/usr/bin/env python3
"""PyTorch CPU side of `amp bench train`: ms per training step of the same
models, batch, optimizer and precision modes as amp, on random data shaped like
Fashion-MNIST (data loading is not timed on either side).

    /usr/bin/python3 tools/bench_torch.py --model mlp --batch 128 --steps 30 --threads 2

Prints one JSON object: {"torch": version, "threads": T, "model": ..., "modes":
{"fp32": ms, "fp16": ms or null, "bf16": ms}}. fp16 on CPU uses autocast with
float16 where this PyTorch supports it (1.13 does not: null)."""
import argparse
import json
import os
import statistics
import time
import warnings

# Debian's torch uses Debian's OpenBLAS, which picks SSE3 kernels on recent
# CPUs unless told otherwise (must be set before torch loads it).
os.environ.setdefault("OPENBLAS_CORETYPE", "SKYLAKEX")

import torch


def build(name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                         nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(),
                         nn.Dropout(0.25), nn.Linear(128, 10))


def bench(model_name, batch, steps, dtype):
    torch.manual_seed(0)
    m = build(model_name)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    times = []
    for i in range(steps + 5):
        t0 = time.perf_counter()
        opt.zero_grad()
        if dtype is None:
            loss = torch.nn.functional.cross_entropy(m(x), y)
        else:
            with torch.autocast("cpu", dtype=dtype):
                loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        if i >= 5:
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "model": a.model, "batch": a.batch,
           "modes": {}}
    out["modes"]["fp32"] = bench(a.model, a.batch, a.steps, None)
    for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # "autocast ... not supported": no number
                out["modes"][name] = bench(a.model, a.batch, a.steps, dt)
        except Exception:  # e.g. no f16 CPU autocast in this version
            out["modes"][name] = None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
