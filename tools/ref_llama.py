#!/usr/bin/env python3
"""Reference Llama forwards for tests/test_llama.c, written independently of amp
(numpy float64, the weights read with gguf-py and safetensors, never through amp).

Run with the pyenv python3 (numpy, gguf, safetensors):
    python3 tools/ref_llama.py [--model PATH.gguf] [--out tests/data]

Writes
  tests/data/llama_smollm2_golden.safetensors
      ids         i64 [8]      "The capital of France is Paris, and" as llama.cpp's
                               llama-tokenize gives it for SmolLM2-135M-Instruct.Q4_1.gguf
      vocab_sel   i64 [256]    a fixed random subset of the vocabulary
      logits_sel  f32 [8, 256] the logits of every position at vocab_sel
      logits_last f32 [49152]  the last position's full logits
      greedy      i64 [8]      the greedy continuation of "The capital of France is"
                               (its first 5 ids)
      greedy_logits f32 [8]    the winning logit of each greedy step
    The model: weights dequantized (gguf.quants.dequantize: Q4_1 matrices, the Q8_0
    token embedding tied to the head, F32 norms) and the whole forward in float64.
    GGUF stores attn_q/attn_k permuted by llama.cpp's converter so that RoPE rotates
    adjacent pairs (x[2i], x[2i+1]): the forward rotates those.
  tests/data/llama_tiny_hf/{config.json,model.safetensors}
      a tiny random Llama in Hugging Face's layout (LlamaForCausalLM names, untied
      lm_head, q/k in rotate_half order, 4 query heads / 2 KV heads), and
  tests/data/llama_tiny_hf_golden.safetensors
      ids [2, 7] i64, logits [2, 7, 61] f32 of that model (rotate_half RoPE), and
  tests/data/llama_tiny.gguf
      the same model as llama.cpp's converter would write it (F32, GGUF names, q/k rows reordered so that
      RoPE rotates adjacent pairs): the same logits.
"""
import argparse
import json
import os

import numpy as np

PROMPT_IDS = [504, 3575, 282, 4649, 314, 7042, 28, 284]  # "The capital of France is Paris, and"
PARIS_PROMPT = PROMPT_IDS[:5]  # "The capital of France is"


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope(x, pos, theta, halves):
    """x [H, T, D] at positions pos [T]; halves: rotate (x[i], x[i+D/2]), else (x[2i], x[2i+1])."""
    D = x.shape[-1]
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)  # [D/2]
    ang = pos[:, None].astype(np.float64) * inv[None, :]  # [T, D/2]
    c, s = np.cos(ang), np.sin(ang)
    if halves:
        a, b = x[..., : D // 2], x[..., D // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def attention(q, k, v):
    """q [Hq, T, D], k/v [Hkv, T, D], causal, query head h reads kv head h // (Hq // Hkv)."""
    Hq, T, D = q.shape
    g = Hq // k.shape[0]
    k = np.repeat(k, g, axis=0)
    v = np.repeat(v, g, axis=0)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
    s = s + np.triu(np.full((T, T), -np.inf), 1)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v


def forward(W, cfg, ids):
    """W: dict of float64 arrays in torch order ([out, in] matrices); ids [T]."""
    L, C, Hq, Hkv = cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["n_head_kv"]
    D = C // Hq
    T = len(ids)
    pos = np.arange(T)
    x = W["embd"][np.asarray(ids)]
    for l in range(L):
        h = rms_norm(x, W[f"{l}.attn_norm"], cfg["eps"])
        q = (h @ W[f"{l}.q"].T).reshape(T, Hq, D).transpose(1, 0, 2)
        k = (h @ W[f"{l}.k"].T).reshape(T, Hkv, D).transpose(1, 0, 2)
        v = (h @ W[f"{l}.v"].T).reshape(T, Hkv, D).transpose(1, 0, 2)
        q = rope(q, pos, cfg["theta"], cfg["halves"])
        k = rope(k, pos, cfg["theta"], cfg["halves"])
        y = attention(q, k, v).transpose(1, 0, 2).reshape(T, C)
        x = x + y @ W[f"{l}.o"].T
        h = rms_norm(x, W[f"{l}.ffn_norm"], cfg["eps"])
        x = x + (silu(h @ W[f"{l}.gate"].T) * (h @ W[f"{l}.up"].T)) @ W[f"{l}.down"].T
    x = rms_norm(x, W["norm"], cfg["eps"])
    return x @ W["head"].T


def load_gguf(path):
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(path)
    f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.")}
    assert f["general.architecture"] == "llama"
    cfg = dict(n_layer=int(f["llama.block_count"]), n_embd=int(f["llama.embedding_length"]),
               n_head=int(f["llama.attention.head_count"]), n_head_kv=int(f["llama.attention.head_count_kv"]),
               theta=float(np.float32(f["llama.rope.freq_base"])),
               eps=float(np.float32(f["llama.attention.layer_norm_rms_epsilon"])), halves=False)
    T = {t.name: t for t in r.tensors}

    def get(name):
        t = T[name]
        a = dequantize(t.data, t.tensor_type).astype(np.float32)  # exact: the blocks' values in f32
        return a.reshape([int(d) for d in reversed(t.shape)]).astype(np.float64)  # torch order: ne reversed

    names = {"attn_norm": "attn_norm", "q": "attn_q", "k": "attn_k", "v": "attn_v", "o": "attn_output",
             "ffn_norm": "ffn_norm", "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
    W = {"embd": get("token_embd.weight"), "norm": get("output_norm.weight")}
    W["head"] = get("output.weight") if "output.weight" in T else W["embd"]
    for l in range(cfg["n_layer"]):
        for k, n in names.items():
            W[f"{l}.{k}"] = get(f"blk.{l}.{n}.weight")
    return W, cfg


def save(path, tensors):
    from safetensors.numpy import save_file

    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path)
    print("wrote", path, os.path.getsize(path), "bytes")


def smollm2(model, out):
    W, cfg = load_gguf(model)
    assert W["0.q"].shape == (cfg["n_embd"], cfg["n_embd"]), W["0.q"].shape
    logits = forward(W, cfg, PROMPT_IDS)  # [8, V]
    V = logits.shape[1]
    sel = np.sort(np.random.default_rng(25).choice(V, 256, replace=False)).astype(np.int64)
    seq, greedy, gl = list(PARIS_PROMPT), [], []
    for _ in range(8):
        row = forward(W, cfg, seq)[-1]
        t = int(np.argmax(row))
        top2 = np.sort(row)[-2:]
        print("greedy", t, "margin", top2[1] - top2[0])
        greedy.append(t)
        gl.append(row[t])
        seq.append(t)
    save(os.path.join(out, "llama_smollm2_golden.safetensors"),
         {"ids": np.array(PROMPT_IDS, np.int64), "vocab_sel": sel, "logits_sel": logits[:, sel].astype(np.float32),
          "logits_last": logits[-1].astype(np.float32), "greedy": np.array(greedy, np.int64),
          "greedy_logits": np.array(gl, np.float32)})


def tiny_hf(out):
    """A random Llama in Hugging Face's layout, and its logits."""
    rng = np.random.default_rng(2025)
    V, C, L, Hq, Hkv, F = 61, 32, 2, 4, 2, 48
    D = C // Hq
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
              "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": Hq, "num_key_value_heads": Hkv,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
              "hidden_act": "silu", "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2}
    f32 = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    st = {"model.embed_tokens.weight": f32(V, C), "model.norm.weight": (1 + f32(C)), "lm_head.weight": f32(V, C)}
    for l in range(L):
        p = f"model.layers.{l}."
        st[p + "input_layernorm.weight"] = 1 + f32(C)
        st[p + "post_attention_layernorm.weight"] = 1 + f32(C)
        st[p + "self_attn.q_proj.weight"] = f32(Hq * D, C)
        st[p + "self_attn.k_proj.weight"] = f32(Hkv * D, C)
        st[p + "self_attn.v_proj.weight"] = f32(Hkv * D, C)
        st[p + "self_attn.o_proj.weight"] = f32(C, Hq * D)
        st[p + "mlp.gate_proj.weight"] = f32(F, C)
        st[p + "mlp.up_proj.weight"] = f32(F, C)
        st[p + "mlp.down_proj.weight"] = f32(C, F)
    d = os.path.join(out, "llama_tiny_hf")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)
        fh.write("\n")
    save(os.path.join(d, "model.safetensors"), st)
    g = lambda k: st[k].astype(np.float64)  # noqa: E731
    W = {"embd": g("model.embed_tokens.weight"), "norm": g("model.norm.weight"), "head": g("lm_head.weight")}
    m = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "q": "self_attn.q_proj",
         "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj", "gate": "mlp.gate_proj",
         "up": "mlp.up_proj", "down": "mlp.down_proj"}
    for l in range(L):
        for k, n in m.items():
            W[f"{l}.{k}"] = g(f"model.layers.{l}.{n}.weight")
    cfg = dict(n_layer=L, n_embd=C, n_head=Hq, n_head_kv=Hkv, theta=10000.0, eps=1e-6, halves=True)
    write_tiny_gguf(os.path.join(out, "llama_tiny.gguf"), config, st)
    ids = rng.integers(0, V, size=(2, 7)).astype(np.int64)
    logits = np.stack([forward(W, cfg, list(r)) for r in ids])
    save(os.path.join(out, "llama_tiny_hf_golden.safetensors"), {"ids": ids, "logits": logits.astype(np.float32)})


def gguf_rope_order(w, heads):
    """Rows of a q/k projection [heads * D, C] from rotate_half order (pairs (i, i + D/2)) to adjacent pairs
    (2i, 2i + 1), as llama.cpp's converter writes GGUF files: within each head, row i of the first half goes
    to 2i and row i of the second half to 2i + 1."""
    D = w.shape[0] // heads
    h = w.reshape(heads, 2, D // 2, -1)  # [head, half, i, C]
    return np.ascontiguousarray(h.transpose(0, 2, 1, 3).reshape(w.shape))


def write_tiny_gguf(path, config, st):
    """The tiny HF model as a GGUF file (F32, llama.cpp's names and Q/K row order): the same logits."""
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    L, Hq, Hkv = config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"]
    w.add_block_count(L)
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(Hq)
    w.add_head_count_kv(Hkv)
    w.add_rope_freq_base(config["rope_theta"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_rope_dimension_count(config["hidden_size"] // Hq)
    w.add_vocab_size(config["vocab_size"])
    w.add_tensor("token_embd.weight", st["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", st["model.norm.weight"])
    w.add_tensor("output.weight", st["lm_head.weight"])
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
             "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for l in range(L):
        for g, h in names.items():
            t = st[f"model.layers.{l}.{h}.weight"]
            if g == "attn_q":
                t = gguf_rope_order(t, Hq)
            elif g == "attn_k":
                t = gguf_rope_order(t, Hkv)
            w.add_tensor(f"blk.{l}.{g}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", path, os.path.getsize(path), "bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(os.environ.get("AMP_MODELS_DIR", "/usr/local/share/amp/models"),
                                                    "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data"))
    ap.add_argument("--only", choices=["smollm2", "tiny"], default=None)
    a = ap.parse_args()
    if a.only != "smollm2":
        tiny_hf(a.out)
    if a.only != "tiny":
        smollm2(a.model, a.out)


if __name__ == "__main__":
    main()
