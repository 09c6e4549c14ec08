"""Golden data for matrix products, convolutions and pooling.

Run with Debian's python3 (PyTorch 1.13, CPU):
    /usr/bin/python3 tools/golden/gen_matmul_conv.py
Writes tests/data/golden_matmul_conv.bin (deterministic: fixed seed). Cases
are f32; those prefixed bf16_ run PyTorch's bf16 CPU kernels on bf16 inputs
(torch 1.13 has no f16 matmul/conv on CPU).

Per case NAME the records are NAME.in0, NAME.in1, ... (inputs), NAME.out
(forward output), NAME.gout (the upstream gradient pushed back) and NAME.g0,
NAME.g1, ... (gradients of the inputs), plus NAME.idx for max_pool2d's
indices. Parameters of each case are fixed in tests/test_ops_*.c by name.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_format import write_golden  # noqa: E402

torch.manual_seed(1234)
records = []


def case(name, fn, *shapes, dtype=torch.float32):
    ins = []
    for s in shapes:
        if s is None:
            ins.append(None)
            continue
        t = (torch.rand(s, dtype=torch.float64) * 2 - 1).to(dtype).requires_grad_(True)
        ins.append(t)
    res = fn(*ins)
    out = res[0] if isinstance(res, tuple) else res
    gout = (torch.rand(out.shape, dtype=torch.float64) * 2 - 1).to(dtype)
    out.backward(gout)
    k = 0
    for t in ins:
        if t is None:
            continue
        records.append((f"{name}.in{k}", t.detach()))
        records.append((f"{name}.g{k}", t.grad.detach()))
        k += 1
    records.append((f"{name}.out", out.detach()))
    records.append((f"{name}.gout", gout))
    if isinstance(res, tuple):
        records.append((f"{name}.idx", res[1].detach()))


# ---- matrix products -----------------------------------------------------------
case("mm", torch.mm, (5, 7), (7, 3))
case("matmul_dot", torch.matmul, (6,), (6,))
case("matmul_mv", torch.matmul, (4, 6), (6,))
case("matmul_vm", torch.matmul, (6,), (6, 3))
case("matmul_bcast", torch.matmul, (2, 1, 4, 5), (3, 5, 2))
case("matmul_3d2d", torch.matmul, (3, 4, 5), (5, 2))
case("matmul_1d3d", torch.matmul, (5,), (2, 5, 3))
case("matmul_3d1d", torch.matmul, (2, 3, 5), (5,))
case("bmm", torch.bmm, (3, 4, 5), (3, 5, 2))
case("linear", F.linear, (2, 3, 5), (4, 5), (4,))
case("linear_1d_nobias", lambda x, w: F.linear(x, w), (5,), (4, 5))
case("addmm", lambda i, a, b: torch.addmm(i, a, b, beta=0.5, alpha=2.0), (3,), (2, 4), (4, 3))
case("baddbmm", lambda i, a, b: torch.baddbmm(i, a, b, beta=-1.0, alpha=0.5), (1, 3, 1), (2, 3, 4), (2, 4, 2))
case("dot", torch.dot, (9,), (9,))

# ---- convolutions -----------------------------------------------------------------
case("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
     (2, 3, 7, 6), (4, 3, 3, 2), (4,))
case("conv2d_groups", lambda x, w: F.conv2d(x, w, None, padding=1, groups=2), (1, 4, 5, 5), (6, 2, 3, 3))
case("conv2d_1x1", lambda x, w, b: F.conv2d(x, w, b), (2, 3, 4, 5), (5, 3, 1, 1), (5,))
case("conv2d_unbatched", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=2), (3, 6, 5), (2, 3, 3, 3), (2,))
case("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2), (2, 3, 10), (4, 3, 3), (4,))

# ---- pooling --------------------------------------------------------------------------
case("max_pool", lambda x: F.max_pool2d(x, (3, 2), stride=(2, 2), padding=(1, 1), return_indices=True),
     (2, 3, 7, 8))
case("max_pool_ceil_dil", lambda x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=2, ceil_mode=True,
                                                 return_indices=True), (1, 2, 9, 10))
case("avg_pool_ceil", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), (2, 2, 6, 7))
case("avg_pool_ceil_excl", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                                                  count_include_pad=False), (2, 2, 6, 7))
case("avg_pool_default", lambda x: F.avg_pool2d(x, 2), (3, 5, 5))
case("adaptive", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), (2, 3, 7, 9))
case("adaptive_up", lambda x: F.adaptive_avg_pool2d(x, (5, 4)), (1, 2, 3, 3))

# ---- bf16 (PyTorch's own bf16 CPU kernels) --------------------------------------------
bf = dict(dtype=torch.bfloat16)
case("bf16_mm", torch.mm, (5, 7), (7, 3), **bf)
case("bf16_bmm", torch.bmm, (3, 4, 5), (3, 5, 2), **bf)
case("bf16_linear", F.linear, (2, 3, 5), (4, 5), (4,), **bf)
case("bf16_conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
     (2, 3, 7, 6), (4, 3, 3, 2), (4,), **bf)
case("bf16_conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2), (2, 3, 10), (4, 3, 3), (4,),
     **bf)
case("bf16_max_pool", lambda x: F.max_pool2d(x, (3, 2), stride=(2, 2), padding=(1, 1), return_indices=True),
     (2, 3, 7, 8), **bf)
case("bf16_avg_pool_ceil", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), (2, 2, 6, 7), **bf)
case("bf16_adaptive", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), (2, 3, 7, 9), **bf)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "golden_matmul_conv.bin")
write_golden(os.path.normpath(out), records)
print(f"wrote {len(records)} records to {os.path.normpath(out)}")
