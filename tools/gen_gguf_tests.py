#!/usr/bin/env python3
"""Writes the GGUF test files of tests/test_gguf.c into tests/data/gguf/ with gguf-py's own
writer (PyPI `gguf`, the pyenv python3), so the files and the values the test expects come from
an implementation independent of amp's reader:

    python3 tools/gen_gguf_tests.py

meta.gguf    every metadata value type (scalars, strings, arrays of numbers, of bools, of strings,
             of arrays), general.alignment = 64, and F32/F16/BF16/F64 tensors of ranks 1..4 beside
             their conversions made by numpy (f16) and ml_dtypes (bf16): tensor "X.to_f16" is X
             converted to f16 by numpy, "X.to_bf16" by ml_dtypes (round to nearest even), "X.to_f32"
             widened by numpy.
quant.gguf   quantized tensors: Q8_0, Q4_0, Q4_1 quantized by gguf.quants from random weights, Q4_K
             and Q6_K blocks of random bytes (gguf-py cannot quantize them; the f16 scales are set
             to small positive values), 2-D and 3-D; beside each, "X.deq" (F32), "X.deq_f16" and
             "X.deq_bf16": gguf.quants.dequantize's values, rounded by numpy / ml_dtypes.
tiny.gguf    the smallest useful file: default alignment (32), two keys, one F32 tensor (also the
             seed of the fuzzer and of the truncation test).
fuzz inputs  tests/fuzz/corpus/gguf/ (seeds of fuzz_gguf: the three files above and small hand-made
             ones, named by their SHA-1 as libFuzzer names its corpus) and tests/data/fuzz/gguf/
             (hand-made edge cases replayed by test_fuzz_regress: deep nesting, counts and lengths
             near 2^64, sizes that overflow, offsets that wrap).
smollm2.txt  facts of the real model file (scripts/deps.sh models installs it) as gguf-py's reader
             sees them: counts, metadata values, tensor types/shapes/offsets, and values of a few
             rows dequantized by gguf.quants (strings hex-encoded; one fact a line).

Deterministic (fixed seeds): running it again rewrites the same bytes."""
import hashlib
import os
import struct
import sys

import ml_dtypes
import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as T, GGUFValueType as V
from gguf.quants import dequantize, quantize

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
OUT = os.path.join(ROOT, "tests", "data", "gguf")


def bf16_bytes(a):
    """float array -> its bf16 (ml_dtypes, RNE) as raw little-endian bytes."""
    return np.ascontiguousarray(a.astype(ml_dtypes.bfloat16)).view(np.uint8)


def add_bf16(w, name, values):
    """A BF16 tensor of the shape of `values` (gguf-py stores raw bytes with raw_dtype)."""
    w.add_tensor(name, bf16_bytes(values).reshape(*values.shape[:-1], values.shape[-1] * 2), raw_dtype=T.BF16)


def specials(n, rng):
    """n values with the hard cases of narrow formats: signed zeros, ties, f16 subnormals and overflow."""
    v = (rng.standard_normal(n) * 3).astype(np.float32)
    sp = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 70000.0, -1e6, 6e-8, 1e-5, 3.0e-39, 1.00390625, 1.0009765625,
                   np.float32(1 + 2**-8 + 2**-20), 0.333333343], dtype=np.float32)
    v[: min(n, len(sp))] = sp[: min(n, len(sp))]
    return v


def write(w, name):
    path = os.path.join(OUT, name)
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {os.path.relpath(path, ROOT)}: {os.path.getsize(path)} bytes")


def meta():
    rng = np.random.default_rng(25)
    w = GGUFWriter(None, "amptest")
    w.add_custom_alignment(64)
    w.add_key_value("t.u8", 200, V.UINT8)
    w.add_key_value("t.i8", -100, V.INT8)
    w.add_key_value("t.u16", 60000, V.UINT16)
    w.add_key_value("t.i16", -30000, V.INT16)
    w.add_key_value("t.u32", 4000000000, V.UINT32)
    w.add_key_value("t.i32", -2000000000, V.INT32)
    w.add_key_value("t.f32", 0.15625, V.FLOAT32)
    w.add_key_value("t.bool", True, V.BOOL)
    w.add_key_value("t.false", False, V.BOOL)
    w.add_key_value("t.str", "héllo, GGUF", V.STRING)
    w.add_key_value("t.empty_str", "", V.STRING)
    w.add_key_value("t.u64", 18000000000000000000, V.UINT64)  # above INT64_MAX
    w.add_key_value("t.u64_small", 1 << 40, V.UINT64)
    w.add_key_value("t.i64", -(1 << 62), V.INT64)
    w.add_key_value("t.f64", 2.718281828459045, V.FLOAT64)
    w.add_key_value("t.arr_i32", [1, -2, 3, 2147483647], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("t.arr_f32", [0.5, -1.25], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("t.arr_bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("t.arr_str", ["a", "", "Ġthe", "<|im_start|>", "日本"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("t.arr_arr", [[1, 2], [3], [4, 5, 6]], V.ARRAY)  # arrays of arrays of ints
    w.add_key_value("t.arr_arr_str", [["x", "yz"], ["w"]], V.ARRAY)  # arrays of arrays of strings
    # tensors (torch shapes; GGUF stores ne reversed)
    a = specials(15, rng).reshape(3, 5)
    w.add_tensor("t_f32", a)
    w.add_tensor("t_f32.to_f16", a.astype(np.float16))
    add_bf16(w, "t_f32.to_bf16", a)
    h = specials(7, rng).astype(np.float16)
    w.add_tensor("t_f16", h)
    w.add_tensor("t_f16.to_f32", h.astype(np.float32))
    add_bf16(w, "t_f16.to_bf16", h.astype(np.float32))
    b = specials(24, rng).reshape(2, 3, 4)
    add_bf16(w, "t_bf16", b)
    bw = b.astype(ml_dtypes.bfloat16).astype(np.float32)
    w.add_tensor("t_bf16.to_f32", bw)
    w.add_tensor("t_bf16.to_f16", bw.astype(np.float16))
    c = (rng.standard_normal((2, 1, 3, 2)) * 10).astype(np.float32)
    w.add_tensor("t_4d", c)
    d = rng.standard_normal(6) * 1e3
    d[0] = 1 + 2**-30  # rounds once to 1.0 in f32
    w.add_tensor("t_f64", d.astype(np.float64))
    w.add_tensor("t_f64.to_f32", d.astype(np.float32))
    w.add_tensor("t_f64.to_f16", d.astype(np.float16))  # numpy rounds f64 -> f16 once
    write(w, "meta.gguf")


def random_k_blocks(rng, qtype, nblocks):
    """Blocks of a K-quant of random bytes whose f16 scale fields hold small positive values."""
    size = {T.Q4_K: 144, T.Q6_K: 210}[qtype]
    b = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    scales = rng.uniform(1e-3, 2e-2, size=(nblocks, 2)).astype(np.float16).view(np.uint8).reshape(nblocks, 4)
    if qtype == T.Q4_K:  # d, dmin first
        b[:, 0:4] = scales
    else:  # Q6_K: d last
        b[:, 208:210] = scales[:, 0:2]
    return b


def quant():
    rng = np.random.default_rng(2025)
    w = GGUFWriter(None, "amptest")
    tensors = []
    for name, qtype, shape in [("q8_0", T.Q8_0, (3, 64)), ("q4_0", T.Q4_0, (2, 96)), ("q4_1", T.Q4_1, (4, 32)),
                               ("q8_0_3d", T.Q8_0, (2, 2, 32))]:
        x = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        x.reshape(-1)[0] = 0.0
        raw = quantize(x, qtype)
        tensors.append((name, qtype, raw))
    for name, qtype, shape in [("q4_k", T.Q4_K, (2, 256)), ("q6_k", T.Q6_K, (2, 512))]:
        nb = shape[0] * shape[1] // 256
        raw = random_k_blocks(rng, qtype, nb).reshape(shape[0], -1)
        tensors.append((name, qtype, raw))
    for name, qtype, raw in tensors:
        w.add_tensor(name, raw, raw_dtype=qtype)
    for name, qtype, raw in tensors:
        deq = dequantize(raw, qtype).astype(np.float32)
        w.add_tensor(name + ".deq", deq)
        w.add_tensor(name + ".deq_f16", deq.astype(np.float16))
        add_bf16(w, name + ".deq_bf16", deq)
    write(w, "quant.gguf")


def tiny():
    w = GGUFWriter(None, "tiny")
    w.add_key_value("tiny.n", 3, V.UINT32)
    w.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
    write(w, "tiny.gguf")


def gstr(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def header(n_ti, n_kv, version=3):
    return b"GGUF" + struct.pack("<IQQ", version, n_ti, n_kv)


def tinfo(name, ne, typ, off):
    return gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", typ, off)


def pad(b, a=32):
    return b + bytes(-len(b) % a)


def fuzz_inputs():
    seeds = [open(os.path.join(OUT, n), "rb").read() for n in ("tiny.gguf", "meta.gguf", "quant.gguf")]
    seeds.append(header(0, 0))
    # a Q8_0 tensor of 2 rows of 32 (d = 1.0 in f16, q = 0..31) and an IQ1_S one (a type amp lists only)
    q8 = b"".join(struct.pack("<e", 1.0) + bytes(range(32)) for _ in range(2))
    img = pad(header(2, 1) + gstr("general.alignment") + struct.pack("<II", 4, 32)
              + tinfo("q", [32, 2], 8, 0) + tinfo("iq", [256], 19, 96))
    seeds.append(img + pad(q8) + bytes(50))
    # arrays of arrays of strings, an empty array, bools
    arr = struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 8, 2) + gstr("ab") + gstr("") + struct.pack("<IQ", 8, 0)
    seeds.append(header(0, 3) + gstr("a.nested") + struct.pack("<I", 9) + arr
                 + gstr("a.empty") + struct.pack("<IIQ", 9, 0, 0) + gstr("a.bools") + struct.pack("<IIQ", 9, 7, 2) + b"\1\0")
    cdir = os.path.join(ROOT, "tests", "fuzz", "corpus", "gguf")
    os.makedirs(cdir, exist_ok=True)
    for b in seeds:
        with open(os.path.join(cdir, hashlib.sha1(b).hexdigest()), "wb") as fo:
            fo.write(b)
    deep = b""
    for _ in range(5000):
        deep += struct.pack("<IQ", 9, 1)
    regress = {
        "regress-deep-nesting": header(0, 1) + gstr("k") + struct.pack("<I", 9) + deep,
        "regress-kv-count-2p64": header(0, 2**64 - 1) + bytes(64),
        "regress-tensor-count-2p63": header(2**63, 0) + bytes(64),
        "regress-array-len-2p64": header(0, 1) + gstr("k") + struct.pack("<IIQ", 9, 10, 2**64 - 1) + bytes(64),
        "regress-string-array-len-2p61": header(0, 1) + gstr("k") + struct.pack("<IIQ", 9, 8, 2**61) + bytes(64),
        "regress-string-len-2p64": header(0, 1) + gstr("k") + struct.pack("<IQ", 8, 2**64 - 1) + bytes(8),
        "regress-key-len-2p64": header(0, 1) + struct.pack("<Q", 2**64 - 1) + bytes(32),
        "regress-bytes-overflow": pad(header(1, 0) + tinfo("w", [2**40, 2**20, 2**10], 0, 0)) + bytes(32),
        "regress-offset-wraps": pad(header(1, 0) + tinfo("w", [8], 0, 2**64 - 32)) + bytes(64),
        "regress-overlap": pad(header(2, 0) + tinfo("a", [16], 0, 0) + tinfo("b", [8], 0, 32)) + bytes(96),
        "regress-alignment-2p31": pad(header(0, 1) + gstr("general.alignment") + struct.pack("<II", 4, 2**31)),
        "regress-unknown-type": pad(header(1, 0) + tinfo("w", [8], 77, 0)) + bytes(32),
        "regress-nul-in-key": header(0, 1) + gstr(b"a\0b") + struct.pack("<II", 4, 1),
    }
    rdir = os.path.join(ROOT, "tests", "data", "fuzz", "gguf")
    os.makedirs(rdir, exist_ok=True)
    for n, b in regress.items():
        with open(os.path.join(rdir, n), "wb") as fo:
            fo.write(b)
    print(f"wrote {len(seeds)} seeds to {os.path.relpath(cdir, ROOT)}, {len(regress)} inputs to {os.path.relpath(rdir, ROOT)}")


def models_dir():
    return os.environ.get("AMP_MODELS_DIR", "/usr/local/share/amp/models")


def smollm2():
    path = os.path.join(models_dir(), "SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(path):
        sys.exit(f"gen_gguf_tests: {path} is missing (scripts/deps.sh models installs it)")
    r = GGUFReader(path)
    kv = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    out = [f"kv_count {len(kv)}", f"tensor_count {len(r.tensors)}"]

    def scalar(k):
        f = kv[k]
        return f.parts[f.data[0]][0]

    for k in ["llama.block_count", "llama.context_length", "llama.embedding_length", "llama.feed_forward_length",
              "llama.attention.head_count", "llama.attention.head_count_kv", "llama.vocab_size",
              "llama.rope.dimension_count", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
              "general.file_type", "general.quantization_version"]:
        out.append(f"int {k} {int(scalar(k))}")
    for k in ["llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"]:
        out.append(f"float {k} {float(scalar(k))!r}")
    for k in ["tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix"]:
        out.append(f"bool {k} {int(bool(scalar(k)))}")
    for k in ["general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.chat_template"]:
        out.append(f"str {k} {bytes(kv[k].parts[kv[k].data[0]]).hex()}")
    for k in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"]:
        f = kv[k]
        out.append(f"arrlen {k} {len(f.data)}")
        for i in [0, 1, 2, 100, 12345, len(f.data) - 1]:
            out.append(f"arrstr {k} {i} {bytes(f.parts[f.data[i]]).hex()}")
    f = kv["tokenizer.ggml.token_type"]
    out.append(f"arrlen tokenizer.ggml.token_type {len(f.data)}")
    for i in [0, 1, 17, 49151]:
        out.append(f"arrint tokenizer.ggml.token_type {i} {int(f.parts[f.data[i]][0])}")
    tens = {t.name: t for t in r.tensors}
    for t in r.tensors:
        if t.name in ("token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight", "blk.0.attn_k.weight",
                      "blk.29.ffn_down.weight", "blk.29.ffn_norm.weight"):
            ne = " ".join(str(int(x)) for x in t.shape)
            out.append(f"tensor {t.name} {int(t.tensor_type)} {len(t.shape)} {ne} {t.data_offset} {t.n_bytes}")
    # rows dequantized by gguf.quants: "deq NAME ROW COL0 N v..." (values as %.9g: exact for f32)
    for name, row, col0, n in [("token_embd.weight", 0, 0, 8), ("token_embd.weight", 1, 568, 8),
                               ("token_embd.weight", 12345, 100, 8), ("token_embd.weight", 49151, 0, 8),
                               ("blk.0.attn_q.weight", 0, 0, 8), ("blk.0.attn_q.weight", 575, 544, 32),
                               ("blk.29.ffn_down.weight", 575, 1528, 8), ("output_norm.weight", 0, 0, 8),
                               ("blk.29.ffn_norm.weight", 0, 570, 6)]:
        t = tens[name]
        raw = np.asarray(t.data)
        rows = raw.reshape(-1, raw.shape[-1]) if raw.ndim > 1 else raw.reshape(1, -1)
        deq = dequantize(rows[row], t.tensor_type).astype(np.float32).reshape(-1)
        vals = " ".join(f"{float(v):.9g}" for v in deq[col0:col0 + n])
        out.append(f"deq {name} {row} {col0} {n} {vals}")
    p = os.path.join(OUT, "smollm2.txt")
    with open(p + ".tmp", "w") as fo:
        fo.write("\n".join(out) + "\n")
    os.replace(p + ".tmp", p)
    print(f"wrote {os.path.relpath(p, ROOT)}: {len(out)} facts")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    with np.errstate(over="ignore"):  # 70000 and -1e6 become inf in f16, on purpose
        meta()
    quant()
    tiny()
    fuzz_inputs()
    smollm2()
    sys.exit(0)
