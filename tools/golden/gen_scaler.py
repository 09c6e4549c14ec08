"""Golden traces of GradScaler's scale update (torch._amp_update_scale_).

PyTorch's kernel (aten/src/ATen/native/cuda/AmpKernels.cu,
amp_update_scale_cuda_kernel; the CPU kernel added in torch 2.3,
aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp, is the same code) keeps the
scale as an f32 and takes the factors as doubles:

    if (*found_inf) {
        *current_scale = (*current_scale) * backoff_factor;   // float * double -> double, one rounding
        *growth_tracker = 0;
    } else {
        successful = *growth_tracker + 1;
        if (successful == growth_interval) {
            new_scale = static_cast<float>((*current_scale) * growth_factor);
            if (isfinite(new_scale)) *current_scale = new_scale;  // never grows to inf
            *growth_tracker = 0;
        } else {
            *growth_tracker = successful;
        }
    }

Debian's torch 1.13 is a CPU build without that kernel (`_amp_update_scale_`
raises NotImplementedError on CPU tensors), so the traces come from this exact
emulation of it in numpy; where the running torch has the CPU kernel, every
trace is also run through torch._amp_update_scale_ and must agree bit for bit.

Each case: a start scale, factors and interval, a pattern of found-inf flags,
and the scale (f32) and growth tracker after each update. amp departs from
torch below the smallest normal f32 (amp's scale stops at 2^-126), so no trace
goes there; tests/test_scaler.c checks that floor on its own.

    /usr/bin/python3 tools/golden/gen_scaler.py
Writes tests/data/golden_scaler.bin (read by tests/test_scaler.c)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from golden_format import write_golden  # noqa: E402

F32_MIN_NORMAL = np.float32(2.0 ** -126)


def update(scale, tracker, found, growth, backoff, interval):
    scale = np.float32(scale)
    if found:
        return np.float32(np.float64(scale) * np.float64(backoff)), 0
    successful = tracker + 1
    if successful == interval:
        with np.errstate(over="ignore"):
            new = np.float32(np.float64(scale) * np.float64(growth))
        if np.isfinite(new):
            scale = new
        return scale, 0
    return scale, successful


def torch_trace(init, growth, backoff, interval, pattern):
    """The same trace through torch's kernel, or None where it is missing."""
    try:
        import torch
        s = torch.tensor([init], dtype=torch.float32)
        t = torch.zeros(1, dtype=torch.int32)
        out = []
        for f in pattern:
            torch._amp_update_scale_(s, t, torch.tensor([float(f)]), growth, backoff, interval)
            out.append((np.float32(s.item()), int(t.item())))
        return out
    except (ImportError, NotImplementedError, RuntimeError):
        return None


rng = np.random.default_rng(12)
cases = [
    # the example: 1700 backed off by 0.3 is exactly 510 in torch (510.0000305 in f32 arithmetic)
    (1700.0, 2.0, 0.3, 2000, [1]),
    (65536.0, 1.1, 0.7, 3, list(rng.random(60) < 0.3)),
    (1e38, 3.7, 0.9, 1, [0, 0, 0, 1, 0, 0, 0, 0]),  # growth past FLT_MAX is refused
    (3.0, 1.0001, 0.999, 1, list(rng.random(100) < 0.5)),
    (1e-12, 2.5, 0.13, 2, list(rng.random(40) < 0.4)),
    (65536.0, 2.0, 0.5, 2000, [1] * 30),  # 2^16 -> 2^-14, exact
    (12345.678, 1.7, 0.33, 2, list(rng.random(80) < 0.35)),
    (0.25, 10.0, 0.1, 1, [0, 0, 1, 0, 1, 1, 0, 0, 0, 1]),
]

rec = {}
for i, (init, growth, backoff, interval, pattern) in enumerate(cases):
    scale, tracker = np.float32(init), 0
    scales, trackers = [], []
    for f in pattern:
        scale, tracker = update(scale, tracker, bool(f), growth, backoff, interval)
        assert scale >= F32_MIN_NORMAL, f"case {i}: trace leaves the normal f32 range, where amp departs from torch"
        scales.append(scale)
        trackers.append(tracker)
    tt = torch_trace(float(np.float32(init)), growth, backoff, interval, pattern)
    if tt is not None:
        assert [s for s, _ in tt] == scales and [t for _, t in tt] == trackers, f"case {i}: torch disagrees"
    rec[f"case{i}.params"] = np.array([np.float32(init), growth, backoff, interval], dtype=np.float64)
    rec[f"case{i}.found"] = np.array(pattern, dtype=np.uint8)
    rec[f"case{i}.scale"] = np.array(scales, dtype=np.float32)
    rec[f"case{i}.tracker"] = np.array(trackers, dtype=np.int64)

assert rec["case0.scale"][0] == np.float32(510.0)
out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden_scaler.bin")
write_golden(os.path.normpath(out), rec)
print(f"wrote {out}: {len(cases)} traces")
