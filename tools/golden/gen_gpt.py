#!/usr/bin/env python3
"""PyTorch golden data for amp's GPT (issue 15 part B's tests), written to
tests/data/gpt/ (layout: tests/data/gpt/README.md).

The model is nanoGPT's GPT-2 (tools/nanogpt_model.py: pre-LayerNorm blocks
with biases, causal self-attention through one c_attn Linear, 4x MLP with
tanh GELU, learned positions, token embedding tied to the LM head, GPT-2's
init). Dropout 0.

For each config (small: 2 layers, 4 heads, 64 wide, block 32, vocab 256;
v50257: 1 layer, 2 heads, 8 wide, block 16, vocab 50257 -- the GPT-2
vocabulary with the weights kept small):
  <cfg>.safetensors        the random-initialised state_dict, nanoGPT names
                           (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...,
                           lm_head.weight left out: it is wte, as Hugging Face files do)
  <cfg>_golden.bin         AMPGOLD1 records (tools/golden/golden_format.py):
      x, y                  i64 [B, T] batch (inputs, targets)
      logits                f32 [B, T, V] (small) ...
      logits_lse, logits_idx, logits_at
                            ... or for v50257: logsumexp over V [B, T], 256 vocab
                            ids, and the logits at those ids [B, T, 256]
      loss                  f32 [] mean cross-entropy
      grad.<name>           f32, every parameter's gradient (nanoGPT names)
      adamw.<g>.loss/.lr/.grad_norm   f32 [10] for 10 AdamW steps on the batch
                            x, y (as llm.c's test_gpt2), with g = nanogpt
                            (decay on every >= 2-D parameter: matrices and
                            both embeddings, as nanoGPT's configure_optimizers)
                            and g = noemb (embeddings not decayed, as the
                            issue text and minGPT); clip_grad_norm_ 1.0 (grad_norm
                            is its return value, before clipping); lr by
                            nanoGPT's get_lr: warmup 3, cosine to 10, max 1e-3,
                            min 1e-4; AdamW betas (0.9, 0.95), eps 1e-8, wd 0.1;
                            loss[i] is the loss before step i's update
      adamw.nanogpt.final.<name>   (small only) every parameter after the 10 steps
      bf16.logits (or bf16.logits_lse/_at), bf16.loss, bf16.grad.<name>
                            the same forward/backward under
                            torch.autocast('cpu', torch.bfloat16) (weights f32)
  gpt_small_hf.safetensors  the small model's state_dict as Hugging Face's GPT2LMHeadModel
                            stores it (h.0.attn.c_attn.weight, ... without "transformer.";
                            Conv1D weights transposed to [in, out]), written by the
                            `safetensors` library itself (safetensors.numpy.save_file) when
                            a Python with that package is given as HF_PYTHON (default:
                            python3 on PATH; `pip install safetensors`).

    /usr/bin/python3 tools/golden/gen_gpt.py        (Debian python3-torch 1.13)
"""
import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from golden_format import write_golden  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from nanogpt_model import GPT, Cfg  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "gpt")


def params(model):
    """nanoGPT's named parameters (the tied weight once, as transformer.wte.weight)."""
    return [(n, p) for n, p in model.named_parameters()]


def write_safetensors(path, tensors, metadata):
    """The format by hand (Debian has no safetensors package): 8-byte header
    length, JSON header, data; tensors in state_dict order, 8-byte aligned."""
    hdr, off, blobs = {}, 0, []
    for name, t in tensors:
        a = t.detach().contiguous().numpy().astype("<f4")
        b = a.tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hdr["__metadata__"] = metadata
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def get_lr(it, warmup=3, decay_iters=10, lr=1e-3, min_lr=1e-4):
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    ratio = (it - warmup) / (decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def logits_records(prefix, logits, big, idx):
    if not big:
        return [(prefix + "logits", logits.float())]
    lf = logits.float()
    return [(prefix + "logits_lse", torch.logsumexp(lf, dim=-1)), (prefix + "logits_idx", idx),
            (prefix + "logits_at", lf[:, :, idx])]


def run(name, c, B, T, seed):
    torch.manual_seed(seed)
    model = GPT(c)
    sd = params(model)
    write_safetensors(os.path.join(OUT, name + ".safetensors"), sd,
                      {"format": "pt", "config": json.dumps(c.__dict__), "generator": "tools/golden/gen_gpt.py"})
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randint(0, c.vocab_size, (B, T), generator=g)
    y = torch.randint(0, c.vocab_size, (B, T), generator=g)
    big = c.vocab_size > 1000
    idx = torch.randperm(c.vocab_size, generator=g)[:256].sort().values
    rec = [("x", x), ("y", y)]
    logits, loss = model(x, y)
    loss.backward()
    rec += logits_records("", logits.detach(), big, idx)
    rec.append(("loss", loss.detach()))
    rec += [("grad." + n, p.grad.detach().clone()) for n, p in sd]
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits_b, loss_b = model(x, y)
    loss_b.backward()
    rec += logits_records("bf16.", logits_b.detach(), big, idx)
    rec.append(("bf16.loss", loss_b.detach().float()))
    rec += [("bf16.grad." + n, p.grad.detach().clone()) for n, p in sd]
    model.zero_grad(set_to_none=True)
    # 10 AdamW steps, fresh copies of the initial weights for each grouping
    init = {n: p.detach().clone() for n, p in sd}
    for grouping in ("nanogpt", "noemb"):
        with torch.no_grad():
            for n, p in sd:
                p.copy_(init[n])
        if grouping == "nanogpt":
            decay = [p for n, p in sd if p.dim() >= 2]
            nodecay = [p for n, p in sd if p.dim() < 2]
        else:
            decay = [p for n, p in sd if p.dim() >= 2 and "wte" not in n and "wpe" not in n]
            nodecay = [p for n, p in sd if not (p.dim() >= 2 and "wte" not in n and "wpe" not in n)]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                                lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
        losses, lrs, norms = [], [], []
        for it in range(10):
            lr = get_lr(it)
            for pg in opt.param_groups:
                pg["lr"] = lr
            _, l = model(x, y)
            opt.zero_grad(set_to_none=True)
            l.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(l.item())
            lrs.append(lr)
            norms.append(gn.item())
        rec += [(f"adamw.{grouping}.loss", torch.tensor(losses, dtype=torch.float32)),
                (f"adamw.{grouping}.lr", torch.tensor(lrs, dtype=torch.float32)),
                (f"adamw.{grouping}.grad_norm", torch.tensor(norms, dtype=torch.float32))]
        if grouping == "nanogpt" and not big:
            rec += [(f"adamw.{grouping}.final.{n}", p.detach().clone()) for n, p in sd]
        print(f"{name} adamw {grouping}: losses {['%.4f' % v for v in losses]}", file=sys.stderr)
    write_golden(os.path.join(OUT, name + "_golden.bin"), rec)
    print(f"{name}: loss {loss.item():.6f}, bf16 loss {loss_b.item():.6f}, {sum(p.numel() for _, p in sd)} params",
          file=sys.stderr)
    return {n: p for n, p in init.items()}


HF_SCRIPT = r"""
import sys, numpy as np
from safetensors.numpy import save_file, load_file
src, dst = sys.argv[1], sys.argv[2]
t = load_file(src)
out = {}
for n, a in t.items():
    hn = n[len("transformer."):] if n.startswith("transformer.") else n
    if any(hn.endswith(s) for s in ("c_attn.weight", "c_proj.weight", "c_fc.weight")):
        a = np.ascontiguousarray(a.T)  # Hugging Face's Conv1D stores [in, out]
    out[hn] = a
save_file(out, dst, metadata={"format": "pt"})
"""


def main():
    os.makedirs(OUT, exist_ok=True)
    small = Cfg(n_layer=2, n_head=4, n_embd=64, block_size=32, vocab_size=256, dropout=0.0, bias=True)
    run("gpt_small", small, 4, 32, 1500)
    v50257 = Cfg(n_layer=1, n_head=2, n_embd=8, block_size=16, vocab_size=50257, dropout=0.0, bias=True)
    run("gpt_v50257", v50257, 2, 16, 1501)
    py = os.environ.get("HF_PYTHON", "python3")
    r = subprocess.run([py, "-c", HF_SCRIPT, os.path.join(OUT, "gpt_small.safetensors"),
                        os.path.join(OUT, "gpt_small_hf.safetensors")])
    if r.returncode != 0:
        sys.exit("gen_gpt: writing gpt_small_hf.safetensors needs a Python with safetensors (HF_PYTHON)")


if __name__ == "__main__":
    main()
