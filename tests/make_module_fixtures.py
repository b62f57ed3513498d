#!/usr/bin/env python3
"""The nested-module fixture of tests/test_modules.c: a PyTorch nn.Module tree with a parameter of
its own, a buffer and a tied weight, saved by safetensors.torch.save_model, which keeps one name of
the tied pair (the least) and records the other in the file's metadata.

    python3 tests/make_module_fixtures.py    # writes tests/data/st_nested.safetensors and
                                             # tests/data/st_nested_io.safetensors

Net (the C twin is `net` in test_modules.c), for x of shape (5, 3):
    encoder: fc1 Linear(3, 4), scale (1) parameter, mu Linear(4, 2), logvar Linear(4, 2, bias=False),
             seen int64 (1) buffer; h = relu(fc1 x), returns (mu(h) * scale, logvar(h))
    lm:      wte and head, Linear(3, 3, bias=False) each, head.weight is wte.weight; returns head(wte x)
    forward(x) = (*encoder(x), lm(x))
st_nested_io.safetensors holds "input" and PyTorch's outputs "mu", "logvar" and "y" for it; every
pre-activation of fc1 keeps at least 1e-3 from ReLU's kink. Needs torch and safetensors."""
import os

import torch
from safetensors import safe_open
from safetensors.torch import save_file, save_model

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 4)
        self.scale = torch.nn.Parameter(torch.tensor([1.5]))
        self.mu = torch.nn.Linear(4, 2)
        self.logvar = torch.nn.Linear(4, 2, bias=False)
        self.register_buffer("seen", torch.tensor([11], dtype=torch.int64))

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        return self.mu(h) * self.scale, self.logvar(h)


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Linear(3, 3, bias=False)
        self.head = torch.nn.Linear(3, 3, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, x):
        return self.head(self.wte(x))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.lm = Tied()

    def forward(self, x):
        return (*self.encoder(x), self.lm(x))


def main():
    torch.set_num_threads(1)
    torch.manual_seed(3)
    net = Net()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        while True:
            x = torch.rand(5, 3, generator=g) * 2 - 1
            if net.encoder.fc1(x).abs().min().item() >= 1e-3:
                break
        mu, logvar, y = net(x)
    st = os.path.join(DATA, "st_nested.safetensors")
    save_model(net, st)
    save_file({"input": x, "mu": mu.contiguous(), "logvar": logvar.contiguous(), "y": y.contiguous()},
              os.path.join(DATA, "st_nested_io.safetensors"))
    with safe_open(st, framework="pt") as f:
        print(st, sorted(f.keys()), f.metadata())


if __name__ == "__main__":
    main()
