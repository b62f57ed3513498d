#!/usr/bin/env python3
"""Fixtures for tests/test_norm.c: PyTorch's nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm and
nn.Embedding on small odd-sized inputs, with their outputs and every gradient.

    /usr/bin/python3 tests/make_norm_fixtures.py [--device cpu|cuda] [OUTPUT_DIR]
                                                  (default: cpu, tests/data next to this script)

Runs unchanged under PyTorch 1.13 (Debian's python3-torch) and 2.x; torch.manual_seed(0) for everything.
Writes the safetensors format through fixture_io.save (no safetensors package needed):

  norm.safetensors      float32, computed on the CPU (with --device cuda too: the same file).
  norm_f16.safetensors  only with --device cuda: the same cases with float16 inputs, PyTorch's float16
                        CUDA outputs and gradients; float16 weights, except BatchNorm's, which stay float32
                        (PyTorch's mixed batch norm: a float32 module on a float16 input, as under autocast).

Each case's tensors are named "<case>.<what>". The layers' parameters are drawn at random (weight in
[0.5, 1.5], bias in [-1, 1]; Embedding's weight N(0, 1)) so that every gradient is checked, and stored as
<case>.weight, <case>.bias. A step k (1, 2) runs the layer on <case>.x<k> (train mode), then backward from
<case>.g<k> (a random output gradient) with the parameters' gradients zeroed first; stored: <case>.y<k>
(the output), <case>.gx<k> (x's gradient; not for Embedding, whose input is int64 indices),
<case>.gweight<k>, <case>.gbias<k>. BatchNorm cases run two steps, then store the buffers
<case>.running_mean, <case>.running_var, <case>.num_batches_tracked (int64) and an eval-mode forward
<case>.x3 -> <case>.y3. The other cases run one step.

The cases:
  bn1d  BatchNorm1d(5), x (7, 5)                  bn1dl BatchNorm1d(3), x (4, 3, 5)
  bn2d  BatchNorm2d(4), x (3, 4, 5, 3)
  ln    LayerNorm((4, 6)) over the 2 trailing dims of x (3, 4, 6)
  ln1   LayerNorm(33) on x (5, 33)                 lnbig LayerNorm(768) on x (4, 768)
  gn    GroupNorm(3, 6) on x (2, 6, 4, 5)
  emb   Embedding(10, 4, padding_idx=2) on indices (3, 5) that repeat and include 2
"""
import os
import sys

import torch
from fixture_io import save

args = [a for a in sys.argv[1:]]
DEVICE = "cpu"
if "--device" in args:
    i = args.index("--device")
    DEVICE = args[i + 1]
    del args[i:i + 2]
DATA = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

def affine(layer, gen):
    with torch.no_grad():
        if getattr(layer, "weight", None) is not None:
            layer.weight.copy_(torch.rand(layer.weight.shape, generator=gen) + 0.5)
        if getattr(layer, "bias", None) is not None:
            layer.bias.copy_(torch.rand(layer.bias.shape, generator=gen) * 2 - 1)


def step(out, name, layer, x, k, gen, device, dtype):
    """One training step of layer on x, stored as step k."""
    layer.zero_grad()
    leaf = x.to(device).requires_grad_(x.is_floating_point())
    y = layer(leaf)
    g = (torch.rand(y.shape, generator=gen) * 2 - 1).to(device=device, dtype=dtype)
    y.backward(g)
    out["%s.x%d" % (name, k)], out["%s.g%d" % (name, k)], out["%s.y%d" % (name, k)] = x, g, y
    if leaf.requires_grad:
        out["%s.gx%d" % (name, k)] = leaf.grad
    # copies: zero_grad (PyTorch 1.13) zeroes these very tensors at the next step
    out["%s.gweight%d" % (name, k)] = layer.weight.grad.clone()
    if getattr(layer, "bias", None) is not None:
        out["%s.gbias%d" % (name, k)] = layer.bias.grad.clone()


def cases(device, dtype):
    """Every case's tensors (a dict), computed on device in dtype (parameters and floating inputs)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    out = {}

    def floats(*shape):
        return (torch.rand(shape, generator=gen) * 4 - 2).to(dtype)

    def batch_norm(name, layer, shape):
        affine(layer, gen)
        layer = layer.to(device)
        out[name + ".weight"], out[name + ".bias"] = layer.weight.detach().clone(), layer.bias.detach().clone()
        layer.train()
        for k in (1, 2):
            step(out, name, layer, floats(*shape) + k, k, gen, device, dtype)  # shifted: the running stats move
        out[name + ".running_mean"], out[name + ".running_var"] = layer.running_mean.clone(), layer.running_var.clone()
        out[name + ".num_batches_tracked"] = layer.num_batches_tracked.clone()
        layer.eval()
        x3 = floats(*shape)
        with torch.no_grad():
            out[name + ".x3"], out[name + ".y3"] = x3, layer(x3.to(device))

    def one_step(name, layer, x):
        if not isinstance(layer, torch.nn.Embedding):
            affine(layer, gen)
        layer = layer.to(device=device, dtype=dtype)
        out[name + ".weight"] = layer.weight.detach().clone()
        if getattr(layer, "bias", None) is not None:
            out[name + ".bias"] = layer.bias.detach().clone()
        step(out, name, layer, x, 1, gen, device, dtype)

    batch_norm("bn1d", torch.nn.BatchNorm1d(5), (7, 5))
    batch_norm("bn1dl", torch.nn.BatchNorm1d(3), (4, 3, 5))
    batch_norm("bn2d", torch.nn.BatchNorm2d(4), (3, 4, 5, 3))
    one_step("ln", torch.nn.LayerNorm((4, 6)), floats(3, 4, 6))
    one_step("ln1", torch.nn.LayerNorm(33), floats(5, 33))
    one_step("lnbig", torch.nn.LayerNorm(768), floats(4, 768))
    one_step("gn", torch.nn.GroupNorm(3, 6), floats(2, 6, 4, 5))
    indices = torch.tensor([[2, 0, 9, 2, 5], [1, 1, 2, 7, 3], [9, 4, 0, 6, 2]])
    one_step("emb", torch.nn.Embedding(10, 4, padding_idx=2), indices)
    return out


def main():
    torch.set_num_threads(1)
    save(cases("cpu", torch.float32), os.path.join(DATA, "norm.safetensors"))
    if DEVICE == "cuda":
        save(cases("cuda", torch.float16), os.path.join(DATA, "norm_f16.safetensors"))


if __name__ == "__main__":
    main()
