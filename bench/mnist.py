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
       [--no-accel] [--dry-run] [--seed 1] [--log-interval 10] [--save-model] [--device cpu|cuda] [--limit N]
       [--threads N] [--data DIR]"""
import argparse
import statistics

import example_common as ec
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR


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


def main():
    p = argparse.ArgumentParser(description="PyTorch MNIST Example (on Fashion-MNIST)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=14)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--no-accel", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--save-model", action="store_true")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present, as upstream's --no-accel)")
    p.add_argument("--limit", type=int, default=0, help="use the first N training and test images only (0: all)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--data", default=ec.DEFAULT_DIR)
    args = p.parse_args()

    use_accel = not args.no_accel and torch.cuda.is_available()
    device = ec.setup("cpu" if args.no_accel else args.device or ("cuda" if use_accel else "cpu"), args.threads)
    torch.manual_seed(args.seed)
    train_data = ec.fashion_mnist(args.data, True, device, limit=args.limit)
    test_data = ec.fashion_mnist(args.data, False, device, limit=args.limit)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)

    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    rates, accuracy = [], float("nan")
    for epoch in range(1, args.epochs + 1):
        rates.append(ec.nll_train(model, device, train_data, optimizer, epoch, generator, args.batch_size,
                                  args.log_interval, args.dry_run))
        accuracy = ec.nll_test(model, test_data, args.test_batch_size)
        scheduler.step()
    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")
    ec.result(f"mnist_e{args.epochs}", args.seed, test_acc=round(accuracy, 2), images_per_s=statistics.median(rates))


if __name__ == "__main__":
    main()
