#!/usr/bin/env python3
"""Generates the PyTorch training-step fixtures that tests/test_fixtures.c checks cgrad against.

Usage:  python3 tests/make_fixtures.py [OUTPUT_DIR]      (default: tests/data next to this script)

Runs under PyTorch 1.13 (Debian's python3-torch) and 2.x. Everything is computed in float32 on the
CPU. Four cases, one file each:

    linear_sgd.bin        nn.Linear(10, 1) on 5 samples, SGD(lr=0.1)
    linear_nesterov.bin   the same data and initial weights, SGD(lr=0.1, momentum=0.9,
                          nesterov=True, weight_decay=1e-2)   (dampening 0)
    mlp_sgd.bin           Sequential(Linear(32,64), ReLU, Linear(64,64), ReLU, Linear(64,8)),
                          batch 16, SGD(lr=0.1)
    mlp_nesterov.bin      the same data and initial weights, SGD(lr=0.1, momentum=0.9,
                          nesterov=True, weight_decay=1e-2)

Each case runs 5 steps of: zero_grad(set_to_none=True), forward, MSELoss(mean), backward, step.

File format (all little-endian):
    line 1:  "cgrad-fixture 1 model=<linear|mlp> steps=5 lr=<g> momentum=<g> dampening=<g>
              weight_decay=<g> nesterov=<0|1>\\n"    (one line; fields separated by one space)
    then tensors, each:
             "<name> <ndim> <d0> ... <d(ndim-1)>\\n" followed by prod(d) float32 values, row-major,
             raw little-endian bytes (a 0-dim tensor has ndim 0 and one value)
    until end of file. Tensor names (parameter names are PyTorch state_dict keys: "weight",
    "bias" for Linear; "0.weight", "0.bias", "2.weight", ... for the MLP):
             x                      input, (N, in)
             y                      target, (N, out)
             init.<param>           parameter before the first step
             step<k>.loss           0-dim, the loss of step k (k = 0..4), before its update
             step<k>.grad.<param>   the gradient that step k's backward produced
             step<k>.param.<param>  the parameter after step k's optimizer update

The script asserts that no ReLU pre-activation of any step's forward lies within 1e-3 of zero, so
cgrad and PyTorch take the same branch everywhere. Re-drawing the seed cannot achieve that (the MLP
has 10240 ReLU inputs over 5 steps and any seed puts a few dozen within 1e-3 of 0), so the script
instead shifts the initial bias of each hidden unit that comes near 0 by the smallest amount
(a multiple of 1e-3, at most 0.05) that keeps all of its inputs 3e-3 away, layer by layer,
re-running the training until no unit needs it. The fixture stores the shifted biases as the
initial ones. It also asserts that the total size of the fixtures stays under 1 MB.
"""
import os
import struct
import sys

import torch

STEPS = 5
LR = 0.1
RELU_GAP = 1e-3
REPAIR_MARGIN = 3e-3  # the repair aims wider than RELU_GAP, as trajectories move a little
CONFIGS = {
    "sgd": dict(lr=LR, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False),
    "nesterov": dict(lr=LR, momentum=0.9, dampening=0.0, weight_decay=1e-2, nesterov=True),
}


def build(model_kind):
    if model_kind == "linear":
        return torch.nn.Linear(10, 1), 5, 10, 1
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 8))
    return model, 16, 32, 8


def relu_inputs(model, x):
    """Pre-activations fed to each ReLU of the model for input x."""
    pre = []
    if isinstance(model, torch.nn.Sequential):
        h = x
        for layer in model:
            if isinstance(layer, torch.nn.ReLU):
                pre.append(h.detach().clone())
            h = layer(h)
    return pre


def draw(model_kind, seed):
    """The seeded model's initial state_dict, inputs and targets."""
    torch.manual_seed(seed)
    model, n, n_in, n_out = build(model_kind)
    x = torch.randn(n, n_in, dtype=torch.float32)
    y = torch.randn(n, n_out, dtype=torch.float32)
    init = {name: p.detach().clone() for name, p in model.state_dict().items()}
    return init, x, y


def run(model_kind, init, x, y, opt_cfg):
    """Trains from init; returns (tensors as an ordered list of (name, tensor), ReLU inputs): the
    ReLU inputs are, per ReLU, a list over steps of (N, units) pre-activations."""
    model = build(model_kind)[0]
    model.load_state_dict(init)
    out = [("x", x.clone()), ("y", y.clone())]
    for name, p in model.state_dict().items():
        out.append(("init." + name, p.detach().clone()))
    opt = torch.optim.SGD(model.parameters(), **opt_cfg)
    loss_fn = torch.nn.MSELoss(reduction="mean")
    params = list(model.named_parameters())
    pre_acts = None
    for k in range(STEPS):
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            pre = relu_inputs(model, x)
        pre_acts = [[] for _ in pre] if pre_acts is None else pre_acts
        for i, p in enumerate(pre):
            pre_acts[i].append(p)
        loss = loss_fn(model(x), y)
        loss.backward()
        out.append(("step%d.loss" % k, loss.detach().clone().reshape(())))
        for name, p in params:
            out.append(("step%d.grad.%s" % (k, name), p.grad.detach().clone()))
        opt.step()
        for name, p in params:
            out.append(("step%d.param.%s" % (k, name), p.detach().clone()))
    return out, pre_acts


def min_gap(pre_acts):
    gaps = [p.abs().min().item() for per_relu in pre_acts for p in per_relu]
    return min(gaps) if gaps else float("inf")


def repair(init, runs):
    """In the first ReLU layer that has inputs near 0 (in any run, at any step), shifts the initial
    bias of every such unit by the smallest amount on a 1e-3 grid, up to 0.05, that keeps all of
    that unit's inputs at least REPAIR_MARGIN from 0 (assuming they all move by the shift).
    Returns the number of units shifted (0: nothing near 0). One layer per call, first to last,
    since a later layer's inputs depend on the earlier ones; the caller re-runs in between."""
    nrelu = len(runs[0])
    for layer in range(nrelu):
        # (steps * runs * N, units) values of this ReLU's inputs
        values = torch.cat([torch.cat(r[layer], 0) for r in runs], 0)
        near = (values.abs() <= REPAIR_MARGIN).any(0)
        shifted = [0]
        if not near.any():
            continue
        bias = init["%d.bias" % (2 * layer)]  # the Linear in front of ReLU number `layer`
        for unit in near.nonzero().flatten().tolist():
            v = values[:, unit]
            for k in range(1, 51):
                shift = None
                for cand in (k * 1e-3, -k * 1e-3):
                    if ((v + cand).abs() > REPAIR_MARGIN).all():
                        shift = cand
                        break
                if shift is not None:
                    bias[unit] += shift
                    shifted[0] += 1
                    break
            else:
                raise RuntimeError("no bias shift up to 0.05 keeps ReLU %d unit %d away from 0" % (layer, unit))
        return shifted[0]
    return 0


def write(path, header, tensors):
    with open(path, "wb") as f:
        f.write((header + "\n").encode("ascii"))
        for name, t in tensors:
            t = t.detach().to(torch.float32).contiguous()
            dims = " ".join(str(d) for d in t.shape)
            line = "%s %d%s\n" % (name, t.dim(), (" " + dims) if dims else "")
            f.write(line.encode("ascii"))
            values = t.reshape(-1).tolist()
            f.write(struct.pack("<%df" % len(values), *values))
    return os.path.getsize(path)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    total = 0
    for model_kind, seed in (("linear", 1000), ("mlp", 2000)):
        # One seed per model, shared by both optimizers: the same data and initial weights. Both
        # optimizer runs must keep every ReLU input away from 0; a handful of ReLU inputs (out of
        # 10240) land near 0 for any seed, so the initial biases of those units are nudged.
        init, x, y = draw(model_kind, seed)
        nudged = 0
        for _ in range(100):
            results = {cfg: run(model_kind, init, x, y, CONFIGS[cfg]) for cfg in CONFIGS}
            count = repair(init, [r[1] for r in results.values()])
            if not count:
                break
            nudged += count
        results = {cfg: (r[0], min_gap(r[1])) for cfg, r in results.items()}
        for cfg, (tensors, gap) in results.items():
            assert gap > RELU_GAP, (model_kind, cfg, gap)
            o = CONFIGS[cfg]
            header = ("cgrad-fixture 1 model=%s steps=%d lr=%r momentum=%r dampening=%r weight_decay=%r nesterov=%d"
                      % (model_kind, STEPS, o["lr"], o["momentum"], o["dampening"], o["weight_decay"],
                         1 if o["nesterov"] else 0))
            path = os.path.join(out_dir, "%s_%s.bin" % (model_kind, cfg))
            size = write(path, header, tensors)
            total += size
            losses = [float(t) for name, t in tensors if name.endswith(".loss")]
            print("%s: seed %d, %d hidden-bias nudges (of at most 0.05 each), %d bytes, min |ReLU input| %s, losses %s"
                  % (path, seed, nudged, size, "n/a" if gap == float("inf") else "%.3g" % gap,
                     " ".join("%.6g" % v for v in losses)))
    assert total < 1 << 20, "fixtures total %d bytes, over 1 MB" % total
    print("torch %s, total %d bytes" % (torch.__version__, total))


if __name__ == "__main__":
    main()
