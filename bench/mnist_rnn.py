"""pytorch/examples' mnist_rnn/main.py, the PyTorch side of examples/mnist_rnn.c: the same LSTM classifier
(each image's 28 rows as 28 steps, the last step's output through BatchNorm1d, dropout, fc1, fc2), Adadelta
and StepLR on nll_loss, with the same flags and defaults, on Fashion-MNIST held on the device and
shuffled there (as cgrad's loader does) so that both sides time the training, not the data pipeline:
each epoch's order is a device randperm from a generator seeded with --seed. True fp32 unless --tf32.

    python3 bench/mnist_rnn.py [--batch-size 64] [--test-batch-size 1000] [--epochs 14] [--lr 0.1]
        [--gamma 0.7] [--accel | --no-accel] [--dry-run] [--seed 1] [--log-interval 10] [--save-model]
        [--device cpu|cuda] [--limit N] [--threads N] [--data DIR]

The last line reads "result work=mnist_rnn_e<epochs> impl=pytorch seed=<s> test_acc=<%> images_per_s=<rate>"
(the final test accuracy; the median epoch's training images per second, the loop's wall time with the
device synchronised at both ends), as the C program's. main.py's nn.Dropout2d layers see 2-D (batch,
features) tensors: PyTorch warns that this is deprecated and drops single elements (its feature mask has the
input's two sizes), which is what the C program's cg_dropout does; the warning is silenced here.
"""
import argparse
import statistics
import warnings

import example_common as ec
import torch
import torch.nn.functional as F
from torch import nn

warnings.filterwarnings("ignore", message="dropout2d: Received a 2-D input")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        output, _ = self.rnn(x.reshape(-1, 28, 28))  # (B, 28 steps, 64)
        h = self.batchnorm(output[:, -1, :])         # the last step's output
        h = F.relu(self.fc1(self.dropout1(h)))
        h = self.fc2(self.dropout2(h))
        return F.log_softmax(h, dim=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--accel", action="store_true", help="the accelerator (the default when there is one)")
    parser.add_argument("--no-accel", action="store_true", help="trains on the CPU")
    parser.add_argument("--dry-run", action="store_true", help="one batch per epoch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--save-model", action="store_true", help="writes mnist_rnn.pt")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--data", default=ec.DEFAULT_DIR)
    parser.add_argument("--limit", type=int, default=0, help="the first N training and test images only")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 (the comparison is true fp32)")
    args = parser.parse_args()

    if args.accel and args.no_accel:
        parser.error("--accel and --no-accel contradict each other")
    device = ec.setup("cpu" if args.no_accel else args.device or ("cuda" if torch.cuda.is_available() else "cpu"),
                      args.threads, args.tf32)
    torch.manual_seed(args.seed)
    train_data = ec.fashion_mnist(args.data, True, device, limit=args.limit)
    test_data = ec.fashion_mnist(args.data, False, device, limit=args.limit)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)
    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    rates, accuracy = [], float("nan")
    for epoch in range(1, args.epochs + 1):
        rates.append(ec.nll_train(model, device, train_data, optimizer, epoch, generator, args.batch_size,
                                  args.log_interval, args.dry_run))
        accuracy = ec.nll_test(model, test_data, args.test_batch_size, one_batch=args.dry_run)
        scheduler.step()
    if args.save_model:
        torch.save(model.state_dict(), "mnist_rnn.pt")
    ec.result(f"mnist_rnn_e{args.epochs}", args.seed, test_acc=round(accuracy, 2),
              images_per_s=round(statistics.median(rates)))


if __name__ == "__main__":
    main()
