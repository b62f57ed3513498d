#!/usr/bin/env python3
"""The residual-network fixtures of tests/test_modules.c: the PyTorch twins of models/resnet.c and
models/residual.c, taken from bench/bench_fashion_mnist.py (ResNet18, ResidualNet: the very classes
the benchmark trains), held as children "resnet18" and "residual" of one container module.

    /usr/bin/python3 tests/make_resnet_fixtures.py   # writes tests/data/resnet_state.safetensors and
                                                     # tests/data/resnet_io.safetensors

resnet_state.safetensors: the container's state_dict (parameters and BatchNorm buffers under
torchvision's / the benchmark's names, e.g. "resnet18.layer2.0.downsample.1.running_var",
"residual.block1.bn2.weight"), of ResNet18(in_channels=1, num_classes=3, width=2) and
ResidualNet(c=2, in_channels=1, num_classes=3) after torch.manual_seed(0), every BatchNorm's weight,
bias, running_mean, running_var and num_batches_tracked then set to seeded values away from the
defaults (weight, running_var in [0.5, 1.5]; bias, running_mean ~ N(0, 0.1^2); 5 batches), so that
eval mode differs from training mode.
resnet_io.safetensors: "input" (4, 1, 28, 28) ~ N(0, 1); "<model>_eval", the eval-mode outputs (the
running statistics), then "<model>_train", the training-mode outputs (batch statistics), (4, 3) each;
and "<model>_bn_running_mean_after", the first BatchNorm's running_mean after that training forward
(momentum 0.1). float32, CPU. Runs under PyTorch 1.13 and 2.x."""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
from fixture_io import save  # noqa: E402
from bench_fashion_mnist import ResidualNet, ResNet18  # noqa: E402

DATA = os.path.join(HERE, "data")


class Both(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.resnet18 = ResNet18(in_channels=1, num_classes=3, width=2)
        self.residual = ResidualNet(c=2, in_channels=1, num_classes=3)


def main():
    torch.manual_seed(0)
    model = Both()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.num_batches_tracked.fill_(5)
    save({k: v.clone() for k, v in model.state_dict().items()}, os.path.join(DATA, "resnet_state.safetensors"))
    x = torch.randn(4, 1, 28, 28)
    io = {"input": x}
    first_bn = {"resnet18": "bn1", "residual": "bn"}
    for name in ("resnet18", "residual"):
        net = getattr(model, name)
        net.eval()
        with torch.no_grad():
            io[f"{name}_eval"] = net(x)
        net.train()
        with torch.no_grad():
            io[f"{name}_train"] = net(x)
        io[f"{name}_bn_running_mean_after"] = getattr(net, first_bn[name]).running_mean.clone()
    save(io, os.path.join(DATA, "resnet_io.safetensors"))


if __name__ == "__main__":
    main()
