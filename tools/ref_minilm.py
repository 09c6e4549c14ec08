#!/usr/bin/env python3
"""Golden data for tests/test_bert.c: all-MiniLM-L6-v2 sentence embeddings
computed independently of amp, in numpy float64 from the model's own files.

    python3 tools/ref_minilm.py [MODEL_DIR]     (the pyenv python: numpy, tokenizers,
                                                 safetensors, ml_dtypes)

MODEL_DIR defaults to $AMP_MODELS_DIR/all-MiniLM-L6-v2 (scripts/deps.sh models
installs it). Token ids come from Hugging Face `tokenizers` on tokenizer.json
(its 128-token truncation and padding replaced by sentence_bert_config.json's
max_seq_length, 256, as sentence-transformers does); the forward is BERT written
here from the safetensors weights and config.json (post-LN blocks, GELU erf,
LayerNorm eps from the config), then mean pooling over the tokens and L2
normalisation (1_Pooling/config.json), each sentence alone (no padding).

Besides the float64 embeddings, the same forward is run as torch's autocast
would run a model loaded in bf16 / f16 (weights rounded to that dtype; linear
layers and attention take rounded inputs, accumulate in f32 and round their
outputs; GELU on the rounded values, rounded; layer norm, softmax and the
residual sums in f32; embeddings summed in the dtype), so the test can bound
amp's bf16/f16 results by what the same rounding costs here.

Writes tests/data/minilm_golden.safetensors (about 80 KB): per sentence i its
ids `ids.i` (I64), and `emb` [n, 384] (F64), `sim` [n, n] (cosine
similarities, F64), `emb_bf16`, `emb_f16` [n, 384] (F64); metadata `n` and
`text.i` (the sentences, UTF-8), `max_seq_length`."""
import json
import math
import os
import sys

import ml_dtypes
import numpy as np
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))

SENTENCES = [
    # the model card's example (README.md of all-MiniLM-L6-v2)
    "This is an example sentence",
    "Each sentence is converted",
    # sentence-transformers' README similarity example
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    # the tokenizer's hard cases: accents stripped, punctuation split, CJK characters one token each, unknown words
    "Crème brûlée, naïve café — déjà vu? Don't!",
    "東京は日本の首都です。 A man is eating pasta.",
    # longer than max_seq_length: truncated to 256 tokens ([CLS] ... [SEP] included)
    " ".join(["Mixed precision inference keeps the weights in a narrow dtype, computes the products in it and "
              "accumulates in float32, while normalisations and softmax stay in float32 (sentence %d)." % k
              for k in range(12)]),
]


def erf(x):
    return np.frompyfunc(math.erf, 1, 1)(x).astype(x.dtype)


def gelu(x):
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


class Exact:
    """float64 everywhere"""
    f = np.float64

    def w(self, t):
        return t.astype(np.float64)

    def emb(self, a, b, c):
        return a + b + c

    def linear(self, x, w, b):
        return x @ w.T + b

    def attn(self, q, k, v, scale):
        s = (q @ np.swapaxes(k, -1, -2)) * scale
        s = s - s.max(-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(-1, keepdims=True)
        return p @ v

    def act(self, x):
        return gelu(x)

    def ln(self, x, w, b, eps):
        x = x.astype(self.f)
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w.astype(self.f) + b.astype(self.f)

    def add(self, a, b):
        return a + b


class Autocast(Exact):
    """weights in dt; torch autocast's rounding points"""
    f = np.float32

    def __init__(self, dt):
        self.dt = dt

    def r(self, x):
        return np.asarray(x, np.float32).astype(self.dt).astype(np.float32)

    def w(self, t):
        return self.r(t)

    def emb(self, a, b, c):
        return self.r(self.r(a + b) + c)  # additions in the dtype, each rounded

    def linear(self, x, w, b):
        return self.r(self.r(x) @ w.T + b)

    def attn(self, q, k, v, scale):
        q, k, v = self.r(q), self.r(k), self.r(v)
        s = (q @ np.swapaxes(k, -1, -2)) * np.float32(scale)
        s = s - s.max(-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(-1, keepdims=True)
        return self.r(p @ v)

    def act(self, x):
        return self.r(gelu(self.r(x)))

    def add(self, a, b):
        return np.float32(1) * a + b  # a half output and an f32 residual: f32 (type promotion)


def forward(ids, W, cfg, A):
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    hd = H // nh
    eps = cfg["layer_norm_eps"]
    T = len(ids)
    g = lambda n: A.w(W[n])
    x = A.emb(g("embeddings.word_embeddings.weight")[ids], g("embeddings.token_type_embeddings.weight")[np.zeros(T, int)],
              g("embeddings.position_embeddings.weight")[np.arange(T)])
    x = A.ln(x, g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"), eps)
    for l in range(cfg["num_hidden_layers"]):
        p = "encoder.layer.%d." % l
        lin = lambda h, n: A.linear(h, g(p + n + ".weight"), g(p + n + ".bias"))
        q = lin(x, "attention.self.query").reshape(T, nh, hd).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(T, nh, hd).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(T, nh, hd).transpose(1, 0, 2)
        a = A.attn(q, k, v, 1.0 / math.sqrt(hd)).transpose(1, 0, 2).reshape(T, H)
        x = A.ln(A.add(lin(a, "attention.output.dense"), x), g(p + "attention.output.LayerNorm.weight"),
                 g(p + "attention.output.LayerNorm.bias"), eps)
        h = A.act(lin(x, "intermediate.dense"))
        x = A.ln(A.add(lin(h, "output.dense"), x), g(p + "output.LayerNorm.weight"), g(p + "output.LayerNorm.bias"), eps)
    e = x.astype(np.float64).mean(0)  # mean pooling: every token counts (no padding)
    return e / max(np.linalg.norm(e), 1e-12)


def main():
    mdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.environ.get("AMP_MODELS_DIR", "/usr/local/share/amp/models"), "all-MiniLM-L6-v2")
    cfg = json.load(open(os.path.join(mdir, "config.json")))
    pool = json.load(open(os.path.join(mdir, "1_Pooling", "config.json")))
    assert pool["pooling_mode_mean_tokens"] and not pool["pooling_mode_cls_token"]
    msl = json.load(open(os.path.join(mdir, "sentence_bert_config.json")))["max_seq_length"]
    W = load_file(os.path.join(mdir, "model.safetensors"))
    tok = Tokenizer.from_file(os.path.join(mdir, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=msl)
    out, meta = {}, {"n": str(len(SENTENCES)), "max_seq_length": str(msl)}
    rows = {"emb": [], "emb_bf16": [], "emb_f16": []}
    for i, s in enumerate(SENTENCES):
        ids = np.array(tok.encode(s).ids, dtype=np.int64)
        out["ids.%d" % i] = ids
        meta["text.%d" % i] = s
        rows["emb"].append(forward(ids, W, cfg, Exact()))
        rows["emb_bf16"].append(forward(ids, W, cfg, Autocast(ml_dtypes.bfloat16)))
        rows["emb_f16"].append(forward(ids, W, cfg, Autocast(np.float16)))
        print("%d: %3d tokens  cos(bf16, f64) %.7f  cos(f16, f64) %.7f" % (
            i, len(ids), rows["emb_bf16"][-1] @ rows["emb"][-1], rows["emb_f16"][-1] @ rows["emb"][-1]))
    for k, v in rows.items():
        out[k] = np.stack(v)
    out["sim"] = out["emb"] @ out["emb"].T
    np.set_printoptions(precision=4, suppress=True)
    print("similarity matrix:\n", out["sim"])
    path = os.path.join(ROOT, "tests", "data", "minilm_golden.safetensors")
    save_file({k: np.ascontiguousarray(v) for k, v in out.items()}, path, metadata=meta)
    print("wrote", path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
