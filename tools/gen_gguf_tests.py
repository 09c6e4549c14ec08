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
tiny.gguf    the smallest useful file: default alignment (32), two keys, one F32 tensor (also the
             seed of the fuzzer and of the truncation test).

Deterministic (fixed seeds): running it again rewrites the same bytes."""
import os
import sys

import ml_dtypes
import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T, GGUFValueType as V

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


def tiny():
    w = GGUFWriter(None, "tiny")
    w.add_key_value("tiny.n", 3, V.UINT32)
    w.add_tensor("w", np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
    write(w, "tiny.gguf")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    with np.errstate(over="ignore"):  # 70000 and -1e6 become inf in f16, on purpose
        meta()
    tiny()
    sys.exit(0)
