"""What the PyTorch sides of the examples share (bench/mnist.py, vae.py, bench_fashion_mnist.py, ...):
Fashion-MNIST read from the same IDX files as cgrad and held on the device, the precision and thread
settings that make a fair comparison, a synchronised clock, and the `result` line that
bench/run_examples.py and bench/results.awk read:

    result work=<program>[_<config>] impl=pytorch seed=<s> <metric>=<value> <rate>=<per second>

Import it as `import example_common as ec` from a script in bench/ (Python puts the script's own
folder first on the import path)."""
import argparse
import gzip
import os
import statistics
import sys
import time

import numpy as np

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)

# Fashion-MNIST's pixel mean and std over the training set, as cgrad's CG_FASHION_MNIST_MEAN / _STD.
MEAN, STD = 0.2860, 0.3530
DEFAULT_DIR = os.environ.get("CGRAD_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path, ndim):
    """A uint8 IDX file (gzip-compressed or plain) as a numpy array, with its header checked."""
    if not os.path.exists(path) and path.endswith(".gz") and os.path.exists(path[:-3]):
        path = path[:-3]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    if magic != 0x0800 | ndim:
        raise ValueError(f"{path}: bad magic 0x{magic:08x} (want 0x{0x0800 | ndim:08x})")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {body.size} bytes of data for dims {dims}")
    return body.reshape(dims)


def fashion_mnist(data_dir, train, device, flat=False, limit=0, normalize=(MEAN, STD)):
    """The training or test set on the device: images float32 (N, 784) if flat else (N, 1, 28, 28),
    pixel / 255 and then (x - mean) / std unless normalize is None; labels int64 (N). Only the first
    `limit` images when limit > 0."""
    prefix = "train" if train else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 3)
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 1)
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    shape = (len(images), -1) if flat else (len(images), 1, images.shape[1], images.shape[2])
    x = images.reshape(shape).astype(np.float32) / np.float32(255.0)
    if normalize is not None:
        x = (x - np.float32(normalize[0])) / np.float32(normalize[1])
    return torch.from_numpy(x).to(device), torch.from_numpy(labels.astype(np.int64)).to(device)


def setup(device, threads=0, tf32=False):
    """torch.device(device), with `threads` CPU threads (0: PyTorch's default) and true fp32 matmuls
    and convolutions unless tf32 (cgrad computes fp32 in fp32). Prints one line naming the device."""
    if threads > 0:
        torch.set_num_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    device = torch.device(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"CPU, {torch.get_num_threads()} threads"
    print(f"# PyTorch {torch.__version__} on {device} ({name}), {'TF32' if tf32 else 'fp32'}", flush=True)
    return device


def now(device):
    """Seconds on a monotonic clock once the device's queued work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def nll_train(model, device, data, optimizer, epoch, generator, batch_size, log_interval, dry_run):
    """train() of pytorch/examples' mnist/main.py (mnist_rnn/main.py repeats it): one epoch of nll_loss
    steps over data (images, labels) in a device randperm from generator, its "Train Epoch" lines (each
    reads the loss back); with dry_run, one batch. Returns the epoch's images per second."""
    images, labels = data
    n = len(images)
    batches = (n + batch_size - 1) // batch_size
    model.train()
    start = now(device)
    order = torch.randperm(n, device=device, generator=generator)
    seen = 0
    for batch_idx in range(batches):
        index = order[batch_idx * batch_size:(batch_idx + 1) * batch_size]
        optimizer.zero_grad()
        loss = torch.nn.functional.nll_loss(model(images[index]), labels[index])
        loss.backward()
        optimizer.step()
        stop = False
        if batch_idx % log_interval == 0:
            print(f"Train Epoch: {epoch} [{seen}/{n} ({100.0 * batch_idx / batches:.0f}%)]\tLoss: {loss.item():.6f}")
            stop = dry_run
        seen += len(index)
        if stop:
            break
    return seen / (now(device) - start)


def nll_test(model, data, batch_size, one_batch=False):
    """test() of mnist/main.py: the summed nll_loss and the correct predictions over data in eval mode,
    without gradients (one batch only with one_batch, as mnist_rnn's dry run), its "Test set" line.
    Returns the accuracy in percent."""
    images, labels = data
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(images), batch_size):
            output = model(images[i:i + batch_size])
            test_loss += torch.nn.functional.nll_loss(output, labels[i:i + batch_size], reduction="sum").item()
            correct += (output.argmax(dim=1) == labels[i:i + batch_size]).sum().item()
            if one_batch:
                break
    n = len(images)
    print(f"\nTest set: Average loss: {test_loss / n:.4f}, Accuracy: {correct}/{n} ({100.0 * correct / n:.0f}%)\n")
    return 100.0 * correct / n


def mnist_main(net, name, about, lr, save_as, dry_run_test=False):
    """main() of mnist/main.py, which mnist_rnn/main.py repeats around another model: the flags (upstream's,
    and --device --limit --threads --tf32 --data), Fashion-MNIST on the device, Adadelta(lr) and
    StepLR(1, gamma) on nll_loss, the epochs, --save-model to save_as, and the result line
    <name>_e<E> with the final accuracy and the median epoch's images per second. net() makes the model;
    dry_run_test: --dry-run cuts the test pass to one batch too (mnist_rnn's test() does)."""
    p = argparse.ArgumentParser(description=about)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--test-batch-size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=14)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--gamma", type=float, default=0.7)
    p.add_argument("--accel", action="store_true", help="the accelerator (the default when there is one)")
    p.add_argument("--no-accel", action="store_true", help="trains on the CPU")
    p.add_argument("--dry-run", action="store_true", help="one batch per epoch")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--save-model", action="store_true", help=f"writes {save_as}")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    p.add_argument("--limit", type=int, default=0, help="the first N training and test images only (0: all)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--tf32", action="store_true", help="allow TF32 (the comparison is true fp32)")
    p.add_argument("--data", default=DEFAULT_DIR)
    args = p.parse_args()
    if args.accel and args.no_accel:
        p.error("--accel and --no-accel contradict each other")

    device = setup("cpu" if args.no_accel else args.device or ("cuda" if torch.cuda.is_available() else "cpu"),
                   args.threads, args.tf32)
    torch.manual_seed(args.seed)
    train_data = fashion_mnist(args.data, True, device, limit=args.limit)
    test_data = fashion_mnist(args.data, False, device, limit=args.limit)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)
    model = net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)
    rates, accuracy = [], float("nan")
    for epoch in range(1, args.epochs + 1):
        rates.append(nll_train(model, device, train_data, optimizer, epoch, generator, args.batch_size,
                               args.log_interval, args.dry_run))
        accuracy = nll_test(model, test_data, args.test_batch_size, one_batch=args.dry_run and dry_run_test)
        scheduler.step()
    if args.save_model:
        torch.save(model.state_dict(), save_as)
    result(f"{name}_e{args.epochs}", args.seed, test_acc=round(accuracy, 2), images_per_s=statistics.median(rates))


def result(work, seed, **fields):
    """Prints the result line; floats with 6 significant digits (round them first for fewer)."""
    def fmt(v):
        return f"{v:.6g}" if isinstance(v, float) else str(v)
    print(f"result work={work} impl=pytorch seed={seed} " + " ".join(f"{k}={fmt(v)}" for k, v in fields.items()),
          flush=True)
