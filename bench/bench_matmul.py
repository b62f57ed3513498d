#!/usr/bin/env python3
"""PyTorch side of bench/bench_matmul.c: x @ x for x = torch.rand(n, n), float32, on the GPU
(true fp32: allow_tf32 = False, PyTorch's default) and on the CPU at a given thread count.

Timing as in the C bench: check the product first, two warm-ups, then the median of --repeats
runs, each ending with torch.cuda.synchronize(). Prints the same `result work=... impl=pytorch`
lines, so bench/run_benchmarks.sh can put the two side by side."""
import argparse
import os
import sys

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)

from timing import median_seconds, result


def check_product(x, r):
    # A few entries of x @ x, corners included, against double-precision dot products.
    n = x.shape[0]
    idx = [0, n // 3, n // 2, (2 * n) // 3, n - 1]
    xd = x.double()
    for i in idx:
        for j in idx:
            ref = float(xd[i] @ xd[:, j])
            got = float(r[i, j])
            if not abs(got - ref) <= 1e-4 * abs(ref) + 1e-6:
                sys.exit(f"check failed: x @ x [{i}, {j}] = {got}, expected {ref}")


def bench(device, n, repeats, key):
    x = torch.rand(n, n, device=device)  # never time on zeros
    check_product(x, x @ x)
    # two warm-ups: cuBLAS handles, caching allocator, page faults
    t = median_seconds(lambda: x @ x, device, repeats, warmup=2)
    result(key, t, repeats, tflops=f"{2.0 * n ** 3 / t * 1e-12:.3f}")
    del x


def main():
    p = argparse.ArgumentParser(description="benchmark: fp32 x @ x on the GPU and on the CPU (PyTorch)")
    p.add_argument("--size", type=int, default=16000, help="n on the GPU (0 skips the GPU)")
    p.add_argument("--cpu-size", type=int, default=4000, help="n on the CPU (0 skips the CPU)")
    p.add_argument("--repeats", type=int, default=10, help="timed runs of each, after two warm-ups")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="the GPU (cuda, cuda:N), or cpu")
    a = p.parse_args()
    if a.size < 0 or a.cpu_size < 0 or a.repeats < 1 or a.threads < 1:
        p.error("sizes must be >= 0, repeats and threads >= 1")
    try:
        device = torch.device(a.device)
        if device.type == "cuda" and (not torch.cuda.is_available()
                                      or (device.index or 0) >= torch.cuda.device_count()):
            raise RuntimeError(f"{a.device} is not available")
    except RuntimeError as e:
        p.error(f"bad --device: {e}")

    torch.backends.cuda.matmul.allow_tf32 = False  # true fp32, as cgrad by default
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    if device.type == "cuda" and a.size > 0:
        print(f"# gpu: {device} ({torch.cuda.get_device_name(device)})", flush=True)
        bench(device, a.size, a.repeats, f"matmul_gpu_fp32_n{a.size}")
    if a.cpu_size > 0:
        bench(torch.device("cpu"), a.cpu_size, a.repeats,
              f"matmul_cpu_fp32_n{a.cpu_size}_t{torch.get_num_threads()}")


if __name__ == "__main__":
    main()
