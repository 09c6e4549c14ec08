#!/usr/bin/env python3
"""Write tests/data/formats_golden.bin: conversions computed by outside
implementations, checked bit for bit by tests/test_numeric_golden.c.

References
  fp16            numpy float16 (astype from float32 / float64)
  bf16            ml_dtypes.bfloat16
  fp8 e4m3        ml_dtypes.float8_e4m3fn (OCP E4M3FN: no inf, overflow -> NaN)
  fp8 e5m2        ml_dtypes.float8_e5m2
  f64 -> f32      numpy float32 (astype from float64)
  f64 -> f16      numpy float16 (astype from float64: one rounding)

ml_dtypes converts float64 to bfloat16 / float8 through float32, i.e. it
rounds twice (464.00000000000006 -> 464.0f -> 448 in e4m3 instead of NaN), so
it is not used as a reference for f64 sources; tests/test_numeric_rounding.c
checks those against a double-arithmetic model instead.

Requirements: numpy and ml_dtypes from PyPI (pip install numpy ml_dtypes).
The test itself does not need Python. The inputs come from a fixed-seed
splitmix64 written here (not numpy's generators), so rerunning the script
writes the same file byte for byte.

Usage: tools/gen_golden_formats.py [OUTPUT]   (default tests/data/formats_golden.bin)

File format (all integers little-endian):
  magic     8 bytes  b"AMPGOLD1"
  version   u32      1
  nsections u32
  then nsections sections, each:
    name      16 bytes ASCII, NUL padded: "f32->f16", "f32->bf16",
              "f32->e4m3", "f32->e5m2", "f16->f32", "bf16->f32",
              "e4m3->f32", "e5m2->f32", "f64->f16", "f64->f32"
    src_bytes u32      bytes per input element (8, 4, 2 or 1)
    dst_bytes u32      bytes per output element
    count     u32
    inputs    count * src_bytes   raw bit patterns of the inputs
    outputs   count * dst_bytes   raw bit patterns of the reference results
"""
import os
import struct
import sys

import ml_dtypes
import numpy as np

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.s = seed & MASK64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def u32(self):
        return self.next() >> 32


def f32_bits(x):
    """Bits of x rounded to f32 (numpy: nearest even, inf past the range)."""
    with np.errstate(all="ignore"):
        return int(np.array([x], dtype=np.float64).astype(np.float32).view("<u4")[0])


def f64_from_bits(b):
    return struct.unpack("<d", struct.pack("<Q", b))[0]


# (name, exponent bits, mantissa bits, bias, max finite)
NARROW = [
    ("f16", 5, 10, 15, 65504.0),
    ("bf16", 8, 7, 127, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)),
    ("e4m3", 4, 3, 7, 448.0),
    ("e5m2", 5, 2, 15, 57344.0),
]


def edge_values():
    """Values around every format's interesting points (as doubles)."""
    vals = [0.0, -0.0, 1.0, -1.0, 0.1, -0.1, 1.0 / 3.0, 70000.0, -70000.0, 1e-8, 1e30, -1e38]
    for _, eb, mb, bias, mx in NARROW:
        top_e = np.floor(np.log2(mx))
        spacing = 2.0 ** (top_e - mb)
        thr = mx + spacing / 2  # overflow threshold (midpoint to the next power)
        min_sub = 2.0 ** (1 - bias - mb)
        min_norm = 2.0 ** (1 - bias)
        for v in (mx, thr, thr + spacing / 4, thr - spacing / 4, mx + spacing, 2 * mx,
                  min_sub, min_sub / 2, min_sub * 0.75, min_sub * 0.25, min_sub * 1.5, min_sub * 2.5,
                  min_norm, min_norm - min_sub / 2, min_norm * (1 + 2.0 ** -(mb + 1)),
                  1 + 2.0 ** -(mb + 1), 1 + 3 * 2.0 ** -(mb + 1)):
            vals += [v, -v]
    return vals


def f32_inputs(rng):
    bits = []
    for v in edge_values():
        b = f32_bits(v)
        bits += [b, (b + 1) & 0xFFFFFFFF, (b - 1) & 0xFFFFFFFF]
    bits += [0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
             0x7FA00000, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC02000, 0x7F7FFFFF,
             0xFF7FFFFF, 0x00000001, 0x80000001, 0x00800000, 0x007FFFFF]
    for _ in range(1024):  # any bit pattern
        bits.append(rng.u32())
    for _ in range(2048):  # exponents where the narrow formats live
        r = rng.u32()
        e = 127 - 30 + (r >> 24) % 50  # 2^-30 .. 2^19
        bits.append((r & 0x807FFFFF) | (e << 23))
    bits = [b & 0xFFFFFFFF for b in bits]
    return np.array(bits, dtype="<u4")


def f64_inputs(rng):
    vals = edge_values()
    out = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in vals]
    # just above / below each edge value by one double ulp: the cases that a
    # conversion through f32 would double-round
    extra = []
    for b in out:
        extra += [(b + 1) & MASK64, (b - 1) & MASK64]
    out += extra
    out += [0x7FF0000000000000, 0xFFF0000000000000, 0x7FF8000000000000, 0xFFF8000000000000,
            0x7FF0000000000001, 0x7FF4000000000000, 0x7FFFFFFFFFFFFFFF]
    for _ in range(1024):
        r = rng.next()
        e = 1023 - 30 + (r >> 56) % 50
        out.append((r & 0x800FFFFFFFFFFFFF) | (e << 52))
    for _ in range(512):  # neighbours of f32 midpoints: f32 value with a half-ulp bit and noise
        r = rng.next()
        e = 1023 - 20 + (r >> 56) % 40
        mant = (r & 0x000FFFFFE0000000) | (1 << 28) | (r & 0xF)  # half an f32 ulp plus tiny
        if r & 0x10:
            mant = (r & 0x000FFFFFE0000000) | ((1 << 28) - 1 - (r & 0xF))
        out.append((r & 0x8000000000000000) | (e << 52) | mant)
    # midpoints between neighbours of f16, and one double ulp
    # either side (through f32 these would round twice)
    types = [(np.float16, "<u2", 16)]
    for t, ut, nbits in types:
        for _ in range(128):
            p = rng.u32() & ((1 << (nbits - 1)) - 1)  # positive pattern
            lo = float(np.array([p], dtype=ut).view(t).astype(np.float64)[0])
            hi = float(np.array([p + 1], dtype=ut).view(t).astype(np.float64)[0])
            if not (np.isfinite(lo) and np.isfinite(hi)):
                continue
            mid = struct.unpack("<Q", struct.pack("<d", (lo + hi) / 2))[0]
            sign = (rng.u32() & 1) << 63
            out += [sign | mid, sign | (mid + 1), sign | (mid - 1)]
    return np.array([b & MASK64 for b in out], dtype="<u8")


def torch_crosscheck(x32):
    """When PyTorch is importable, check that its .half() / .bfloat16() agree
    with numpy / ml_dtypes on every non-NaN input (a second outside opinion;
    NaN payloads are not compared). Returns a note for the summary line."""
    try:
        import torch
    except ImportError:
        return "torch not importable: cross-check skipped"
    x = torch.from_numpy(x32.copy())
    finite = ~np.isnan(x32)
    with np.errstate(all="ignore"):
        pairs = [(x.half().view(torch.int16).numpy().view("<u2"), x32.astype(np.float16).view("<u2")),
                 (x.bfloat16().view(torch.int16).numpy().view("<u2"), x32.astype(ml_dtypes.bfloat16).view("<u2"))]
    for got, want in pairs:
        bad = np.nonzero((got != want) & finite)[0]
        if len(bad):
            raise SystemExit(f"torch disagrees with numpy/ml_dtypes on {len(bad)} inputs, e.g. 0x{x32.view('<u4')[bad[0]]:08x}")
    return f"torch {torch.__version__} agrees on f32->f16/bf16"


def section(name, src, dst):
    assert len(src) == len(dst)
    nb = name.encode("ascii")
    assert len(nb) < 16
    hdr = nb + b"\0" * (16 - len(nb))
    hdr += struct.pack("<III", src.dtype.itemsize, dst.dtype.itemsize, len(src))
    return hdr + src.tobytes() + dst.tobytes()


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "formats_golden.bin")
    rng = SplitMix64(0xA3F0_2024_0001)
    secs = []

    x32b = f32_inputs(rng)
    x32 = x32b.view("<f4")
    note = torch_crosscheck(x32)
    with np.errstate(all="ignore"):
        secs.append(section("f32->f16", x32b, x32.astype(np.float16).view("<u2")))
        secs.append(section("f32->bf16", x32b, x32.astype(ml_dtypes.bfloat16).view("<u2")))
        secs.append(section("f32->e4m3", x32b, x32.astype(ml_dtypes.float8_e4m3fn).view("u1")))
        secs.append(section("f32->e5m2", x32b, x32.astype(ml_dtypes.float8_e5m2).view("u1")))

        # 16-bit -> f32: every pattern with exponent field 0 or all ones, plus random ones
        def half_patterns(ebits, mbits):
            emask = ((1 << ebits) - 1) << mbits
            pats = [p for p in range(65536) if (p & emask) in (0, emask)]
            for _ in range(2048):
                pats.append(rng.u32() & 0xFFFF)
            return np.array(pats, dtype="<u2")

        h = half_patterns(5, 10)
        secs.append(section("f16->f32", h, h.view(np.float16).astype(np.float32).view("<u4")))
        b = half_patterns(8, 7)
        secs.append(section("bf16->f32", b, b.view(ml_dtypes.bfloat16).astype(np.float32).view("<u4")))
        all8 = np.arange(256, dtype="u1")
        secs.append(section("e4m3->f32", all8, all8.view(ml_dtypes.float8_e4m3fn).astype(np.float32).view("<u4")))
        secs.append(section("e5m2->f32", all8, all8.view(ml_dtypes.float8_e5m2).astype(np.float32).view("<u4")))

        x64b = f64_inputs(rng)
        x64 = x64b.view("<f8")
        secs.append(section("f64->f16", x64b, x64.astype(np.float16).view("<u2")))
        secs.append(section("f64->f32", x64b, x64.astype(np.float32).view("<u4")))

    data = b"AMPGOLD1" + struct.pack("<II", 1, len(secs)) + b"".join(secs)
    tmp = out_path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, out_path)
    print(f"wrote {out_path}: {len(secs)} sections, {len(data)} bytes "
          f"(numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}; {note})")


if __name__ == "__main__":
    main()
