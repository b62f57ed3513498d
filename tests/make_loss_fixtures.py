#!/usr/bin/env python3
"""Fixtures for tests/test_losses.c: PyTorch's losses (torch.nn.functional) on small inputs, with their
outputs and input gradients.

    /usr/bin/python3 tests/make_loss_fixtures.py [OUTPUT_DIR]     (default: tests/data next to this script)

Runs unchanged under PyTorch 1.13 (Debian's python3-torch) and 2.x; float32, CPU, torch.manual_seed(0).
Writes tests/data/losses.txt, a text file of cases. A case is

    case <name> fn=<function> reduction=<mean|sum|none|batchmean> ignore_index=<int> smoothing=<g>
         param=<g> log_target=<0|1> scale=<g>                                   (one line)
    t <tensor name> <f32|i64> <ndim> <d0> ... <d(ndim-1)> <values, row-major>   (one line each)
    end

fn is one of cross_entropy, nll_loss, kl_div, bce_with_logits, smooth_l1, huber, l1 (F.<fn>, F.l1_loss,
F.smooth_l1_loss, F.huber_loss, F.binary_cross_entropy_with_logits); param is smooth_l1's beta or huber's
delta. Tensors: input, target, and where the case has them weight, pos_weight; out (F.<fn>'s result);
grad_out (the gradient the backward starts from: ones for a 0-dim out, random for reduction none);
grad_input and, where the target is differentiable (probabilities, kl_div, the element-wise losses),
grad_target. scale is the size the output's rounding scales with: the sum of the unreduced losses'
magnitudes over the reduction's denominator for kl_div (whose terms have both signs), else |out| (max |out|
for none: every other loss's terms are nonnegative). Floats are written with 9 significant digits, which
float32 reads back exactly.

The cases: cross_entropy with class weights, ignore_index and label_smoothing, class-index and
probability targets, (N, C) and (N, C, d) shapes, each reduction (and every row ignored: a NaN mean);
nll_loss with weights and ignore_index; kl_div with each reduction and log_target both ways;
bce_with_logits with weight and pos_weight; smooth_l1 and huber with non-default beta and delta; l1."""
import os
import sys

import torch
import torch.nn.functional as F

DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
REDUCTIONS = ("mean", "sum", "none")


def tensor_line(name, t):
    t = t.detach().contiguous()
    kind = "i64" if t.dtype == torch.int64 else "f32"
    values = t.flatten().tolist()
    text = [str(v) for v in values] if kind == "i64" else ["%.9g" % v for v in values]
    return " ".join(["t", name, kind, str(t.dim())] + [str(s) for s in t.shape] + text)


def run(fn, reduction, inputs, opts):
    """F.<fn> of inputs (a dict of tensors) with opts, at reduction."""
    x, y, w, pw = inputs["input"], inputs["target"], inputs.get("weight"), inputs.get("pos_weight")
    if fn == "cross_entropy":
        return F.cross_entropy(x, y, weight=w, ignore_index=opts["ignore_index"], reduction=reduction,
                               label_smoothing=opts["smoothing"])
    if fn == "nll_loss":
        return F.nll_loss(x, y, weight=w, ignore_index=opts["ignore_index"], reduction=reduction)
    if fn == "kl_div":
        return F.kl_div(x, y, reduction=reduction, log_target=bool(opts["log_target"]))
    if fn == "bce_with_logits":
        return F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw, reduction=reduction)
    if fn == "smooth_l1":
        return F.smooth_l1_loss(x, y, reduction=reduction, beta=opts["param"])
    if fn == "huber":
        return F.huber_loss(x, y, reduction=reduction, delta=opts["param"])
    return F.l1_loss(x, y, reduction=reduction)


def case(lines, name, fn, reduction, inputs, ignore_index=-100, smoothing=0.0, param=1.0, log_target=0):
    opts = {"ignore_index": ignore_index, "smoothing": smoothing, "param": param, "log_target": log_target}
    x, y = inputs["input"].clone().requires_grad_(True), inputs["target"].clone()
    if y.is_floating_point():
        y.requires_grad_(True)
    leaves = dict(inputs, input=x, target=y)
    out = run(fn, reduction, leaves, opts)
    grad_out = torch.ones_like(out) if out.dim() == 0 else torch.rand(out.shape) + 0.5
    out.backward(grad_out)
    with torch.no_grad():
        if fn == "kl_div":
            terms = F.kl_div(x, y, reduction="none", log_target=bool(log_target)).abs().sum().item()
            scale = terms / {"mean": max(x.numel(), 1), "sum": 1, "none": 1, "batchmean": x.shape[0]}[reduction]
        else:
            scale = out.abs().max().item() if out.numel() else 0.0
    lines.append("case %s fn=%s reduction=%s ignore_index=%d smoothing=%.9g param=%.9g log_target=%d scale=%.9g" %
                 (name, fn, reduction, ignore_index, smoothing, param, log_target, scale))
    for key in ("input", "target", "weight", "pos_weight"):
        if key in inputs:
            lines.append(tensor_line(key, inputs[key]))
    lines.append(tensor_line("out", out))
    lines.append(tensor_line("grad_out", grad_out))
    lines.append(tensor_line("grad_input", x.grad))
    if y.requires_grad:
        lines.append(tensor_line("grad_target", y.grad))
    lines.append("end")


def class_cases(lines):
    n, c, d = 6, 5, 3
    logits = torch.randn(n, c) * 2
    idx = torch.randint(0, c, (n,))
    idx[1] = -100
    idx[4] = 2
    weight = torch.rand(c) + 0.25
    probs = torch.softmax(torch.randn(n, c), 1)
    logits3 = torch.randn(n, c, d)
    idx3 = torch.randint(0, c, (n, d))
    idx3[0, 1] = 3
    idx3[2, 2] = 3  # ignored below (ignore_index=3, a class index)
    probs3 = torch.rand(n, c, d)  # rows need not sum to 1
    for r in REDUCTIONS:
        case(lines, "ce_idx_w_ls_" + r, "cross_entropy", r, {"input": logits, "target": idx, "weight": weight},
             smoothing=0.1)
        case(lines, "ce_idx_" + r, "cross_entropy", r, {"input": logits, "target": idx})
        case(lines, "ce_prob_w_ls_" + r, "cross_entropy", r, {"input": logits, "target": probs, "weight": weight},
             smoothing=0.2)
        case(lines, "ce3_idx_w_ls_" + r, "cross_entropy", r, {"input": logits3, "target": idx3, "weight": weight},
             ignore_index=3, smoothing=0.15)
        case(lines, "ce3_prob_" + r, "cross_entropy", r, {"input": logits3, "target": probs3, "weight": weight},
             smoothing=0.05)
        logp = torch.log_softmax(torch.randn(n, c), 1)
        case(lines, "nll_w_" + r, "nll_loss", r, {"input": logp, "target": idx, "weight": weight})
        case(lines, "nll3_w_" + r, "nll_loss", r, {"input": torch.log_softmax(logits3, 1), "target": idx3,
                                                    "weight": weight}, ignore_index=3)
    all_ignored = torch.full((3,), -100, dtype=torch.int64)
    case(lines, "ce_all_ignored_mean", "cross_entropy", "mean", {"input": logits[:3], "target": all_ignored})
    case(lines, "nll_all_ignored_mean", "nll_loss", "mean", {"input": logits[:3], "target": all_ignored})


def pair_cases(lines):
    shape = (4, 6)
    logp = torch.log_softmax(torch.randn(shape), 1)
    target = torch.softmax(torch.randn(shape), 1)
    target[0, 2] = 0.0  # xlogy's 0 log 0 = 0
    for r in REDUCTIONS + ("batchmean",):
        case(lines, "kl_" + r, "kl_div", r, {"input": logp, "target": target})
        case(lines, "kl_log_" + r, "kl_div", r, {"input": logp, "target": torch.log_softmax(torch.randn(shape), 1)},
             log_target=1)
    x = torch.randn(shape) * 3
    y = torch.rand(shape)
    for r in REDUCTIONS:
        case(lines, "bcel_w_pw_" + r, "bce_with_logits", r,
             {"input": x, "target": y, "weight": torch.rand(shape[1]) + 0.5, "pos_weight": torch.rand(shape[1]) * 3})
        case(lines, "bcel_" + r, "bce_with_logits", r, {"input": x, "target": y})
        a, b = torch.randn(shape) * 2, torch.randn(shape) * 2
        case(lines, "smooth_l1_" + r, "smooth_l1", r, {"input": a, "target": b}, param=0.5)
        case(lines, "huber_" + r, "huber", r, {"input": a, "target": b}, param=1.75)
        case(lines, "l1_" + r, "l1", r, {"input": a, "target": b})
    case(lines, "smooth_l1_beta0_sum", "smooth_l1", "sum", {"input": a, "target": b}, param=0.0)


def main():
    torch.manual_seed(0)
    lines = ["# tests/make_loss_fixtures.py (PyTorch %s)" % torch.__version__]
    class_cases(lines)
    pair_cases(lines)
    os.makedirs(DATA, exist_ok=True)
    with open(os.path.join(DATA, "losses.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
