"""Golden data for the elementwise ops and activations (tests/test_ops_elementwise.c,
tests/test_ops_activation.c).

    /usr/bin/python3 tools/golden/gen_elementwise.py

For every op and dtype (f32, f16, bf16) the file holds, under "<op>.<dtype>.":
  in0, in1, in2   the inputs (in the dtype; only as many as the op takes)
  gy              the upstream gradient (in the output's dtype)
  y               the forward output
  g0, g1, g2      the gradients of the inputs
f32 runs natively in PyTorch. f16 and bf16 are computed the way torch's
opmath does it (and amp promises): inputs widened exactly to f32, the op and
its backward evaluated in f32, the results rounded once to the half dtype.
Deterministic: fixed seeds, so rerunning gives the same bytes.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_format import write_golden  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "golden_elementwise.bin")

DTYPES = [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]

S = [4, 5]


CUR_DT = torch.float32


def rb(v):
    """A scalar bound as torch's clamp sees it: converted to the tensor's dtype
    (native bf16 clamp does this; f16 clamp is not implemented on CPU)."""
    return float(torch.tensor(v, dtype=CUR_DT))


def u(lo, hi):
    return lambda g, shape: lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float64)


def n(scale=1.0):
    return lambda g, shape: scale * torch.randn(shape, generator=g, dtype=torch.float64)


def away_from_zero(lo, hi):
    def f(g, shape):
        m = lo + (hi - lo) * torch.rand(shape, generator=g, dtype=torch.float64)
        s = torch.where(torch.rand(shape, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
        return m * s
    return f


# name: (function of the input tensors, [(shape, generator)] per input)
OPS = {
    "exp": (torch.exp, [(S, n())]),
    "log": (torch.log, [(S, u(0.2, 3.0))]),
    "log1p": (torch.log1p, [(S, u(-0.6, 3.0))]),
    "sqrt": (torch.sqrt, [(S, u(0.1, 4.0))]),
    "rsqrt": (torch.rsqrt, [(S, u(0.1, 4.0))]),
    "reciprocal": (torch.reciprocal, [(S, away_from_zero(0.3, 3.0))]),
    "neg": (torch.neg, [(S, n())]),
    "abs": (torch.abs, [(S, n())]),
    "clamp": (lambda x: torch.clamp(x, rb(-0.5), rb(0.7)), [(S, n())]),
    "clamp_min": (lambda x: torch.clamp(x, min=rb(-0.3)), [(S, n())]),
    "pow_2.5": (lambda x: torch.pow(x, 2.5), [(S, u(0.1, 2.0))]),
    "pow_3": (lambda x: torch.pow(x, 3.0), [(S, n())]),
    "pow_-1.5": (lambda x: torch.pow(x, -1.5), [(S, u(0.3, 2.0))]),
    "add_scalar": (lambda x: x + 2.5, [(S, n())]),
    "sub_scalar": (lambda x: x - 1.25, [(S, n())]),
    "rsub_scalar": (lambda x: 3.0 - x, [(S, n())]),
    "mul_scalar": (lambda x: x * -1.5, [(S, n())]),
    "div_scalar": (lambda x: x / 3.0, [(S, n())]),
    "add": (torch.add, [([2, 1, 3], n()), ([4, 1], n())]),
    "sub": (torch.sub, [([2, 1, 3], n()), ([4, 1], n())]),
    "mul": (torch.mul, [([2, 1, 3], n()), ([4, 1], n())]),
    "div": (torch.div, [([2, 1, 3], n()), ([4, 1], away_from_zero(0.5, 2.0))]),
    "pow_tensor": (torch.pow, [([2, 1, 3], u(0.2, 2.0)), ([4, 1], u(-1.5, 2.5))]),
    "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5), [([4, 1], n()), ([2, 1, 3], n()), ([3], n())]),
    "addcdiv": (lambda a, b, c: torch.addcdiv(a, b, c, value=0.5),
                [([4, 1], n()), ([2, 1, 3], n()), ([3], away_from_zero(0.5, 2.0))]),
    # activations
    "relu": (torch.relu, [(S, n())]),
    "sigmoid": (torch.sigmoid, [(S, n(2.0))]),
    "tanh": (torch.tanh, [(S, n(1.5))]),
    "silu": (F.silu, [(S, n(2.0))]),
    "gelu_erf": (F.gelu, [(S, n(2.0))]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(S, n(2.0))]),
    "softplus": (F.softplus, [(S, n(3.0))]),
    "softplus_b2_t5": (lambda x: F.softplus(x, beta=2.0, threshold=5.0), [(S, u(-3.0, 4.5))]),
    "prelu_c": (F.prelu, [([2, 3, 4], n()), ([3], u(0.05, 0.5))]),
    "prelu_1": (F.prelu, [([2, 3, 4], n()), ([1], u(0.05, 0.5))]),
}


def main():
    global CUR_DT
    recs = []
    for seed, (name, (fn, specs)) in enumerate(OPS.items()):
        for dname, dt in DTYPES:
            CUR_DT = dt
            g = torch.Generator().manual_seed(1000 + seed)
            ins = [gen(g, shape).to(dt) for shape, gen in specs]
            # f32 natively; halves through f32 (exact widening), rounded once
            work = [x.detach().to(torch.float32).requires_grad_(True) for x in ins]
            y = fn(*work)
            gy = torch.randn(y.shape, generator=g, dtype=torch.float64).to(dt)
            grads = torch.autograd.grad(y, work, gy.to(torch.float32))
            for i, x in enumerate(ins):
                recs.append((f"{name}.{dname}.in{i}", x))
            recs.append((f"{name}.{dname}.gy", gy))
            recs.append((f"{name}.{dname}.y", y.detach().to(dt)))
            for i, gr in enumerate(grads):
                recs.append((f"{name}.{dname}.g{i}", gr.to(dt)))
    write_golden(OUT, recs)
    print(f"wrote {len(recs)} records to {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
