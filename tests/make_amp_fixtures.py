#!/usr/bin/env python3
"""The fixture of tests/test_amp_fixture.c (issue #32's loss fixture): 200 training steps of the
784-256-128-10 MLP (ReLU) with Adam(lr=1e-3) and cross-entropy, on Fashion-MNIST's first 12,800
training images in order (200 batches of 64, pixels (p / 255 - 0.2860) / 0.3530), from the same
PyTorch-written initial weights, run twice by PyTorch: in float32 (TF32 off) and with forward and loss
under torch.autocast(dtype=torch.bfloat16), the backward and the step outside, as PyTorch's recipe.

    python3 tests/make_amp_fixtures.py [--device cuda]

The committed files were written by PyTorch 2.11 on the H100 (--device cuda: CUDA autocast, the
reference the issue names). Reads Fashion-MNIST from $CGRAD_FASHION_MNIST_DIR (default
/usr/share/datasets/fashion-mnist) and writes
  tests/data/amp_mlp_state.safetensors   the initial state dict (0.weight, 0.bias, 2.weight, ...),
                                         from torch.manual_seed(0)
  tests/data/amp_mlp_losses.safetensors  loss_fp32, loss_bf16: float32 (200), each step's loss"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import example_common as ec  # noqa: E402
from fixture_io import save, start  # noqa: E402

STEPS, BATCH, LR = 200, 64, 1e-3


def model():
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, 10))


def losses(init, x, y, device, amp):
    """Each step's loss from the state dict init, in float32 or under bfloat16 autocast."""
    m = model().to(device)
    m.load_state_dict(init)
    opt = torch.optim.Adam(m.parameters(), lr=LR)
    out = []
    for s in range(STEPS):
        xb, yb = x[s * BATCH:(s + 1) * BATCH], y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(m(xb), yb)
        loss.backward()
        opt.step()
        out.append(loss.detach().float())
    return torch.stack(out).cpu()


def main():
    device, out = start(__doc__)
    init = {k: v.clone() for k, v in model().state_dict().items()}
    x, y = ec.fashion_mnist(ec.DEFAULT_DIR, True, device, flat=True, limit=STEPS * BATCH)
    ref = {"loss_fp32": losses(init, x, y, device, False), "loss_bf16": losses(init, x, y, device, True)}
    gap = ((ref["loss_bf16"] - ref["loss_fp32"]).abs() / ref["loss_fp32"]).max()
    print(f"PyTorch {torch.__version__} on {device}: loss {float(ref['loss_fp32'][0]):.4f} -> "
          f"{float(ref['loss_fp32'][-1]):.4f} (fp32), {float(ref['loss_bf16'][-1]):.4f} (bf16); largest "
          f"bf16-vs-fp32 gap {float(gap):.4f}")
    save(init, os.path.join(out, "amp_mlp_state.safetensors"))
    save(ref, os.path.join(out, "amp_mlp_losses.safetensors"))


if __name__ == "__main__":
    main()
