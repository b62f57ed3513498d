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


if __name__ == "__main__":
    ec.mnist_main(Net, "mnist_rnn", "PyTorch MNIST Example using an RNN (on Fashion-MNIST)", lr=0.1,
                  save_as="mnist_rnn.pt", dry_run_test=True)
