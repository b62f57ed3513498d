#!/usr/bin/env python3
"""The fixture of examples/dcgan.c's --replay (CTest example_dcgan_replay_cpu): 50 training steps of
bench/dcgan.py's DCGAN (pytorch/examples' dcgan/main.py at 32x32) run by PyTorch on the CPU in float32,
from torch.manual_seed(0), with batch 16, nz 32, ngf = ndf = 16, beta1 0.5 and lr 0.00002.

The learning rate is a tenth of upstream's 0.0002: at 0.0002 the 50 steps are too sensitive to rounding
for any float32 comparison at 1e-3. PyTorch against itself, float32 against float64 from the same
weights, data and noise, differs by 1e-2 relative in errD and errG by step 25 (and so does float32 with
the initial weights scaled by 1 + 1e-7 N(0, 1)); at 0.00002 the same comparisons stay below 1e-4 over
the 50 steps, while errD still falls from 1.62 to 1.08 and errG rises from 0.52 to 0.65, so the optimizers'
work is in the numbers.

The committed file was written by PyTorch 2.11 on the H100 machine's CPU. cgrad replays it within 2.3e-4
(errD) and 4.0e-4 (errG) relative, on the CPU and on the H100 (cuDNN) alike: the two agree to 1e-7 for
18 steps, then the rounding differences of two convolution implementations grow by about 10x every 9 steps.
(Against a file written by PyTorch 1.13, whose CPU convolutions are im2col + BLAS as cgrad's are, the
largest difference is 3.8e-7.)

    /usr/bin/python3 tests/make_dcgan_fixtures.py

Reads Fashion-MNIST from $CGRAD_FASHION_MNIST_DIR (default /usr/share/datasets/fashion-mnist) and writes
tests/data/dcgan.safetensors (about 1.4 MB) holding
  netG.<name>, netD.<name>   the initial state dicts, after weights_init (parameters and BatchNorm buffers)
  real     uint8 (50, 16, 1, 32, 32)  each step's real batch: training images 0..799 in order, padded by 2
           pixels of 0 a side; both sides make them float as ToTensor and Normalize((0.5,), (0.5,)) do,
           (p / 255 - 0.5) / 0.5 in float32
  noise    float32 (50, 16, 32, 1, 1)  each step's noise (the G step reuses the D step's fake, as upstream)
  errD, errG, D_x, D_G_z1, D_G_z2      float32 (50): PyTorch's losses and D's mean outputs at each step
  lr, beta1                            float32 (1): the Adams' settings (betas (beta1, 0.999))
Runs unchanged under PyTorch 1.13 and 2.x."""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import dcgan  # noqa: E402  (bench/dcgan.py: the models and the training step)
import example_common as ec  # noqa: E402
from fixture_io import save  # noqa: E402

STEPS, BATCH, NZ, NGF, NDF = 50, 16, 32, 16, 16
LR, BETA1 = 0.00002, 0.5


def main():
    torch.manual_seed(0)
    netG, netD, optimizerG, optimizerD = dcgan.models(NZ, NGF, NDF, LR, BETA1, torch.device("cpu"))
    tensors = {f"netG.{k}": v.clone() for k, v in netG.state_dict().items()}
    tensors.update({f"netD.{k}": v.clone() for k, v in netD.state_dict().items()})

    pixels = ec.read_idx(os.path.join(ec.DEFAULT_DIR, "train-images-idx3-ubyte.gz"), 3)[:STEPS * BATCH]
    real = torch.nn.functional.pad(torch.from_numpy(pixels.copy()), (2, 2, 2, 2))  # uint8, 0 = black
    real = real.reshape(STEPS, BATCH, 1, 32, 32)
    noise = torch.randn(STEPS, BATCH, NZ, 1, 1)
    tensors["real"], tensors["noise"] = real, noise
    tensors["lr"], tensors["beta1"] = torch.tensor([LR]), torch.tensor([BETA1])

    values = {k: [] for k in ("errD", "errG", "D_x", "D_G_z1", "D_G_z2")}
    for s in range(STEPS):
        batch = (real[s].to(torch.float32) / 255.0 - 0.5) / 0.5
        out = dcgan.train_step(netG, netD, optimizerG, optimizerD, batch, noise[s])
        for k, v in zip(values, out):
            values[k].append(v.item())
        print(f"[{s:2d}/{STEPS}] Loss_D: {values['errD'][-1]:.6f} Loss_G: {values['errG'][-1]:.6f}")
    tensors.update({k: torch.tensor(v, dtype=torch.float32) for k, v in values.items()})
    save(tensors, os.path.join(HERE, "data", "dcgan.safetensors"))


if __name__ == "__main__":
    main()
