#!/usr/bin/env python3
"""pytorch/examples' mnist/main.py on Fashion-MNIST: the PyTorch side of examples/mnist.c, with the
same model (conv 32, conv 64, max-pool, dropout 0.25, fc 9216-128, dropout 0.5, fc 128-10,
log_softmax), nll_loss, Adadelta(lr) and StepLR(step 1, gamma), upstream's flags and defaults.

As the C program: the data set is read from the same IDX files, normalised with Fashion-MNIST's mean
and std, and held on the device; each epoch's order is a device randperm from a generator seeded with
--seed, so no step waits on a host-to-device copy. Matmuls and convolutions in true fp32. The
training loss is read back every --log-interval batches, as upstream (and the C program) do.

The last line: result work=mnist_e<E> impl=pytorch seed=<s> test_acc=<%> images_per_s=<median epoch>

Usage: bench/mnist.py [--batch-size 64] [--test-batch-size 1000] [--epochs 14] [--lr 1.0] [--gamma 0.7]
       [--no-accel | --accel] [--dry-run] [--seed 1] [--log-interval 10] [--save-model] [--device cpu|cuda] [--limit N]
       [--threads N] [--tf32] [--data DIR] (the program is example_common.mnist_main around this Net)"""
import example_common as ec
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):  # (B, 1, 28, 28) -> (B, 10) log-probabilities
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


if __name__ == "__main__":
    ec.mnist_main(Net, "mnist", "PyTorch MNIST Example (on Fashion-MNIST)", lr=1.0, save_as="mnist_cnn.pt")
