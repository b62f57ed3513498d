"""What the PyTorch sides of the examples share (bench/mnist.py, vae.py, bench_fashion_mnist.py, ...):
Fashion-MNIST read from the same IDX files as cgrad and held on the device, the precision and thread
settings that make a fair comparison, a synchronised clock, and the `result` line that
bench/run_examples.py and bench/results.awk read:

    result work=<program>[_<config>] impl=pytorch seed=<s> <metric>=<value> <rate>=<per second>

Import it as `import example_common as ec` from a script in bench/ (Python puts the script's own
folder first on the import path)."""
import gzip
import os
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


def result(work, seed, **fields):
    """Prints the result line; floats with 6 significant digits (round them first for fewer)."""
    def fmt(v):
        return f"{v:.6g}" if isinstance(v, float) else str(v)
    print(f"result work={work} impl=pytorch seed={seed} " + " ".join(f"{k}={fmt(v)}" for k, v in fields.items()),
          flush=True)
