"""Golden data for reductions, softmax, normalisation, embedding and losses.

Run with Debian's python3 and PyTorch 1.13 (CPU):
  /usr/bin/python3 tools/golden/gen_reduce_norm_loss.py
Writes tests/data/golden_reduce_norm_loss.bin (read by tests/test_ops_reduce.c,
tests/test_ops_softmax_norm.c and tests/test_ops_loss.c). Deterministic.

Record naming: "<case>/<what>". Inputs are f32 (indices i64). For an op whose
output is not a scalar, "<case>/r" is the upstream gradient R: the gradients
stored are those of sum(out * R). Scalar outputs use upstream 1.
"""
import os
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_format import write_golden  # noqa: E402

warnings.filterwarnings("ignore", message="reduction: 'mean' divides")
torch.manual_seed(1234)
torch.set_num_threads(1)
R = []


def rec(name, t):
    R.append((name, t.detach().clone().contiguous()))


def leaf(t):
    return t.detach().clone().requires_grad_(True)


def run(case, fn, inputs, grad_names):
    """fn(*inputs) -> out; stores inputs, out, upstream R, grads."""
    ins = [leaf(t) if n is not None else t for t, n in zip(inputs, grad_names)]
    out = fn(*ins)
    rec(case + "/out", out)
    if any(n is not None for n in grad_names):
        if out.numel() == 1 and out.dim() == 0:
            out.backward()
        else:
            r = torch.randn(out.shape)
            rec(case + "/r", r)
            (out * r).sum().backward()
        for t, n in zip(ins, grad_names):
            if n is not None:
                rec(case + "/g" + n, t.grad)
    return out


# ---- reductions ------------------------------------------------------------------
x = torch.randn(3, 4, 5)
rec("sum02/x", x)
run("sum02", lambda a: a.sum(dim=(0, 2)), [x], ["x"])
run("sumall", lambda a: a.sum(), [x], ["x"])
run("mean1k", lambda a: a.mean(dim=1, keepdim=True), [x], ["x"])
run("meanneg", lambda a: a.mean(dim=(-1, 0)), [x], ["x"])

xp = torch.randn(4, 5)
xp[1, 2] = 0.0
xp[2, 0] = 0.0
xp[2, 3] = 0.0
rec("prod/x", xp)
run("prod", lambda a: a.prod(dim=1), [xp], ["x"])
run("prod0k", lambda a: a.prod(dim=0, keepdim=True), [xp], ["x"])

rec("cumsum/x", x)
run("cumsum", lambda a: a.cumsum(dim=1), [x], ["x"])

xm = torch.randint(-3, 4, (4, 6)).float()  # many ties: first occurrence
rec("max/x", xm)
out = run("max", lambda a: a.max(dim=1).values, [xm], ["x"])
rec("max/idx", xm.max(dim=1).indices)
rec("max0/idx", xm.max(dim=0, keepdim=True).indices)
run("max0", lambda a: a.max(dim=0, keepdim=True).values, [xm], ["x"])

xn = torch.randn(4, 5)
xn[2] = 0.0  # a zero row: gradient of the 2-norm there is 0
rec("norm/x", xn)
run("norm2", lambda a: torch.norm(a, 2, dim=1), [xn], ["x"])
run("norm1", lambda a: torch.norm(a, 1), [xn], ["x"])
run("norm3", lambda a: torch.norm(a, 3, dim=0), [xn], ["x"])
run("norminf", lambda a: torch.norm(a, float("inf"), dim=1, keepdim=True), [xn], ["x"])
run("norm2all", lambda a: torch.norm(a), [xn], ["x"])

# ---- softmax ---------------------------------------------------------------------
xs = torch.randn(3, 7) * 3
rec("softmax/x", xs)
run("softmax", lambda a: torch.softmax(a, dim=1), [xs], ["x"])
run("log_softmax0", lambda a: torch.log_softmax(a, dim=0), [xs], ["x"])
x3 = torch.randn(2, 4, 3) * 2
rec("softmax3/x", x3)
run("softmax3", lambda a: torch.softmax(a, dim=1), [x3], ["x"])
run("log_softmax3", lambda a: torch.log_softmax(a, dim=-1), [x3], ["x"])
rec("softmax_bf16/out", torch.softmax(xs.bfloat16(), dim=1))

# ---- layer / batch / group norm ----------------------------------------------------
xl = torch.randn(4, 6) * 2 + 1
wl = torch.randn(6)
bl = torch.randn(6)
for n, t in (("x", xl), ("w", wl), ("b", bl)):
    rec("layer_norm/" + n, t)
run("layer_norm", lambda a, w, b: F.layer_norm(a, (6,), w, b, 1e-5), [xl, wl, bl], ["x", "w", "b"])
xl2 = torch.randn(2, 3, 4)
rec("layer_norm2/x", xl2)
run("layer_norm2", lambda a: F.layer_norm(a, (3, 4), None, None, 1e-3), [xl2], ["x"])
rec("layer_norm_bf16/out", F.layer_norm(xl.bfloat16(), (6,), wl.bfloat16(), bl.bfloat16(), 1e-5))

xb = torch.randn(4, 3, 5) * 1.5 + 0.5
wb = torch.randn(3)
bb = torch.randn(3)
rm = torch.randn(3) * 0.1
rv = torch.rand(3) + 0.5
for n, t in (("x", xb), ("w", wb), ("b", bb), ("rm", rm), ("rv", rv)):
    rec("batch_norm/" + n, t)
rm1, rv1 = rm.clone(), rv.clone()
run("batch_norm", lambda a, w, b: F.batch_norm(a, rm1, rv1, w, b, True, 0.1, 1e-5), [xb, wb, bb], ["x", "w", "b"])
rec("batch_norm/rm_after", rm1)
rec("batch_norm/rv_after", rv1)
run("batch_norm_eval", lambda a, w, b: F.batch_norm(a, rm, rv, w, b, False, 0.1, 1e-5), [xb, wb, bb], ["x", "w", "b"])
xb2 = torch.randn(6, 3)
rec("batch_norm1d/x", xb2)
rm2, rv2 = torch.zeros(3), torch.ones(3)
run("batch_norm1d", lambda a: F.batch_norm(a, rm2, rv2, None, None, True, 0.3, 1e-5), [xb2], ["x"])
rec("batch_norm1d/rm_after", rm2)
rec("batch_norm1d/rv_after", rv2)

xg = torch.randn(2, 6, 3)
wg = torch.randn(6)
bg = torch.randn(6)
for n, t in (("x", xg), ("w", wg), ("b", bg)):
    rec("group_norm/" + n, t)
run("group_norm", lambda a, w, b: F.group_norm(a, 3, w, b, 1e-5), [xg, wg, bg], ["x", "w", "b"])

# ---- embedding --------------------------------------------------------------------
we = torch.randn(10, 4)
ie = torch.tensor([[1, 3, 3], [9, 0, 3]], dtype=torch.int64)
rec("embedding/w", we)
rec("embedding/idx", ie)
run("embedding", lambda w: F.embedding(ie, w), [we], ["w"])

# ---- losses ------------------------------------------------------------------------
lg = torch.randn(6, 5) * 2
tg = torch.tensor([1, 0, 4, -100, 2, 1], dtype=torch.int64)
cw = torch.rand(5) + 0.5
rec("ce/logits", lg)
rec("ce/target", tg)
rec("ce/weight", cw)
ce_cases = {
    "ce_mean": dict(),
    "ce_sum": dict(reduction="sum"),
    "ce_none": dict(reduction="none"),
    "ce_w_mean": dict(weight=cw),
    "ce_w_sum": dict(weight=cw, reduction="sum"),
    "ce_ls_mean": dict(label_smoothing=0.1),
    "ce_ls_none": dict(label_smoothing=0.1, reduction="none"),
    "ce_w_ls_mean": dict(weight=cw, label_smoothing=0.2),
    "ce_w_ls_sum": dict(weight=cw, label_smoothing=0.2, reduction="sum"),
    "ce_w_ls_none": dict(weight=cw, label_smoothing=0.3, reduction="none"),
}
for case, kw in ce_cases.items():
    run(case, lambda a, kw=kw: F.cross_entropy(a, tg, **kw), [lg], ["x"])
tg1 = torch.tensor([1, 0, 4, 3, 2, 1], dtype=torch.int64)  # ignore_index = 1
rec("ce_ig1/target", tg1)
run("ce_ig1_mean", lambda a: F.cross_entropy(a, tg1, ignore_index=1), [lg], ["x"])
run("ce_ig1_w_ls_mean", lambda a: F.cross_entropy(a, tg1, ignore_index=1, weight=cw, label_smoothing=0.25), [lg], ["x"])
# K-dimensional: logits [2, 5, 3], target [2, 3]
lg3 = torch.randn(2, 5, 3)
tg3 = torch.tensor([[0, 4, -100], [2, 2, 1]], dtype=torch.int64)
rec("ce3/logits", lg3)
rec("ce3/target", tg3)
run("ce3", lambda a: F.cross_entropy(a, tg3, weight=cw, label_smoothing=0.1), [lg3], ["x"])

lp = torch.log_softmax(torch.randn(6, 5), dim=1)
rec("nll/input", lp)
run("nll_mean", lambda a: F.nll_loss(a, tg), [lp], ["x"])
run("nll_w_mean", lambda a: F.nll_loss(a, tg, weight=cw), [lp], ["x"])
run("nll_w_none", lambda a: F.nll_loss(a, tg, weight=cw, reduction="none"), [lp], ["x"])

xi = torch.randn(4, 3)
yi = torch.randn(4, 3)
rec("pw/input", xi)
rec("pw/target", yi)
run("mse", lambda a, b: F.mse_loss(a, b), [xi, yi], ["x", "y"])
run("mse_none", lambda a, b: F.mse_loss(a, b, reduction="none"), [xi, yi], ["x", "y"])
run("l1", lambda a, b: F.l1_loss(a, b, reduction="sum"), [xi, yi], ["x", "y"])
run("smooth_l1", lambda a, b: F.smooth_l1_loss(a, b, beta=0.5), [xi, yi], ["x", "y"])
run("smooth_l1_b2", lambda a, b: F.smooth_l1_loss(a, b, beta=2.0, reduction="sum"), [xi, yi], ["x", "y"])
yb = torch.rand(4, 3)
pw = torch.rand(3) * 2 + 0.5
rec("bce/target", yb)
rec("bce/pos_weight", pw)
xbig = xi * 20  # large logits: the stable formula matters
rec("bce/input", xbig)
run("bce", lambda a, b: F.binary_cross_entropy_with_logits(a, b), [xbig, yb], ["x", "y"])
run("bce_pw", lambda a, b: F.binary_cross_entropy_with_logits(a, b, pos_weight=pw), [xbig, yb], ["x", "y"])
run("bce_pw_none", lambda a, b: F.binary_cross_entropy_with_logits(a, b, pos_weight=pw, reduction="none"), [xbig, yb],
    ["x", "y"])
kin = torch.log_softmax(torch.randn(4, 3), dim=1)
ktg = torch.softmax(torch.randn(4, 3), dim=1)
rec("kl/input", kin)
rec("kl/target", ktg)
run("kl", lambda a, b: F.kl_div(a, b, reduction="mean"), [kin, ktg], ["x", "y"])
run("kl_sum", lambda a, b: F.kl_div(a, b, reduction="sum"), [kin, ktg], ["x", "y"])
klt = torch.log(ktg)
rec("kl_log/target", klt)
run("kl_log", lambda a, b: F.kl_div(a, b, reduction="mean", log_target=True), [kin, klt], ["x", "y"])

out_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data",
                        "golden_reduce_norm_loss.bin")
write_golden(os.path.normpath(out_path), R)
print(f"wrote {len(R)} records to {os.path.normpath(out_path)}")
