#!/usr/bin/env python3
"""A tiny random GPT-2 in Hugging Face's layout, and its logits, for amp's
GPT-2-from-a-directory tests (tests/test_gpt_load.c).

Written independently of amp: the forward below is Hugging Face's GPT2Model
as its modeling code computes it (Conv1D = x @ W + b with W stored
[in, out], pre-LayerNorm blocks, causal softmax attention scaled by
1/sqrt(head_dim), gelu_new = tanh GELU, ln_f, the head tied to wte), in
torch, from the numpy arrays this script writes.

Writes (deterministic: rerunning gives the same bytes), under tests/data/:
  gpt2_hf_tiny/config.json          model_type gpt2, n_layer 2, n_head 4, n_embd 32,
                                    n_positions 32, vocab_size 256, layer_norm_epsilon 1e-4
                                    (not GPT-2's 1e-5: the test sees that it is read)
  gpt2_hf_tiny/model.safetensors    F32, the hub's naming (wte.weight, h.0.attn.c_attn.weight
                                    [C, 3C], ...; no "transformer."), with the causal-mask
                                    buffers h.N.attn.bias [1, 1, 32, 32] and
                                    h.N.attn.masked_bias [] the hub's gpt2 files hold
  gpt2_hf_tiny_sharded/             the same weights as save_pretrained writes them today
                                    ("transformer." names, no buffers) in two shards
                                    model-00001-of-00002.safetensors, model-00002-of-00002...
                                    and model.safetensors.index.json
  gpt2_hf_golden.bin                AMPGOLD1 records (tools/golden/golden_format.py):
      x            i64 [2, 12]      token ids
      logits       f32 [2, 12, 256] the f32 forward
      bf16.logits  f32 [2, 12, 256] the model loaded in bf16 (every weight but the
                                    LayerNorms rounded to bf16, as amp's bf16 load keeps
                                    norms f32) run under torch.autocast('cpu', bfloat16)
                                    (logits bf16 there, stored as f32)
      f16.logits   f32 [2, 12, 256] the same with weights rounded to f16 and f16 autocast
                                    semantics emulated: matmul inputs rounded to f16

    /usr/bin/python3 tools/ref_gpt2_hf.py      (Debian python3-torch 1.13, numpy)
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "golden"))
from golden_format import write_golden  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data")
L, H, C, P, V, EPS = 2, 4, 32, 32, 256, 1e-4


def make_weights(seed=25):
    """GPT-2's init with std 0.02 (biases and LayerNorms drawn too, so that
    every tensor matters to the logits). HF names without "transformer."."""
    g = np.random.default_rng(seed)
    n = lambda *s, std=0.02: (g.standard_normal(s) * std).astype(np.float32)  # noqa: E731
    w = {"wte.weight": n(V, C), "wpe.weight": n(P, C, std=0.01)}
    for i in range(L):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = (1 + n(C, std=0.1)).astype(np.float32)
        w[p + "ln_1.bias"] = n(C, std=0.1)
        w[p + "attn.c_attn.weight"] = n(C, 3 * C, std=0.2)  # Conv1D: [in, out]
        w[p + "attn.c_attn.bias"] = n(3 * C, std=0.1)
        w[p + "attn.c_proj.weight"] = n(C, C, std=0.1)
        w[p + "attn.c_proj.bias"] = n(C, std=0.05)
        w[p + "ln_2.weight"] = (1 + n(C, std=0.1)).astype(np.float32)
        w[p + "ln_2.bias"] = n(C, std=0.1)
        w[p + "mlp.c_fc.weight"] = n(C, 4 * C, std=0.2)
        w[p + "mlp.c_fc.bias"] = n(4 * C, std=0.1)
        w[p + "mlp.c_proj.weight"] = n(4 * C, C, std=0.1)
        w[p + "mlp.c_proj.bias"] = n(C, std=0.05)
    w["ln_f.weight"] = (1 + n(C, std=0.1)).astype(np.float32)
    w["ln_f.bias"] = n(C, std=0.1)
    return w


def write_safetensors(path, tensors, metadata=None):
    """The format by hand (Debian's python has no safetensors package):
    u64 header length, JSON header (padded with spaces to 8 bytes), data."""
    hdr, off, blobs = {}, 0, []
    if metadata:
        hdr["__metadata__"] = metadata
    for name, a in tensors:
        code = {np.float32: "F32", np.uint8: "U8", np.bool_: "BOOL"}[a.dtype.type]
        b = np.ascontiguousarray(a).tobytes()
        hdr[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    os.replace(path + ".tmp", path)


def config():
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
            "n_layer": L, "n_head": H, "n_embd": C, "n_positions": P, "n_ctx": P, "vocab_size": V,
            "layer_norm_epsilon": EPS, "n_inner": None, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
            "scale_attn_weights": True, "tie_word_embeddings": True, "bos_token_id": 0, "eos_token_id": 0,
            "torch_dtype": "float32"}


def write_json(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def forward(w, x, mm):
    """HF GPT2LMHeadModel's forward (eval: no dropout). mm(a, b) is the matrix
    product (f32, or rounding its inputs for a half-precision emulation)."""
    T = x.shape[1]
    t = lambda k: torch.from_numpy(w[k])  # noqa: E731
    conv1d = lambda h, p: mm(h, t(p + ".weight")) + t(p + ".bias")  # noqa: E731
    ln = lambda h, p: torch.nn.functional.layer_norm(h.float(), (C,), t(p + ".weight"), t(p + ".bias"), EPS)  # noqa: E731
    h = t("wte.weight")[x] + t("wpe.weight")[torch.arange(T)]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(L):
        p = f"h.{i}."
        a = conv1d(ln(h, p + "ln_1"), p + "attn.c_attn")
        q, k, v = a.split(C, dim=2)
        heads = lambda z: z.view(z.shape[0], T, H, C // H).transpose(1, 2)  # noqa: E731
        q, k, v = heads(q), heads(k), heads(v)
        s = mm(q, k.transpose(-1, -2)) / math.sqrt(C // H)
        s = s.masked_fill(~causal, float("-inf"))
        y = mm(torch.softmax(s.float(), dim=-1), v)
        y = y.transpose(1, 2).reshape(x.shape[0], T, C)
        h = h + conv1d(y, p + "attn.c_proj")
        m = conv1d(gelu_new(conv1d(ln(h, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
        h = h + m
    return mm(ln(h, "ln_f"), t("wte.weight").t())


def rounded(w, dt):
    """The weights as a model loaded in dt holds them: every tensor but the
    LayerNorms rounded to dt (amp keeps norms f32 in a half load)."""
    return {k: (v if ".ln_" in "." + k or k.startswith("ln_") else
                torch.from_numpy(v).to(dt).float().numpy()) for k, v in w.items()}


def main():
    torch.manual_seed(0)
    w = make_weights()
    tiny, sharded = os.path.join(DATA, "gpt2_hf_tiny"), os.path.join(DATA, "gpt2_hf_tiny_sharded")
    os.makedirs(tiny, exist_ok=True)
    os.makedirs(sharded, exist_ok=True)
    names = list(w)
    hub = []
    for k in names:
        hub.append((k, w[k]))
        if k.endswith("attn.c_attn.bias"):  # the hub's gpt2: the mask buffers beside the attention's tensors
            hub.append((k.replace("c_attn.bias", "bias"), np.tril(np.ones((P, P), np.float32)).reshape(1, 1, P, P)))
            hub.append((k.replace("c_attn.bias", "masked_bias"), np.array(-1e4, np.float32)))
    write_safetensors(os.path.join(tiny, "model.safetensors"), hub, {"format": "pt"})
    write_json(os.path.join(tiny, "config.json"), config())
    half = names.index("h.1.ln_1.weight")
    shards = [names[:half], names[half:]]
    wmap = {}
    for s, part in enumerate(shards):
        fname = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(sharded, fname), [("transformer." + k, w[k]) for k in part], {"format": "pt"})
        wmap.update({"transformer." + k: fname for k in part})
    total = sum(a.nbytes for a in w.values())
    write_json(os.path.join(sharded, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))})
    write_json(os.path.join(sharded, "config.json"), config())

    g = np.random.default_rng(7)
    x = torch.from_numpy(g.integers(0, V, size=(2, 12)).astype(np.int64))
    with torch.no_grad():
        logits = forward(w, x, torch.matmul)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lb = forward(rounded(w, torch.bfloat16), x, torch.matmul).float()
        r16 = lambda a: a.to(torch.float16).float()  # noqa: E731
        lh = forward(rounded(w, torch.float16), x, lambda a, b: r16(torch.matmul(r16(a), r16(b))))
    write_golden(os.path.join(DATA, "gpt2_hf_golden.bin"),
                 [("x", x), ("logits", logits), ("bf16.logits", lb), ("f16.logits", lh)])
    m = logits.abs().max().item()
    print(f"max |logit| {m:.4f}; bf16 vs f32 max diff {(lb - logits).abs().max().item() / m:.2e}, "
          f"f16 {(lh - logits).abs().max().item() / m:.2e} (of the largest)")


if __name__ == "__main__":
    main()
