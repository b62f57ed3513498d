#!/usr/bin/env python3
"""Fixtures for tests/test_pool.c: PyTorch's pooling and resampling layers, forward and input gradient.

    /usr/bin/python3 tests/make_pool_fixtures.py                 # float32 on the CPU
    python3 tests/make_pool_fixtures.py --device cuda            # also the float16 file, on a GPU

Writes into tests/data/:
  pool.safetensors      float32, computed on the CPU. For every case of CASES below (its name, e.g.
                        "max_pad_ceil"): "<name>.x" the input, "<name>.y" the output, "<name>.gy" a random
                        output gradient and "<name>.gx" the input's gradient for it (x.grad after
                        y.backward(gy)). tests/test_pool.c holds the same cases under the same names.
  pool_f16.safetensors  only with --device cuda: the same tensors with x and gy rounded to float16 and y, gx
                        PyTorch's float16 CUDA results.
Inputs ~ N(0, 1) and gy ~ N(0, 1) from torch.manual_seed(0), drawn in float32 on the CPU in CASES order, so
both files hold the same draws. Runs under PyTorch 1.13 (Debian's python3-torch) and 2.x; the files are
written by fixture_io.save (the safetensors layout: an 8-byte little-endian header size, a JSON header, the
data), so the safetensors package is not needed.
"""
import argparse
import os

import torch
import torch.nn.functional as F
from fixture_io import save

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def interp(mode, size=None, scale=None, align=None):
    return lambda x: F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align)


# name, input shape, the function (odd sizes; padding, ceil mode, non-square kernels and strides, ...)
CASES = [
    ("max_basic", (2, 3, 7, 9), lambda x: F.max_pool2d(x, (3, 2), stride=(2, 1), padding=(1, 1))),
    ("max_pad_ceil", (1, 2, 8, 7), lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)),
    ("max_dilation", (2, 2, 9, 7), lambda x: F.max_pool2d(x, (3, 2), stride=(1, 2), padding=(1, 0),
                                                         dilation=(2, 1), ceil_mode=True)),
    ("max_3d_ceil", (3, 5, 7), lambda x: F.max_pool2d(x, 2, ceil_mode=True)),
    ("avg_basic", (2, 3, 7, 9), lambda x: F.avg_pool2d(x, (3, 2), stride=(2, 1), padding=(1, 1))),
    ("avg_ceil_nopad", (1, 2, 8, 7), lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                                                            count_include_pad=False)),
    ("avg_ceil_pad", (2, 2, 9, 7), lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)),
    ("avg_divisor", (3, 5, 7), lambda x: F.avg_pool2d(x, (2, 3), stride=(1, 2), padding=(1, 1), divisor_override=5)),
    ("adaptive_down", (2, 3, 7, 9), lambda x: F.adaptive_avg_pool2d(x, (3, 4))),
    ("adaptive_up", (1, 2, 5, 3), lambda x: F.adaptive_avg_pool2d(x, (7, 5))),
    ("adaptive_global", (3, 6, 7), lambda x: F.adaptive_avg_pool2d(x, (1, 1))),
    ("nearest_size", (2, 3, 5, 7), interp("nearest", size=(8, 11))),
    ("nearest_scale", (1, 2, 5, 7), interp("nearest", scale=(1.7, 2.3))),
    ("nearest_down", (1, 2, 9, 7), interp("nearest", size=(4, 3))),
    ("bilinear_size", (2, 3, 5, 7), interp("bilinear", size=(8, 11), align=False)),
    ("bilinear_size_align", (2, 3, 5, 7), interp("bilinear", size=(8, 11), align=True)),
    ("bilinear_scale", (1, 2, 5, 7), interp("bilinear", scale=(1.7, 2.3), align=False)),
    ("bilinear_scale_align", (1, 2, 5, 7), interp("bilinear", scale=(1.7, 2.3), align=True)),
    ("bilinear_down", (1, 2, 9, 7), interp("bilinear", size=(4, 3), align=False)),
    ("pixel_shuffle", (2, 8, 3, 5), lambda x: F.pixel_shuffle(x, 2)),
    ("pixel_unshuffle", (2, 3, 6, 9), lambda x: F.pixel_unshuffle(x, 3)),
]


def run(fn, x, gy):
    x = x.clone().requires_grad_(True)
    y = fn(x)
    y.backward(gy)
    return y.detach(), x.grad.detach()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    f32, f16 = {}, {}
    for name, shape, fn in CASES:
        x = torch.randn(shape)
        with torch.no_grad():
            out_shape = fn(x).shape
        gy = torch.randn(out_shape)
        y, gx = run(fn, x, gy)
        f32.update({f"{name}.x": x, f"{name}.y": y, f"{name}.gy": gy, f"{name}.gx": gx})
        if args.device == "cuda":
            xh, gyh = x.half().cuda(), gy.half().cuda()
            yh, gxh = run(fn, xh, gyh)
            f16.update({f"{name}.x": xh.cpu(), f"{name}.y": yh.cpu(), f"{name}.gy": gyh.cpu(), f"{name}.gx": gxh.cpu()})
    save(f32, os.path.join(DATA, "pool.safetensors"))
    if f16:
        save(f16, os.path.join(DATA, "pool_f16.safetensors"))


if __name__ == "__main__":
    main()
