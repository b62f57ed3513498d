#!/usr/bin/env python3
"""PyTorch side of bench/bench_resnet_block.c: a ResNet-18 basic block, forward and backward, timed
the same way and printed as the same `result work=... impl=pytorch median_ms=...` lines.

The block: y = relu(bn2(conv2(relu(bn1(conv1(x))))) + x), conv1 and conv2 Conv2d(64, 64, 3,
padding=1, bias=False), on x (N, 64, 56, 56) requiring grad; a run is zero_grad, forward, backward
with a fixed output gradient. --bn 1 (default) times the whole block (work=resnet_block_bn_...);
--bn 0 leaves the BatchNorm2d layers out (work=resnet_block_nobn_...), as the C program's --bn. Warm-up
runs, then the median of runs each timed alone (synchronised on the GPU). cudnn.benchmark stays off
(PyTorch's default: cuDNN's heuristics choose the algorithms); --tf32 0 (default) sets
torch.backends.cudnn.allow_tf32 = False, so convolutions are true fp32 like cgrad's default."""
import argparse
import sys

try:
    import torch
    from torch import nn
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)

from timing import layer_args, layer_setup, median_seconds, result


class Block(nn.Module):
    def __init__(self, channels, bn):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels) if bn else nn.Identity()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels) if bn else nn.Identity()

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(h)) + x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--hw", type=int, default=56)
    ap.add_argument("--bn", type=int, default=1)
    layer_args(ap)
    a = ap.parse_args()
    device, where = layer_setup(a)
    torch.backends.cudnn.benchmark = False
    block = Block(a.channels, a.bn).to(device).train()
    x = torch.randn(a.n, a.channels, a.hw, a.hw, device=device, requires_grad=True)
    gy = torch.randn(a.n, a.channels, a.hw, a.hw, device=device)

    def run():
        block.zero_grad(set_to_none=True)
        x.grad = None
        block(x).backward(gy)

    t = median_seconds(run, device, a.runs, warmup=3)
    key = f"resnet_block_{'bn' if a.bn else 'nobn'}_fwd_bwd_{where}_n{a.n}_c{a.channels}_hw{a.hw}"
    result(key, t, a.runs, images_per_s=f"{a.n / t:.0f}")


if __name__ == "__main__":
    main()
