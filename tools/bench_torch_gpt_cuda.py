#!/usr/bin/env python3
"""PyTorch's side of issue 17's GPT bar on a GPU: a GPT-2 124M training step
(nanoGPT's model and step) in torch eager mode, so amp's GPU numbers have a
reference measured on the same GPU.

    python3 tools/bench_torch_gpt_cuda.py [--batch 4] [--seq 1024] [--steps 20]
                                          [--modes fp32,tf32,bf16,fp16] [--attn sdpa|math]

A step: forward + cross-entropy (autocast around both for bf16/fp16),
backward (fp16 through torch.amp.GradScaler), clip_grad_norm_(1.0), AdamW
with nanoGPT's decay groups (lr 6e-4, betas 0.9/0.95, weight decay 0.1,
fused=True), zero_grad(set_to_none). fp32 runs with TF32 off, tf32 with
torch.backends.cuda.matmul.allow_tf32 (and cuDNN's) on. Attention: sdpa =
F.scaled_dot_product_attention(is_causal=True) (flash attention, as nanoGPT
uses on a GPU); math = the explicit masked softmax of tools/nanogpt_model.py.
Each mode: 3 untimed steps, then the median of --steps steps, each timed from
a synchronised GPU to a synchronised GPU. Reports ms/step, tokens/s, MFU
(nanoGPT's estimate: 6N + 12 L H Q T flops per token, against the dense
bf16 peak from NVIDIA's datasheet for bf16/fp16/tf32 and the f32 peak for
fp32) and torch.cuda.max_memory_allocated per mode. Prints one JSON object
and a table on stderr."""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PEAKS = [("H200", 67.0, 494.7, 989.4), ("H100 PCIe", 51.2, 378.0, 756.0), ("H100 NVL", 60.0, 417.5, 835.5),
         ("H100", 67.0, 494.7, 989.4), ("A100", 19.5, 156.0, 312.0)]  # f32, tf32, bf16 dense TFLOP/s


class Block(nn.Module):
    def __init__(self, C, H, attn):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.H, self.attn = H, attn

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = F.softmax(a.masked_fill(~mask, float("-inf")), dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, block, vocab, attn):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, C), nn.Embedding(block, C)
        self.h = nn.ModuleList([Block(C, H, attn) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for n, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, tgt):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), tgt.view(-1))


def run(mode, a, dev):
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    torch.backends.cudnn.allow_tf32 = mode == "tf32"
    torch.manual_seed(0)
    m = GPT(a.n_layer, a.n_head, a.n_embd, 1024, a.vocab, a.attn).to(dev)
    ps = list(m.parameters())
    nparams = sum(p.numel() for p in ps)
    opt = torch.optim.AdamW([{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
                             {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    scaler = torch.amp.GradScaler("cuda", enabled=mode == "fp16")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for i in range(a.steps + 3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=dt or torch.float32, enabled=dt is not None):
            loss = m(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
    ms = 1e3 * statistics.median(times)
    tok = a.batch * a.seq
    flops = (6 * nparams + 12 * a.n_layer * a.n_head * (a.n_embd // a.n_head) * a.seq) * tok
    name = torch.cuda.get_device_name()
    pk = next((p for p in PEAKS if p[0] in name), None)
    peak = None if pk is None else (pk[1] if mode == "fp32" else pk[2] if mode == "tf32" else pk[3])
    r = {"ms": ms, "tokens_per_s": tok / (ms / 1e3), "tflops": flops / (ms / 1e3) / 1e12,
         "mfu": None if peak is None else flops / (ms / 1e3) / 1e12 / peak,
         "peak_alloc_gib": torch.cuda.max_memory_allocated() / 2**30, "last_loss": losses[-1], "params": nparams}
    del m, opt
    torch.cuda.empty_cache()
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--modes", default="fp32,tf32,bf16,fp16")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "math"])
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench_torch_gpt_cuda: torch.cuda.is_available() is False (torch %s)" % torch.__version__)
    dev = torch.device("cuda")
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "batch": a.batch, "seq": a.seq,
           "attn": a.attn, "modes": {}}
    for mode in a.modes.split(","):
        out["modes"][mode] = run(mode, a, dev)
        r = out["modes"][mode]
        print("%-5s %8.2f ms  %9.0f tok/s  %6.1f TFLOP/s  MFU %s  peak %.2f GiB  loss %.4f" % (
            mode, r["ms"], r["tokens_per_s"], r["tflops"], "-" if r["mfu"] is None else "%.1f%%" % (100 * r["mfu"]),
            r["peak_alloc_gib"], r["last_loss"]), file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
