"""pytorch/examples' dcgan/main.py, the PyTorch side of examples/dcgan.c: the same 32x32 generator and
discriminator, weights_init, BCELoss and Adams on Fashion-MNIST padded to 32x32, read from the same IDX
files and held on the device (as the C program holds them), shuffled there each epoch.

    python3 bench/dcgan.py [--device cuda] [--niter 25] [--batchSize 64] [--nz 100] [--ngf 64] [--ndf 64]
                           [--lr 0.0002] [--beta1 0.5] [--manualSeed 1] [--limit N] [--dry-run]

The last line reads "result work=dcgan_e<niter>_b<batch>_nz<nz>_ngf<ngf>_ndf<ndf> impl=pytorch seed=<s>
loss_d=<the last epoch's mean errD> loss_g=<...> images_per_s=<the median epoch's training throughput>",
as the C program's. As upstream, cudnn.benchmark is on; no images or checkpoints are written (the
measurement needs neither). tests/make_dcgan_fixtures.py imports the models from here.
"""
import argparse
import statistics

import example_common as ec
import torch
import torch.nn.functional as F
from torch import nn

NC = 1  # Fashion-MNIST's images have one channel


class Generator(nn.Module):
    def __init__(self, nz, ngf):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),  # (ngf*4) x 4 x 4
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),  # (ngf*2) x 8 x 8
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),  # ngf x 16 x 16
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, NC, 4, 2, 1, bias=False),  # nc x 32 x 32
            nn.Tanh(),
        )

    def forward(self, noise):
        return self.main(noise)


class Discriminator(nn.Module):
    def __init__(self, ndf):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(NC, ndf, 4, 2, 1, bias=False),  # ndf x 16 x 16
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),  # (ndf*2) x 8 x 8
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),  # (ndf*4) x 4 x 4
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False),  # 1 x 1 x 1
            nn.Sigmoid(),
        )

    def forward(self, images):
        return self.main(images).view(-1, 1).squeeze(1)


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight, 1.0, 0.02)
        nn.init.zeros_(m.bias)


def models(nz, ngf, ndf, lr, beta1, device):
    """netG, netD (weights_init applied, in that order) and their Adams, as main.py makes them."""
    netG = Generator(nz, ngf).to(device)
    netG.apply(weights_init)
    netD = Discriminator(ndf).to(device)
    netD.apply(weights_init)
    optimizerD = torch.optim.Adam(netD.parameters(), lr=lr, betas=(beta1, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=lr, betas=(beta1, 0.999))
    return netG, netD, optimizerG, optimizerD


def pad_images(x):
    """(N, 1, 28, 28) in [-1, 1] -> (N, 1, 32, 32), 2 pixels of -1 (a black pixel, normalised) a side."""
    return F.pad(x, (2, 2, 2, 2), value=-1.0)


def train_step(netG, netD, optimizerG, optimizerD, real, noise):
    """One iteration of main.py's loop: D on real, then on the detached fake, then G through D on the same
    fake. Returns errD, errG, D(x), D(G(z)) before and after D's step, as 0-dim tensors (not read back)."""
    criterion = nn.BCELoss()
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    netD.zero_grad()
    label = torch.full((real.size(0),), 1.0, dtype=real.dtype, device=real.device)
    output = netD(real)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.detach().mean()
    fake = netG(noise)
    label.fill_(0.0)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.detach().mean()
    errD = (errD_real + errD_fake).detach()
    optimizerD.step()
    # (2) Update G network: maximize log(D(G(z)))
    netG.zero_grad()
    label.fill_(1.0)  # fake labels are real for generator cost
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.detach().mean()
    optimizerG.step()
    return errD, errG.detach(), D_x, D_G_z1, D_G_z2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batchSize", type=int, default=64)
    parser.add_argument("--nz", type=int, default=100)
    parser.add_argument("--ngf", type=int, default=64)
    parser.add_argument("--ndf", type=int, default=64)
    parser.add_argument("--niter", type=int, default=25)
    parser.add_argument("--lr", type=float, default=0.0002)
    parser.add_argument("--beta1", type=float, default=0.5)
    parser.add_argument("--manualSeed", "--seed", type=int, default=1)
    parser.add_argument("--dry-run", action="store_true", help="one step an epoch")
    parser.add_argument("--log-interval", type=int, default=100)
    parser.add_argument("--limit", type=int, default=0, help="the first N training images only")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dataroot", "--data", default=ec.DEFAULT_DIR)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()

    device = ec.setup(args.device, args.threads)
    torch.backends.cudnn.benchmark = True  # as main.py
    torch.manual_seed(args.manualSeed)
    images, _ = ec.fashion_mnist(args.dataroot, True, device, limit=args.limit, normalize=(0.5, 0.5))
    images = pad_images(images)
    netG, netD, optimizerG, optimizerD = models(args.nz, args.ngf, args.ndf, args.lr, args.beta1, device)
    n, b = len(images), args.batchSize
    batches = (n + b - 1) // b
    rates, loss_d, loss_g = [], float("nan"), float("nan")
    for epoch in range(args.niter):
        order = torch.randperm(n, device=device)
        sum_d = torch.zeros((), device=device)
        sum_g = torch.zeros((), device=device)
        steps, seen = 0, 0
        start = ec.now(device)
        for i in range(batches):
            real = images[order[i * b:(i + 1) * b]]
            noise = torch.randn(real.size(0), args.nz, 1, 1, device=device)
            errD, errG, D_x, D_G_z1, D_G_z2 = train_step(netG, netD, optimizerG, optimizerD, real, noise)
            sum_d += errD  # no wait for the device a step, as the C program
            sum_g += errG
            if args.log_interval > 0 and i % args.log_interval == 0:
                print(f"[{epoch}/{args.niter}][{i}/{batches}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f} "
                      f"D(x): {D_x.item():.4f} D(G(z)): {D_G_z1.item():.4f} / {D_G_z2.item():.4f}")
            steps, seen = steps + 1, seen + real.size(0)
            if args.dry_run:
                break
        loss_d, loss_g = sum_d.item() / steps, sum_g.item() / steps
        rates.append(seen / (ec.now(device) - start))
        print(f"====> Epoch {epoch}: mean Loss_D {loss_d:.4f}, Loss_G {loss_g:.4f}, {rates[-1]:.0f} images/s")
    limit = f"_n{args.limit}" if args.limit else ""
    ec.result(f"dcgan_e{args.niter}_b{b}_nz{args.nz}_ngf{args.ngf}_ndf{args.ndf}{limit}", args.manualSeed,
              loss_d=loss_d, loss_g=loss_g, images_per_s=statistics.median(rates))


if __name__ == "__main__":
    main()
