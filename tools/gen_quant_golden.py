"""Golden data for tests/test_quant.c: llama.cpp's block formats through
gguf-py (the `gguf` package's numpy implementation of ggml's
quantize_row_*_ref and dequantize_row_*), independent of amp's C code.

    python3 tools/gen_quant_golden.py      # the pyenv python3 (numpy, gguf)

Writes tests/data/quant_golden.bin (tools/golden/golden_format.py's format):
  <case>/x                 f32 [R, C] input (seeded normal rows plus edge-case blocks)
  <case>/<qtype>/bytes     u8 [R, C/32*block_bytes]: gguf.quants.quantize(x, qtype)
  <case>/<qtype>/deq       f32 [R, C]: gguf.quants.dequantize(bytes, qtype)
  kq/<qtype>/bytes, /deq   random q4_k / q6_k super-blocks (sane f16 scales) and their values
  lin/x, lin/<qtype>/w_bytes, lin/<qtype>/y
                           the quantized linear's float64 reference: x's rows quantized as
                           amp documents (blocks of 32, d = amax/127 in f32, q = x/d rounded to
                           nearest even) times the dequantized weight, summed in float64
Deterministic (fixed seeds): rerunning writes the same bytes.
"""
import os
import sys

import numpy as np
from gguf import quants
from gguf.constants import GGMLQuantizationType as T

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "golden"))
from golden_format import write_golden  # noqa: E402

QT = {"q8_0": T.Q8_0, "q4_0": T.Q4_0, "q4_1": T.Q4_1}


def edge_rows(rng):
    """[8, 64]: each 32-block an edge case."""
    b = []
    b.append(np.zeros(32))                                  # all-zero block
    b.append(rng.standard_normal(32) * 5e4)                  # huge values (scales near f16's max)
    b.append(-np.abs(rng.standard_normal(32)) - 0.1)         # negative only
    b.append(np.abs(rng.standard_normal(32)) + 0.1)          # positive only
    b.append(rng.standard_normal(32) * 1e-6)                 # subnormal f16 scales
    b.append(rng.standard_normal(32) * 1e-9)                 # scales that round to f16 zero
    v = rng.standard_normal(32)
    v[3], v[17] = 4.0, -4.0                                  # a tie of |max|: the first one wins
    b.append(v)
    b.append(np.full(32, 0.75))                              # constant block
    w = np.arange(32) - 15.5                                 # exact halves after scaling
    b.append(w)
    b.append(rng.standard_normal(32) * 1e5)                  # q4_1's range overflows f16 (inf scale)
    b.append(np.where(np.arange(32) % 2 == 0, 1.0, -1.0) * 127)
    b.append(rng.standard_normal(32))
    b.append(rng.standard_normal(32) * 3 + 2)
    b.append(-np.full(32, 2.0))
    b.append(np.concatenate([np.full(16, -1e-3), np.full(16, 1e-3)]))
    b.append(rng.uniform(-1, 1, 32))
    return np.concatenate(b).astype(np.float32).reshape(8, 64)


def kq_blocks(rng, qtype, n):
    bs, tb = quants.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, tb), dtype=np.uint8)
    def f16(v):
        return np.array([v], dtype=np.float16).view(np.uint8)
    for i in range(n):
        if qtype == T.Q4_K:
            raw[i, 0:2] = f16(rng.uniform(1e-4, 0.05))
            raw[i, 2:4] = f16(rng.uniform(1e-4, 0.02))
        else:  # Q6_K: d last
            raw[i, tb - 2:tb] = f16(rng.uniform(1e-4, 0.01))
    return raw


def act_quant(x):
    """amp's activation blocks: d = amax/127 (f32), q = rint(x/d) (half to even)."""
    xb = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np.rint((xb * idv).astype(np.float32))
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(x.shape)


def main():
    rng = np.random.default_rng(25)
    rec = []
    cases = {
        "normal": rng.standard_normal((6, 96)).astype(np.float32),
        "edge": edge_rows(rng),
    }
    for name, x in cases.items():
        rec.append((f"{name}/x", x))
        for qn, qt in QT.items():
            with np.errstate(over="ignore", invalid="ignore"):
                b = quants.quantize(x, qt)
                d = quants.dequantize(b, qt)
            rec.append((f"{name}/{qn}/bytes", b.astype(np.uint8)))
            rec.append((f"{name}/{qn}/deq", d.astype(np.float32)))
    for qn, qt in (("q4_k", T.Q4_K), ("q6_k", T.Q6_K)):
        raw = kq_blocks(rng, qt, 3).reshape(3, -1)   # 3 rows of one super-block each
        rec.append((f"kq/{qn}/bytes", raw))
        rec.append((f"kq/{qn}/deq", quants.dequantize(raw, qt).astype(np.float32)))
    # quantized linear: y = xq · deq(W)^T in float64
    x = rng.standard_normal((3, 128)).astype(np.float32)
    w = (rng.standard_normal((5, 128)) * 0.1).astype(np.float32)
    rec.append(("lin/x", x))
    rec.append(("lin/w", w))
    xq = act_quant(x)
    for qn, qt in QT.items():
        b = quants.quantize(w, qt)
        wd = quants.dequantize(b, qt).astype(np.float64)
        rec.append((f"lin/{qn}/w_bytes", b.astype(np.uint8)))
        rec.append((f"lin/{qn}/y", xq @ wd.T))
    out = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "quant_golden.bin")
    write_golden(out, rec)
    print("wrote", os.path.normpath(out), len(rec), "records")


if __name__ == "__main__":
    main()
