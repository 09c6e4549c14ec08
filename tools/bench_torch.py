#!/usr/bin/env python3
"""PyTorch CPU side of `amp bench train`: ms per training step of the same
models, batch, optimizer and precision modes as amp, on random data shaped like
Fashion-MNIST or, for the GPT, random tokens (data loading is not timed on
either side).

    /usr/bin/python3 tools/bench_torch.py --model mlp --batch 128 --steps 30 --threads 2
    /usr/bin/python3 tools/bench_torch.py --model gpt --preset gpt2-124m --steps 3 --threads best

Prints one JSON object: {"torch": version, "threads": T, "model": ..., "modes":
{"fp32": ms, "fp16": ms or null, "bf16": ms}}. fp16 on CPU uses autocast with
float16 where this PyTorch supports it (1.13 does not: null).

GPT (tools/nanogpt_model.py: nanoGPT's GPT-2 with tanh GELU), a nanoGPT train
step: forward + cross-entropy, backward, clip_grad_norm_(1.0), AdamW with
nanoGPT's decay groups (betas 0.9/0.95, weight decay 0.1), zero_grad; bf16 is
torch.autocast('cpu', torch.bfloat16) around forward and loss. Presets:
  shakespeare-char  6 layers, 6 heads, 384 wide, block 256, vocab 256 (amp's
                    byte-level tokenizer; nanoGPT's character vocab is 65), batch 16, T 256
  gpt2-124m         12 layers, 12 heads, 768 wide, block 1024, vocab 50257, batch 4, T 64
  tiny              2 layers, 2 heads, 64 wide, block 64, vocab 256, batch 4, T 32 (a quick check)
--n-layer/--n-head/--n-embd/--block-size/--vocab/--batch/--seq override them.
--threads best times 1 thread and every core, each in its own process
(torch's best setting differs by model: the issue asks for torch at its best)
and reports both and the best per mode ("by_threads", "modes"). A process's
thread count, OpenBLAS's included, is fixed before torch loads
(tools/bench_env.py: torch.set_num_threads alone leaves OpenBLAS's threads at
every core), as is OPENBLAS_CORETYPE (from the CPU's flags unless set). Each
mode's time is the median step after one warm-up step.

    /usr/bin/python3 tools/bench_torch.py --serve --threads N

serves `amp bench train`, which interleaves its rounds with PyTorch's (one
such process per thread count: N and 1): prints "ready <version> <threads>",
then answers each line "run MODEL BATCH STEPS THREADS MODE"
(MODE fp32, fp16 or bf16) or, for the GPT, "gpt N_LAYER N_HEAD N_EMBD
BLOCK_SIZE VOCAB BATCH SEQ STEPS THREADS MODE" with "ok <median ms per step>"
or "na" (the mode is not supported by this PyTorch, or THREADS is not this
process's count), until "quit" or end of input."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

# Debian's torch uses Debian's OpenBLAS, which picks SSE3 kernels on recent
# CPUs unless told a core type, and whose own threads torch.set_num_threads
# does not limit: both are set before torch loads it (tools/bench_env.py).
import bench_env  # noqa: E402 (tools/, the script's directory)

bench_env.prepare(bench_env.threads_arg(sys.argv[1:]))

import torch  # noqa: E402


def build(name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1),
                         nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(),
                         nn.Dropout(0.25), nn.Linear(128, 10))


PRESETS = {
    "shakespeare-char": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=256, batch=16, seq=256),
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257, batch=4, seq=64),
    "tiny": dict(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=256, batch=4, seq=32),
}


def bench_gpt(cfg, batch, seq, steps, dtype):
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from nanogpt_model import GPT, Cfg
    torch.manual_seed(0)
    m = GPT(Cfg(**cfg, dropout=0.0, bias=True))
    ps = [p for p in m.parameters()]
    opt = torch.optim.AdamW([{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    x = torch.randint(0, cfg["vocab_size"], (batch, seq))
    y = torch.randint(0, cfg["vocab_size"], (batch, seq))
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        if dtype is None:
            _, loss = m(x, y)
        else:
            with torch.autocast("cpu", dtype=dtype):
                _, loss = m(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i >= 1:
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


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


def serve(threads):
    """threads > 0: this process runs that many threads (bench_env.prepare
    set OpenBLAS's before torch loaded) and answers "na" to a request for
    another count."""
    if threads > 0:
        torch.set_num_threads(threads)
    print("ready %s %d" % (torch.__version__, torch.get_num_threads()), flush=True)
    dts = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
    for line in sys.stdin:
        f = line.split()
        if not f or f[0] == "quit":
            break
        try:
            want = int(f[9]) if f[0] == "gpt" and len(f) == 11 else int(f[4]) if f[0] == "run" and len(f) == 6 else 0
            if threads > 0 and want != threads:
                print("na this worker runs %d threads, not %d" % (threads, want), flush=True)
                continue
            if f[0] == "gpt" and len(f) == 11 and f[10] in dts:
                v = [int(t) for t in f[1:10]]
                cfg = dict(n_layer=v[0], n_head=v[1], n_embd=v[2], block_size=v[3], vocab_size=v[4])
                torch.set_num_threads(v[8])
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    ms = bench_gpt(cfg, v[5], v[6], v[7], dts[f[10]])
                print("ok %.6f" % ms, flush=True)
                continue
            if f[0] != "run" or len(f) != 6 or f[1] not in ("mlp", "cnn") or f[5] not in dts:
                raise ValueError("bad request: " + line.strip())
            torch.set_num_threads(int(f[4]))
            dt = dts[f[5]]
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                ms = bench(f[1], int(f[2]), int(f[3]), dt)
            print("ok %.6f" % ms, flush=True)
        except Warning:
            print("na", flush=True)
        except Exception as e:
            print("na %s" % str(e).replace("\n", " "), flush=True)


def main():
    if "--serve" in sys.argv[1:]:
        serve(bench_env.threads_arg(sys.argv[1:]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "gpt"])
    ap.add_argument("--preset", default="shakespeare-char", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=0, help="default: 128 (mlp, cnn) or the preset's")
    ap.add_argument("--seq", type=int, default=0)
    for k in ("n-layer", "n-head", "n-embd", "block-size", "vocab"):
        ap.add_argument("--" + k, type=int, default=0)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", default="0", help="a number, 0 (torch's default) or 'best'")
    a = ap.parse_args()
    out = {"torch": torch.__version__, "model": a.model, "modes": {}}
    if a.model == "gpt":
        pr = dict(PRESETS[a.preset])
        batch, seq = a.batch or pr.pop("batch"), a.seq or pr.pop("seq")
        pr.pop("batch", None)
        pr.pop("seq", None)
        for k, key in (("n_layer", "n_layer"), ("n_head", "n_head"), ("n_embd", "n_embd"), ("block_size", "block_size"),
                       ("vocab", "vocab_size")):
            if getattr(a, k):
                pr[key] = getattr(a, k)
        out.update({"preset": a.preset, "config": pr, "batch": batch, "seq": seq})
        run = lambda dt: bench_gpt(pr, batch, seq, a.steps, dt)  # noqa: E731
    else:
        batch = a.batch or 128
        out["batch"] = batch
        run = lambda dt: bench(a.model, batch, a.steps, dt)  # noqa: E731
    by = {}
    if a.threads == "best":
        # each thread count in its own process: OpenBLAS's threads are fixed
        # when torch loads it (bench_env.prepare)
        argv, drop = [], False
        for x in sys.argv[1:]:
            if not drop and x != "--threads" and not x.startswith("--threads="):
                argv.append(x)
            drop = x == "--threads"
        for t in dict.fromkeys([1, os.cpu_count() or 1]):
            r = json.loads(subprocess.check_output([sys.executable, os.path.abspath(__file__), *argv, "--threads", str(t)]))
            by[str(r["threads"])] = r["modes"]
    else:
        if int(a.threads) > 0:
            torch.set_num_threads(int(a.threads))
        modes = {"fp32": run(None)}
        for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # "autocast ... not supported": no number
                    modes[name] = run(dt)
            except Exception:  # e.g. no f16 CPU autocast in this version
                modes[name] = None
        by[str(torch.get_num_threads())] = modes
    if len(by) == 1:
        out["threads"] = int(next(iter(by)))
        out["modes"] = next(iter(by.values()))
    else:
        out["by_threads"] = by
        out["modes"] = {m: min((v[m] for v in by.values() if v[m] is not None), default=None) for m in ("fp32", "fp16", "bf16")}
        out["best_threads"] = {m: min(((v[m], int(t)) for t, v in by.items() if v[m] is not None), default=(None, None))[1]
                               for m in ("fp32", "fp16", "bf16")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
