#!/usr/bin/env python3
"""PyTorch side of examples/train_fashion_mnist.c: the same model trained on Fashion-MNIST the same
way, printing the same per-epoch lines and `result work=... impl=pytorch` lines, so the two can be
put side by side (test accuracy and training images/s).

Models (PyTorch's default init, torch.manual_seed(seed) first):
  mlp: Sequential(Linear(784, 256), ReLU, Linear(256, 128), ReLU, Linear(128, 10))
  cnn: Sequential(Conv2d(1, 32, 3, padding=1), ReLU, MaxPool2d(2), Conv2d(32, 64, 3, padding=1), ReLU,
       MaxPool2d(2), Flatten, Linear(3136, 128), ReLU, [Dropout(p) with --dropout p,] Linear(128, 10))
  residual: ResidualNet below (models/residual.c): stem conv + BatchNorm + ReLU, blocks
       relu(x + bn2(conv2(relu(bn1(conv1(x)))))), convolutions without bias, 32 channels (--width)
  resnet18: ResNet18 below (models/resnet.c): torchvision's resnet18 (BasicBlocks [2, 2, 2, 2], its
       parameter names and init: kaiming_normal_(fan_out, relu) convolutions) with the small-image
       stem, a 3x3 stride-1 conv and no max-pool; base width 64 (--width)
Adam(lr) or SGD(lr, momentum), CrossEntropyLoss, the last partial batch kept. The whole data set
sits on the device as float32, normalised as cgrad does ((pixel / 255 - 0.2860) / 0.3530,
torchvision's ToTensor + Normalize); each epoch's batches are gathered on the device through a
seeded permutation (torch.randperm with a generator seeded once with the seed), so no step waits on
a host-to-device copy. The IDX files are read with gzip + numpy.

Per epoch: training images/s over the whole epoch (timed with time.perf_counter, synchronised on
the GPU at the start and the end; the running loss is summed on the device and read once), then
the test accuracy over the 10000 test images in batches of 1000 under torch.no_grad() in eval mode
(BatchNorm normalises with its running statistics). Per seed:
  result work=fmnist_<model>[_w<W>]_<optimizer>_e<E>_seed<S> impl=pytorch seed=<S> test_acc=<final %>
         images_per_s=<median>
(one line; images_per_s: the median of the epochs' rates, as the C program reports it; _w<W> when
--width is not the model's default), and with several seeds a `mean` line. --seed S (one seed, as
the C program's flag) is --seeds S, so bench/run_examples.py can give both sides the same flags.
Convolutions and matmuls run in true fp32 (cuDNN's TF32 default switched off) unless --tf32 is given;
--deterministic restricts cuDNN to deterministic algorithms, as cgrad's default (the C program's
--nondeterministic is PyTorch's default, and accepted here so both sides take the same flags).

Usage: bench/bench_fashion_mnist.py [--model mlp|cnn|residual|resnet18] [--optimizer adam|sgd] [--lr LR]
       [--momentum M] [--epochs 10] [--seeds 0,1,2 | --seed S] [--device cuda|cpu] [--limit N]
       [--test-limit N] [--threads N] [--dropout P] [--width W] [--tf32] [--deterministic | --nondeterministic] [--data DIR]"""
import argparse
import statistics
import sys

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)

import example_common as ec  # noqa: E402 (after the check that PyTorch is there)


AMP = None  # --amp bf16 / fp16: forward passes and losses under torch.autocast(device, that dtype)


def autocast(device):
    dtype = torch.float16 if AMP == "fp16" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype, enabled=AMP is not None)


def test_accuracy(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad(), autocast(x.device):
        for i in range(0, len(x), 1000):
            correct += (model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()
    model.train()
    return 100.0 * float(correct) / len(x)


def conv3x3(cin, cout, stride=1):
    return torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class Block(torch.nn.Module):
    """y = relu(x + bn2(conv2(relu(bn1(conv1(x)))))), as models/residual.c's Block."""

    def __init__(self, c):
        super().__init__()
        self.conv1 = conv3x3(c, c)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = conv3x3(c, c)
        self.bn2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class ResidualNet(torch.nn.Module):
    """models/residual.c's cg_residual_net_new(in_channels, 28, 28, num_classes, c)."""

    def __init__(self, c=32, in_channels=1, num_classes=10):
        super().__init__()
        self.stem = conv3x3(in_channels, c)
        self.bn = torch.nn.BatchNorm2d(c)
        self.block1 = Block(c)
        self.block2 = Block(c)
        self.fc = torch.nn.Linear(c * 7 * 7, num_classes)

    def forward(self, x):
        h = torch.max_pool2d(self.block1(torch.relu(self.bn(self.stem(x)))), 2)
        h = torch.max_pool2d(self.block2(h), 2)
        return self.fc(h.flatten(1))


class BasicBlock(torch.nn.Module):
    """torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the shortcut a
    1x1 convolution and a BatchNorm where the shape changes; models/resnet.c's basic_block."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = conv3x3(cin, cout, stride)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = conv3x3(cout, cout)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                                  torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        h = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(h + (x if self.downsample is None else self.downsample(x)))


class ResNet18(torch.nn.Module):
    """models/resnet.c's cg_resnet18_new(in_channels, num_classes, width): torchvision's resnet18 with
    the small-image stem (3x3 stride-1 conv1, no max-pool), its names and its init."""

    def __init__(self, in_channels=1, num_classes=10, width=64):
        super().__init__()
        self.conv1 = conv3x3(in_channels, width)
        self.bn1 = torch.nn.BatchNorm2d(width)
        for i in range(4):
            cin, cout = width << max(i - 1, 0), width << i
            setattr(self, f"layer{i + 1}", torch.nn.Sequential(BasicBlock(cin, cout, 2 if i else 1),
                                                              BasicBlock(cout, cout, 1)))
        self.fc = torch.nn.Linear(8 * width, num_classes)
        for m in self.modules():
            if isinstance(m, torch.nn.Conv2d):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(h, 1), 1))


DEFAULT_WIDTH = {"residual": 32, "resnet18": 64}


def make_model(name, dropout, width=0):
    nn = torch.nn
    if name == "residual":
        return ResidualNet(width or DEFAULT_WIDTH[name])
    if name == "resnet18":
        return ResNet18(width=width or DEFAULT_WIDTH[name])
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), *([nn.Dropout(dropout)] if dropout > 0 else []),
                         nn.Linear(128, 10))


def run(seed, args, device, train, test):
    x_train, y_train = train
    n = len(x_train)
    torch.manual_seed(seed)
    model = make_model(args.model, args.dropout, args.width).to(device)
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    nbatches = (n + args.batch - 1) // args.batch
    scaler = torch.amp.GradScaler(device.type, enabled=AMP == "fp16")
    rates, acc = [], float("nan")
    for epoch in range(1, args.epochs + 1):
        start = ec.now(device)
        perm = torch.randperm(n, device=device, generator=gen)
        loss_sum = torch.zeros((), device=device)
        for b in range(nbatches):
            idx = perm[b * args.batch:(b + 1) * args.batch]
            xb, yb = x_train[idx], y_train[idx]
            optimizer.zero_grad()
            with autocast(xb.device):
                loss = loss_fn(model(xb), yb)
            scaler.scale(loss).backward()  # fp16: GradScaler's defaults; otherwise it passes through
            scaler.step(optimizer)
            scaler.update()
            loss_sum += loss.detach() * len(idx)
        train_loss = float(loss_sum) / n  # waits for the epoch's work
        seconds = ec.now(device) - start
        rates.append(n / seconds)
        acc = test_accuracy(model, *test)
        print(f"seed {seed} epoch {epoch}: train loss {train_loss:.4f}, test accuracy {acc:.2f}%, "
              f"{n / seconds:.0f} images/s", flush=True)
    rate = statistics.median(rates)
    tag = "_dropout" if args.dropout > 0 else \
        f"_w{args.width}" if args.width not in (0, DEFAULT_WIDTH.get(args.model)) else ""
    tag += f"_{AMP}" if AMP else ""
    print(f"result work=fmnist_{args.model}{tag}_{args.optimizer}_e{args.epochs}_seed{seed} impl=pytorch "
          f"seed={seed} test_acc={acc:.2f} images_per_s={rate:.0f}", flush=True)
    return acc, rate


def optimizer_desc(args):
    if args.optimizer == "adam":
        return f"Adam(lr={args.lr:g})"
    return f"SGD(lr={args.lr:g}, momentum={args.momentum:g})"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["mlp", "cnn", "residual", "resnet18"], default="mlp")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD momentum")
    p.add_argument("--dropout", type=float, default=0.0, help="CNN: Dropout(p) before the last Linear")
    p.add_argument("--tf32", action="store_true", help="PyTorch's default TF32 convolutions")
    p.add_argument("--deterministic", action="store_true",
                   help="cuDNN's deterministic convolution algorithms only (cgrad's default)")
    p.add_argument("--amp", choices=["bf16", "fp16"],
                   help="forward passes and losses under bfloat16 autocast, or float16 with a GradScaler")
    p.add_argument("--nondeterministic", action="store_true",
                   help="PyTorch's default, accepted so both sides take the same flags")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seeds", default="0", help="comma-separated, e.g. 0,1,2")
    p.add_argument("--seed", type=int, help="one seed (the same as --seeds S)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--limit", type=int, default=0, help="train on the first N images only (0: all)")
    p.add_argument("--test-limit", type=int, default=0, help="test on the first N test images only (0: all)")
    p.add_argument("--width", type=int, default=0,
                   help="residual: channels (default 32); resnet18: base width (default 64)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    p.add_argument("--data", default=ec.DEFAULT_DIR)
    args = p.parse_args()
    seeds = [args.seed] if args.seed is not None else [int(s) for s in args.seeds.split(",") if s.strip()]
    if args.epochs < 1 or args.batch < 1 or min(args.limit, args.test_limit, args.width) < 0 or not seeds \
            or not 0 <= args.dropout < 1:
        p.error("--epochs and --batch must be >= 1, --limit, --test-limit and --width >= 0, --seeds not empty, "
                "0 <= --dropout < 1")
    if args.width > 0 and args.model not in DEFAULT_WIDTH:
        p.error("--width applies to --model residual and resnet18 only")
    if args.dropout > 0 and args.model != "cnn":
        p.error("--dropout applies to --model cnn only")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.deterministic = args.deterministic
    global AMP
    AMP = args.amp
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"CPU, {torch.get_num_threads()} threads"
    flat = args.model == "mlp"
    train = ec.fashion_mnist(args.data, True, device, flat, args.limit)
    test = ec.fashion_mnist(args.data, False, device, flat, args.test_limit)
    print(f"# PyTorch {torch.__version__} on {device} ({name}): {len(train[0])} training images, "
          f"{args.model.upper()}{f' with Dropout({args.dropout:g})' if args.dropout > 0 else ''}"
          f"{f' width {args.width}' if args.width else ''}, batch {args.batch}, {optimizer_desc(args)}, {args.epochs} epochs, "
          f"seeds {seeds}, {'TF32 convolutions' if args.tf32 else 'fp32'}",
          flush=True)
    results = [run(seed, args, device, train, test) for seed in seeds]
    if len(results) > 1:
        accs = [a for a, _ in results]
        print(f"mean over {len(seeds)} seeds: test_acc={statistics.mean(accs):.2f} "
              f"(stdev {statistics.stdev(accs):.2f}) "
              f"images_per_s={statistics.mean(r for _, r in results):.0f}", flush=True)


if __name__ == "__main__":
    main()
