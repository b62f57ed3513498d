"""Where a training step's GPU time goes, kernel by kernel: runs a program under Nsight Compute (ncu),
timing each kernel of a window of launches with the one metric gpu__time_duration (ncu serialises
kernels, so a kernel's time is its own), and prints the time per step of each kernel name, largest
first, grouped into families (convolution, batch norm, GEMM, element-wise, optimizer, ...).

A step is counted by a marker: a regular expression matching a kernel that runs exactly once per step
(the loss's forward kernel, say: PyTorch's foreach optimizers launch several multi_tensor_apply kernels
a step), and the window should hold several steps, or its edges skew the per-step figures. Times are
Nsight Compute's, each kernel alone with cold caches: memory-bound kernels read slower than in the
running step, so compare families and kernel counts across sides rather than sum them to a step time.
Run it on both sides of a comparison with the same window:

  python3 bench/kernel_profile.py --marker cross_entropy_forward -- build/train_fashion_mnist --model resnet18 ...
  python3 bench/kernel_profile.py --marker nll_loss_forward -- python3 bench/bench_fashion_mnist.py --model resnet18 ...
  python3 bench/kernel_profile.py --marker sgd_kernel --skip 60 --count 150 -- build/bench_train_step --work mlp --mlp-modes bf16

ncu is the only profiler on the GPU machine (Nsight Systems is not); --clock-control none leaves the
clocks as they are, as the machine's notes ask."""
import argparse
import collections
import csv
import io
import re
import shutil
import subprocess
import sys
import tempfile

FAMILIES = [  # (family, pattern over the kernel's name), first match wins
    ("conv wgrad", r"wgrad|bwd_filter|BackwardFilter|dgrad2d_grouped_direct.*wgrad"),
    ("conv dgrad", r"dgrad|bwd_data|BackwardData"),
    ("conv fprop", r"fprop|implicit_convolve|implicit_gemm|conv2d|xmma_fprop|cudnn::cnn|convolve"),
    ("batch norm", r"batch_?norm|bn_|welford|BatchNorm"),
    ("GEMM", r"gemm|sgemm|cutlass|Kernel2|nvjet|cublas"),
    ("optimizer", r"sgd|adam|momentum|multi_tensor|foreach|optim"),
    ("reduction", r"reduce|sum_|_sum|mean"),
    ("loss/softmax", r"softmax|entropy|nll"),
    ("pooling", r"pool"),
    ("element-wise", r"elementwise|vectorized|unary|binary|relu|add|copy|fill|cast|scale"),
]


def family(name):
    return next((f for f, p in FAMILIES if re.search(p, name, re.I)), "other")


def profile(cmd, skip, count):
    """Runs cmd under ncu; returns [(kernel name, seconds)] of the window, in launch order."""
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    with tempfile.NamedTemporaryFile(suffix=".csv") as log:
        full = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv", "--page", "raw",
                "--launch-skip", str(skip), "--launch-count", str(count), "--log-file", log.name] + cmd
        proc = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        text = open(log.name).read() + "\n" + proc.stdout
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"kernel_profile: ncu wrote no kernel table (exit {proc.returncode}):\n{text[-3000:]}")
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    units = rows[0]["gpu__time_duration.sum"]  # the second row gives the units
    scale = {"ns": 1e-9, "nsecond": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3}.get(units, 1e-9)
    out = []
    for r in rows[1:]:
        name, value = r.get("Kernel Name"), r.get("gpu__time_duration.sum") or ""  # a short row: the program's output
        if name and value.replace(".", "", 1).replace(",", "").isdigit():
            out.append((name, float(value.replace(",", "")) * scale))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--marker", required=True, help="regex of a kernel that runs once per step")
    ap.add_argument("--skip", type=int, default=3000, help="launches to let pass first (warm-up)")
    ap.add_argument("--count", type=int, default=2000, help="launches to time")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--label", default="", help="printed in each summary line")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    kernels = profile(cmd, a.skip, a.count)
    steps = sum(1 for n, _ in kernels if re.search(a.marker, n))
    if steps == 0:
        sys.exit(f"kernel_profile: no kernel matched --marker {a.marker!r} among {len(kernels)} timed")
    by_name, by_family, calls = collections.Counter(), collections.Counter(), collections.Counter()
    for n, t in kernels:
        by_name[n] += t
        calls[n] += 1
        by_family[family(n)] += t
    total = sum(by_name.values())
    print(f"# {a.label}: {len(kernels)} kernels timed, {steps} steps: {total / steps * 1e3:.3f} ms of kernels "
          f"a step, {len(kernels) / steps:.0f} launches a step")
    for f, t in by_family.most_common():
        print(f"family {a.label:>10} {f:<14} {t / steps * 1e3:8.3f} ms/step {100 * t / total:5.1f}%")
    for n, t in by_name.most_common(a.top):
        print(f"kernel {a.label:>10} {t / steps * 1e3:8.3f} ms/step {calls[n] / steps:5.1f}x  {n[:150]}")


if __name__ == "__main__":
    main()
