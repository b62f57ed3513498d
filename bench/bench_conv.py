#!/usr/bin/env python3
"""PyTorch side of bench/bench_conv.c: the Fashion-MNIST CNN's conv and pool layers alone (forward,
and forward + backward) and its whole training step, timed the same way and printed as the same
`result work=... impl=pytorch median_ms=...` lines.

Layers: conv1 = Conv2d(1, 32, 3, padding=1) on (N, 1, 28, 28), input without gradient; conv2 =
Conv2d(32, 64, 3, padding=1) on (N, 32, 14, 14), input requiring gradient; 2x2 max pooling on their
outputs. A layer run: zero_grad, forward, backward with a fixed output gradient. The step: conv1,
ReLU, pool, conv2, ReLU, pool, Flatten, Linear(3136, 128), ReLU, Linear(128, 10), CrossEntropyLoss,
SGD(lr=0.01), loss read back (as the C bench does). Warm-up runs, then the median of runs each timed
alone (synchronised on the GPU). --tf32 0 (default) sets torch.backends.cudnn.allow_tf32 = False, so
GPU convolutions are true fp32 like cgrad's default; PyTorch's own default is True."""
import argparse
import sys

try:
    import torch
    from torch import nn
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)

from timing import layer_args, layer_setup, median_seconds, result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=128)
    layer_args(ap)
    a = ap.parse_args()
    device, where = layer_setup(a)
    n = a.n

    layers = [("conv1", nn.Conv2d(1, 32, 3, padding=1).to(device), (n, 1, 28, 28), False),
              ("pool1", None, (n, 32, 28, 28), True),
              ("conv2", nn.Conv2d(32, 64, 3, padding=1).to(device), (n, 32, 14, 14), True),
              ("pool2", None, (n, 64, 14, 14), True)]
    totals = {"convs": 0.0, "pools": 0.0}
    for name, module, shape, input_grad in layers:
        x = torch.randn(shape, device=device, requires_grad=input_grad)
        f = module if module is not None else (lambda t: nn.functional.max_pool2d(t, 2))
        with torch.no_grad():
            gy = torch.randn_like(f(x))
        for backward in (False, True):
            def run():
                if module is not None:
                    module.zero_grad(set_to_none=True)
                x.grad = None
                y = f(x)
                if backward:
                    y.backward(gy)
            t = median_seconds(run, device, a.runs, warmup=3)
            if backward:
                totals["convs" if module is not None else "pools"] += t
            result(f"cnn_{name}_{'fwd_bwd' if backward else 'fwd'}_{where}_n{n}", t, a.runs)
    for k, t in totals.items():
        result(f"cnn_{k}_fwd_bwd_{where}_n{n}", t, a.runs)

    model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(n, 1, 28, 28, device=device)
    targets = torch.tensor([(i * 7 + 3) % 10 for i in range(n)], device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), targets)
        loss.backward()
        opt.step()
        return loss.item()

    first = step()
    t = median_seconds(step, device, a.runs, warmup=2)
    last = step()
    if not (last < first):
        print(f"# warning: loss {last} not below the first step's {first}", flush=True)
    result(f"cnn_step_{where}_n{n}", t, a.runs, images_per_s=f"{n / t:.0f}")


if __name__ == "__main__":
    main()
