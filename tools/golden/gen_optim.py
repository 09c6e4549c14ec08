"""Golden data for amp's optimizers: PyTorch 1.13 (Debian python3-torch)
SGD / Adam / AdamW applied for 5 steps to fixed parameters with fixed
per-step gradients, and clip_grad_norm_. Run with:
    /usr/bin/python3 tools/golden/gen_optim.py
Writes tests/data/golden_optim.bin (read by tests/test_optim.c)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from golden_format import write_golden  # noqa: E402

torch.manual_seed(1234)
N = 37
STEPS = 5
p0 = torch.randn(N, dtype=torch.float32)
grads = [torch.randn(N, dtype=torch.float32) * (0.1 + i) for i in range(STEPS)]

cases = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_mom": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.02)),
    "adam": (torch.optim.Adam, dict(lr=1e-2)),
    "adam_wd": (torch.optim.Adam, dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2)),
    "adamw_wd": (torch.optim.AdamW, dict(lr=3e-2, betas=(0.85, 0.995), eps=1e-7, weight_decay=0.2)),
}

rec = {"p0": p0}
for i, g in enumerate(grads):
    rec[f"g{i}"] = g
for name, (ctor, kw) in cases.items():
    p = p0.clone().requires_grad_(True)
    opt = ctor([p], foreach=False, **kw)
    for i in range(STEPS):
        p.grad = grads[i].clone()
        opt.step()
        rec[f"{name}.p{i}"] = p.detach().clone()
    st = opt.state[p]
    for k in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
        if k in st and st[k] is not None:
            rec[f"{name}.{k}"] = st[k].clone()

# clip_grad_norm_ on two parameters
a = torch.randn(5, 3, requires_grad=True)
b = torch.randn(7, requires_grad=True)
a.grad = torch.randn(5, 3) * 3
b.grad = torch.randn(7) * 2
rec["clip.ga"] = a.grad.clone()
rec["clip.gb"] = b.grad.clone()
norm = torch.nn.utils.clip_grad_norm_([a, b], max_norm=1.5)
rec["clip.norm"] = norm.reshape(1).to(torch.float64)
rec["clip.ga_after"] = a.grad.clone()
rec["clip.gb_after"] = b.grad.clone()

out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden_optim.bin")
write_golden(os.path.normpath(out), rec)
print("wrote", os.path.normpath(out), len(rec), "records")
