#!/usr/bin/env python3
"""PyTorch CPU side of `amp bench infer`: sentence embeddings per second of
all-MiniLM-L6-v2 (sentence-transformers' BERT: 6 layers, hidden 384, 12
heads, FFN 1536, GELU erf, post-LN, mean pooling over the attention mask,
L2 normalisation), the same model amp runs, written here in torch from the
model directory's model.safetensors and config.json (no transformers
package), in fp32 under torch.inference_mode().

    /usr/bin/python3 tools/bench_torch_bert.py --model DIR --batch 32 --seq 32 --threads best

prints one JSON object {"torch": version, "by_threads": {T: {B: sentences/s}},
"best": {B: sentences/s}}. The input of a batch is B sentences of SEQ tokens
([CLS], SEQ-2 random word pieces, [SEP]; the attention mask all ones), the
same batches amp times; tokenization is not timed on either side.

    /usr/bin/python3 tools/bench_torch_bert.py --serve --threads N --model DIR

serves `amp bench infer` (one process per thread count, its OpenBLAS threads
fixed before torch loads, tools/bench_env.py): prints "ready <version>
<threads>", then answers each line "bert B SEQ REPS THREADS" with "ok <median
ms per batch>" (after one warm-up batch) or "na <why>", until "quit" or end of
input.

--export-onnx FILE writes the model as ONNX (opset 14, batch and sequence
dynamic; inputs "ids" and "mask" int64 [B, T], output "emb" [B, H]) for ONNX
Runtime (tools/bench_ort_bert.py).

--check prints the embeddings of a few fixed id sequences (a self-check of the
model code against another implementation)."""
import argparse
import json
import math
import os
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_env  # noqa: E402 (tools/, the script's directory)

bench_env.prepare(bench_env.threads_arg(sys.argv[1:]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def default_model_dir():
    if os.environ.get("AMP_BENCH_BERT_DIR"):  # amp bench infer --model-bert DIR
        return os.environ["AMP_BENCH_BERT_DIR"]
    return os.path.join(os.environ.get("AMP_MODELS_DIR", "/usr/local/share/amp/models"), "all-MiniLM-L6-v2")


def load_safetensors(path):
    """name -> float32 torch tensor (F32/F16/BF16 files; the integer position_ids are skipped)."""
    with open(path, "rb") as fh:
        raw = fh.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data, out = raw[8 + n:], {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        if t["dtype"] == "F32":
            a = np.frombuffer(data[b:e], dtype="<f4")
        elif t["dtype"] == "F16":
            a = np.frombuffer(data[b:e], dtype="<f2").astype(np.float32)
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(data[b:e], dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            continue
        out[name] = torch.from_numpy(a.reshape(t["shape"]).copy())
    return out


class MiniLM(torch.nn.Module):
    """A BERT encoder (post-LN) with sentence-transformers' mean pooling and normalisation."""

    def __init__(self, model_dir):
        super().__init__()
        with open(os.path.join(model_dir, "config.json")) as fh:
            cfg = json.load(fh)
        self.H = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.layers = cfg["num_hidden_layers"]
        self.eps = cfg["layer_norm_eps"]
        w = load_safetensors(os.path.join(model_dir, "model.safetensors"))
        if "bert.embeddings.word_embeddings.weight" in w:
            w = {k[5:]: v for k, v in w.items() if k.startswith("bert.")}
        self.w = w

    def ln(self, x, name):
        return F.layer_norm(x, (self.H,), self.w[name + ".weight"], self.w[name + ".bias"], self.eps)

    def lin(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def forward(self, ids, mask):
        w, B, T = self.w, ids.shape[0], ids.shape[1]
        pos = torch.arange(T)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][pos] \
            + w["embeddings.token_type_embeddings.weight"][0]
        x = self.ln(x, "embeddings.LayerNorm")
        hd = self.H // self.heads
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for i in range(self.layers):
            p = "encoder.layer.%d." % i
            q = self.lin(x, p + "attention.self.query").view(B, T, self.heads, hd).transpose(1, 2)
            k = self.lin(x, p + "attention.self.key").view(B, T, self.heads, hd).transpose(1, 2)
            v = self.lin(x, p + "attention.self.value").view(B, T, self.heads, hd).transpose(1, 2)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + bias, dim=-1)
            a = (att @ v).transpose(1, 2).reshape(B, T, self.H)
            x = self.ln(self.lin(a, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            h = F.gelu(self.lin(x, p + "intermediate.dense"))
            x = self.ln(self.lin(h, p + "output.dense") + x, p + "output.LayerNorm")
        m = mask.to(x.dtype)[:, :, None]
        e = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(e, p=2, dim=1)


def batch_of(B, T, vocab=30522, seed=0):
    """B sentences of T tokens: [CLS]=101, random word pieces (>= 1000, past the special and unused ids), [SEP]=102."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (B, T), generator=g)
    ids[:, 0] = 101
    ids[:, -1] = 102
    return ids, torch.ones(B, T, dtype=torch.long)


def time_batch(model, B, T, reps):
    ids, mask = batch_of(B, T)
    times = []
    with torch.inference_mode():
        model(ids, mask)  # warm-up
        for _ in range(reps):
            t0 = time.perf_counter()
            model(ids, mask)
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def serve(threads, model):
    if threads > 0:
        torch.set_num_threads(threads)
    from bench_bert_serve import serve as serve_loop
    serve_loop(threads, "ready %s %d" % (torch.__version__, torch.get_num_threads()),
               lambda B, T, reps: time_batch(model, B, T, reps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=default_model_dir(), help="the model directory (config.json, model.safetensors)")
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--export-onnx", metavar="FILE")
    ap.add_argument("--batch", default="1,32", help="batch sizes, comma-separated")
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", default="0", help="a number, 0 (torch's default) or 'best'")
    a = ap.parse_args()
    if a.threads == "best":
        # each thread count in its own process: OpenBLAS's threads are fixed when torch loads it
        import subprocess
        by = {}
        for t in sorted({1, os.cpu_count() or 1}):
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--model", a.model, "--batch", a.batch,
                                "--seq", str(a.seq), "--reps", str(a.reps), "--threads", str(t)],
                               check=True, capture_output=True, text=True)
            by[t] = json.loads(r.stdout)["by_threads"][str(t)]
        best = {b: max(v[b] for v in by.values()) for b in next(iter(by.values()))}
        print(json.dumps({"torch": torch.__version__, "seq": a.seq, "by_threads": by, "best": best}))
        return
    t = int(a.threads)
    if t > 0:
        torch.set_num_threads(t)
    model = MiniLM(a.model)
    if a.serve:
        serve(t, model)
        return
    if a.export_onnx:
        import warnings
        ids, mask = batch_of(2, 16)
        tmp = a.export_onnx + ".tmp"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (ids, mask), tmp, input_names=["ids", "mask"], output_names=["emb"],
                              dynamic_axes={"ids": {0: "B", 1: "T"}, "mask": {0: "B", 1: "T"}, "emb": {0: "B"}},
                              opset_version=14)
        os.replace(tmp, a.export_onnx)
        return
    if a.check:
        with torch.inference_mode():
            ids, mask = batch_of(2, 8)
            print(json.dumps({"ids": ids.tolist(), "embeddings": model(ids, mask).tolist()}))
        return
    res = {}
    for b in (int(v) for v in a.batch.split(",")):
        res[str(b)] = b / (time_batch(model, b, a.seq, a.reps) / 1e3)
    print(json.dumps({"torch": torch.__version__, "seq": a.seq, "by_threads": {str(torch.get_num_threads()): res},
                      "best": res}))


if __name__ == "__main__":
    main()
