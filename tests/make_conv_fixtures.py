#!/usr/bin/env python3
"""Fixtures for tests/test_conv_ex.c: PyTorch's F.conv2d, F.conv1d and F.conv_transpose2d with every
setting cgrad takes (rectangular kernels, per-dim stride, padding and dilation, groups, depthwise,
padding='same', output_padding), forward and every gradient.

    /usr/bin/python3 tests/make_conv_fixtures.py                 # tests/data/conv.safetensors (CPU, float32)
    python3 tests/make_conv_fixtures.py --device cuda            # also tests/data/conv_f16.safetensors

Runs unchanged under PyTorch 1.13 (Debian's python3-torch) and 2.x; needs no safetensors package (the
file is written by fixture_io.save: an 8-byte little-endian header length, the JSON header, the raw data).

Each case (CASES below; test_conv_ex.c holds the same table) is drawn from torch.manual_seed(seed):
x, weight, bias (when the case has one) and gout, each uniform in [-1, 1). Then
out = op(x, weight, bias, settings) and out.backward(gout). Tensor names, "<case>." followed by:
    x, weight, bias        the inputs (bias only when the case has one)
    gout                   the output's gradient fed to backward
    out                    the op's output
    grad_x, grad_weight, grad_bias    the gradients
conv.safetensors: float32, computed on the CPU.
conv_f16.safetensors (--device cuda only): the same inputs rounded to float16, the op run in float16
on the GPU (cudnn.allow_tf32 off, cudnn.deterministic on), outputs and gradients as PyTorch's float16.
"""
import argparse
import os

import torch
import torch.nn.functional as F
from fixture_io import save

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

# name: (op, seed, x shape, weight shape, bias, settings)
CASES = {
    # groups 2, stride (2, 1), padding (1, 2), dilation (2, 1), a 3x2 kernel
    "conv2d_mixed": ("conv2d", 1, (2, 4, 9, 7), (6, 2, 3, 2), True,
                     dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2)),
    # depthwise: one input channel per group, two outputs each
    "conv2d_depthwise": ("conv2d", 2, (2, 3, 8, 7), (6, 1, 3, 3), True,
                         dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=3)),
    "conv2d_nobias": ("conv2d", 3, (1, 3, 7, 6), (5, 3, 5, 3), False,
                      dict(stride=(2, 2), padding=(2, 1), dilation=(1, 1), groups=1)),
    "conv1d": ("conv1d", 4, (3, 4, 11), (6, 2, 3), True,
               dict(stride=2, padding=1, dilation=2, groups=2)),
    # padding='same': a total of 3 rows (one more at the bottom) and 4 columns
    "conv2d_same": ("conv2d", 7, (2, 3, 7, 6), (4, 3, 4, 3), True,
                    dict(stride=1, padding="same", dilation=(1, 2), groups=1)),
    "conv1d_same": ("conv1d", 8, (2, 2, 9), (3, 2, 4), False,
                    dict(stride=1, padding="same", dilation=1, groups=1)),
    # stride 2, output_padding 1, groups 2
    "conv_transpose2d": ("conv_transpose2d", 5, (2, 4, 5, 4), (4, 3, 3, 3), True,
                         dict(stride=(2, 2), padding=(1, 1), output_padding=(1, 1), dilation=(1, 1), groups=2)),
    # output_padding 1 along H below dilation 2 (stride 1 there)
    "conv_transpose2d_dilated": ("conv_transpose2d", 6, (1, 3, 4, 5), (3, 2, 2, 3), False,
                                 dict(stride=(1, 2), padding=(0, 1), output_padding=(1, 0), dilation=(2, 1),
                                      groups=1)),
}

OPS = {"conv2d": F.conv2d, "conv1d": F.conv1d, "conv_transpose2d": F.conv_transpose2d}


def draw(name):
    op, seed, xs, ws, has_bias, settings = CASES[name]
    torch.manual_seed(seed)
    x = torch.rand(xs) * 2 - 1
    w = torch.rand(ws) * 2 - 1
    c_out = ws[0] if op != "conv_transpose2d" else ws[1] * settings["groups"]
    b = torch.rand(c_out) * 2 - 1 if has_bias else None
    out_shape = OPS[op](x, w, b, **settings).shape
    gout = torch.rand(out_shape) * 2 - 1
    return x, w, b, gout


def run(name, inputs, dtype, device):
    op, _, _, _, _, settings = CASES[name]
    x, w, b, gout = [t.to(device=device, dtype=dtype) if t is not None else None for t in inputs]
    leaves = [t.clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    out = OPS[op](leaves[0], leaves[1], leaves[2], **settings)
    out.backward(gout)
    result = {"x": x, "weight": w, "gout": gout, "out": out.detach(), "grad_x": leaves[0].grad,
              "grad_weight": leaves[1].grad}
    if b is not None:
        result.update(bias=b, grad_bias=leaves[2].grad)
    return {name + "." + k: v.detach().cpu().contiguous() for k, v in result.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    inputs = {name: draw(name) for name in CASES}
    f32 = {}
    for name in CASES:
        f32.update(run(name, inputs[name], torch.float32, "cpu"))
    save(f32, os.path.join(DATA, "conv.safetensors"))
    if args.device == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        f16 = {}
        for name in CASES:
            f16.update(run(name, inputs[name], torch.float16, "cuda"))
        save(f16, os.path.join(DATA, "conv_f16.safetensors"))


if __name__ == "__main__":
    main()
