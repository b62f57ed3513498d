#!/usr/bin/env python3
"""Writes tests/data/optim_reference.txt, the PyTorch numbers tests/test_optim.c checks cgrad's
optimizers, learning-rate schedules and gradient clipping against.

Usage:  /usr/bin/python3 tests/make_optim_fixtures.py [OUTPUT_DIR]   (default: tests/data next to this script)

Runs unchanged under PyTorch 1.13 (Debian's python3-torch) and 2.x; float32 on the CPU, seeded with
torch.manual_seed. One plain-text file; '#' lines are comments, every other line is a record of
space-separated fields. Floats are written with repr(), the shortest decimal that reads back as the
same double (float32 values are exact in a double), so C's strtod/strtof read them exactly.

The model is nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2)): parameters 0.weight (3, 4), 0.bias (3,),
1.weight (2, 3), 1.bias (2,), numbered 0..3 in that (named_parameters) order.

    init <param> <numel> <values...>             the parameters before the first step
    grad <step> <param> <numel> <values...>      the gradient each step gives each parameter
    case <name>                                  an optimizer case (settings: CASES below, and the
                                                 same table in tests/test_optim.c); then
    param <name> <step> <param> <numel> <v...>   each parameter after optimizer step <step>
    lr <name> <group> <count> <lrs...>           a schedule's get_last_lr()[group] after construction
                                                 and after each of count - 1 scheduler.step() calls
                                                 (ReduceLROnPlateau: step(metric) over METRICS[name])
    clip <name> <norm_type> <max_norm> <total>   clip_grad_norm_ of the step-0 gradients of parameters
                                                 0, 1, 3 (parameter 2 has no gradient): the returned
                                                 total norm; then
    clipped <name> <param> <numel> <values...>   each of those gradients after clipping
                                                 (clip_value_<v>: clip_grad_value_ with clip_value v)

Optimizer cases run STEPS steps of: zero_grad(set_to_none=True), p.grad = the fixed gradient (None for
a parameter the case's mask skips at that step), optimizer.step(). The schedule cases run on SGD with
two parameter groups of lr 0.1 and 0.05 (the weights, the biases).
"""
import math
import os
import sys

import torch

STEPS = 4
SKIP = {1: [2], 2: [1, 3]}  # step -> parameters without a gradient (the "skip" cases)

# name: (constructor, options, skips)
CASES = {
    "rmsprop_default": ("RMSprop", dict(lr=1e-2), False),
    "rmsprop_centered": ("RMSprop", dict(lr=1e-2, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.5, centered=True),
                         False),
    "rmsprop_momentum_skip": ("RMSprop", dict(lr=2e-2, alpha=0.95, momentum=0.9), True),
    "adagrad_default": ("Adagrad", dict(lr=1e-2), False),
    "adagrad_all_skip": ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2,
                                         eps=1e-8), True),
    "adadelta_default": ("Adadelta", dict(), False),
    "adadelta_all": ("Adadelta", dict(lr=0.5, rho=0.6, eps=1e-4, weight_decay=0.1), False),
}
# Two groups: weights (parameters 0, 2) with the first options, biases (1, 3) with the second, and the
# constructor's own keyword arguments (the groups' defaults). PyTorch's Adagrad starts every parameter's
# sum at the constructor's initial_accumulator_value, not its group's: cgrad takes each group's, so the
# case gives both groups the constructor's.
GROUP_CASES = {
    "adagrad_groups": ("Adagrad", [dict(lr=0.1, lr_decay=0.1), dict(lr=0.05, weight_decay=0.2)],
                       dict(initial_accumulator_value=0.5)),
    "rmsprop_groups": ("RMSprop", [dict(lr=1e-2, momentum=0.5), dict(lr=2e-2, alpha=0.8, centered=True)], dict()),
}

S = torch.optim.lr_scheduler
SCHEDULES = {
    "step": (lambda o: S.StepLR(o, step_size=3, gamma=0.5), 12),
    "cosine": (lambda o: S.CosineAnnealingLR(o, T_max=5, eta_min=0.001), 16),
    "linear_default": (lambda o: S.LinearLR(o), 8),
    "linear_down": (lambda o: S.LinearLR(o, start_factor=0.5, end_factor=0.1, total_iters=4), 7),
    # PyTorch allows one step past the last (last_epoch == total_steps), and refuses the next
    "onecycle_cos": (lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=20, cycle_momentum=False), 21),
    "onecycle_linear_three": (lambda o: S.OneCycleLR(o, max_lr=0.4, total_steps=16, pct_start=0.25,
                                                     anneal_strategy="linear", div_factor=10.0,
                                                     final_div_factor=100.0, three_phase=True,
                                                     cycle_momentum=False), 16),
    "plateau_min_rel": (lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, threshold=0.1,
                                                      threshold_mode="rel", cooldown=1, min_lr=0.01), None),
    "plateau_max_abs": (lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.3, patience=1, threshold=0.05,
                                                      threshold_mode="abs", min_lr=0.004), None),
    "warm_restarts_mult": (lambda o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01), 20),
    "warm_restarts": (lambda o: S.CosineAnnealingWarmRestarts(o, T_0=4), 10),
}
METRICS = {
    "plateau_min_rel": [1.0, 0.95, 0.96, 0.97, 0.98, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
                        1.7, 1.8, 1.9, 2.0, 2.1],
    "plateau_max_abs": [0.1, 0.2, 0.22, 0.24, 0.5, 0.5, 0.5, 0.56, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1],
}
CLIPS = [("norm2", 2.0, 1.0), ("norm2_large", 2.0, 100.0), ("norm_inf", math.inf, 0.25), ("norm_1_5", 1.5, 0.5),
         ("norm_1", 1.0, 2.0)]
CLIP_VALUES = [0.3]


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))


def values(t):
    return " ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist())


def run_optimizer(out, name, kind, groups, skips, init, grads, defaults=None):
    m = model()
    with torch.no_grad():
        for p, v in zip(m.parameters(), init):
            p.copy_(v)
    params = list(m.parameters())
    if isinstance(groups, list):
        opt = getattr(torch.optim, kind)([{"params": [params[0], params[2]], **groups[0]},
                                          {"params": [params[1], params[3]], **groups[1]}], **defaults)
    else:
        opt = getattr(torch.optim, kind)(params, **groups)
    out.append(f"case {name}")
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        for i, p in enumerate(params):
            p.grad = None if skips and i in SKIP.get(step, []) else grads[step][i].clone()
        opt.step()
        for i, p in enumerate(params):
            out.append(f"param {name} {step} {i} {p.numel()} {values(p)}")


def run_schedule(out, name, make, count):
    m = model()
    params = list(m.parameters())
    opt = torch.optim.SGD([{"params": [params[0], params[2]], "lr": 0.1}, {"params": [params[1], params[3]], "lr": 0.05}])
    sched = make(opt)
    lrs = [[g["lr"] for g in opt.param_groups]]
    metrics = METRICS.get(name)
    for k in range(len(metrics) if metrics else count - 1):
        opt.step()
        if metrics:
            sched.step(metrics[k])
        else:
            sched.step()
        lrs.append([g["lr"] for g in opt.param_groups])
    for g in range(2):
        out.append(f"lr {name} {g} {len(lrs)} " + " ".join(repr(float(v[g])) for v in lrs))


def run_clips(out, grads):
    for name, norm_type, max_norm in CLIPS + [(f"clip_value_{v}", None, v) for v in CLIP_VALUES]:
        m = model()
        params = list(m.parameters())
        for i, p in enumerate(params):
            p.grad = None if i == 2 else grads[0][i].clone()
        if norm_type is None:
            torch.nn.utils.clip_grad_value_(m.parameters(), max_norm)
            out.append(f"clip {name} value {repr(float(max_norm))} 0.0")
        else:
            total = torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm, norm_type=norm_type)
            out.append(f"clip {name} {repr(float(norm_type))} {repr(float(max_norm))} {repr(float(total))}")
        for i, p in enumerate(params):
            if p.grad is not None:
                out.append(f"clipped {name} {i} {p.numel()} {values(p.grad)}")


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    torch.manual_seed(1234)
    init = [p.detach().clone() for p in model().parameters()]
    torch.manual_seed(1234)
    grads = [[torch.rand(p.shape) * 2 - 1 for p in init] for _ in range(STEPS)]
    out = [f"# written by tests/make_optim_fixtures.py under torch {torch.__version__}; format in its docstring"]
    for i, p in enumerate(init):
        out.append(f"init {i} {p.numel()} {values(p)}")
    for step in range(STEPS):
        for i, g in enumerate(grads[step]):
            out.append(f"grad {step} {i} {g.numel()} {values(g)}")
    for name, (kind, options, skips) in CASES.items():
        run_optimizer(out, name, kind, options, skips, init, grads)
    for name, (kind, groups, defaults) in GROUP_CASES.items():
        run_optimizer(out, name, kind, groups, False, init, grads, defaults)
    for name, (make, count) in SCHEDULES.items():
        run_schedule(out, name, make, count)
    run_clips(out, grads)
    text = "\n".join(out) + "\n"
    assert len(text) < 200_000, len(text)
    with open(os.path.join(out_dir, "optim_reference.txt"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
