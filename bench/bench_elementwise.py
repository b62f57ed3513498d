#!/usr/bin/env python3
"""PyTorch side of bench/bench_elementwise.c: y = torch.cos(x)**2 + torch.sin(x)**2 over
x = torch.arange(1e7) float32, eager, op by op as the seed writes it; and the bandwidth of a
device-to-device copy (x.clone() of a large tensor, read + write).

Timing as in the C bench: each sample runs the work --inner times, then synchronises; the sample
time / --inner is one measurement; the median over --runs samples is printed as
`result work=... impl=pytorch` lines for bench/run_benchmarks.sh."""
import argparse
import os
import sys

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)

from timing import median_seconds


def main():
    p = argparse.ArgumentParser(description="benchmark: cos(x)**2 + sin(x)**2 op by op (PyTorch)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--n", type=float, default=1e7, help="elements of x")
    p.add_argument("--runs", type=int, default=50, help="timed samples (median reported)")
    p.add_argument("--inner", type=int, default=10, help="repetitions per sample")
    p.add_argument("--copy-mib", type=int, default=0, help="MiB cloned (0: 1024 GPU, 256 CPU)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads")
    a = p.parse_args()
    n = int(a.n)
    if n != a.n or n < 1 or a.runs < 1 or a.inner < 1 or a.copy_mib < 0 or a.threads < 1:
        p.error("--n must be a positive integer; runs, inner, threads >= 1; copy-mib >= 0")
    try:
        device = torch.device(a.device)
        if device.type == "cuda" and (not torch.cuda.is_available()
                                      or (device.index or 0) >= torch.cuda.device_count()):
            raise RuntimeError(f"{a.device} is not available")
    except RuntimeError as e:
        p.error(f"bad --device: {e}")
    torch.set_num_threads(a.threads)
    gpu = device.type == "cuda"
    where = "gpu" if gpu else f"cpu_t{torch.get_num_threads()}"
    copy_mib = a.copy_mib or (1024 if gpu else 256)
    name = torch.cuda.get_device_name(device) if gpu else "cpu"
    print(f"# torch {torch.__version__}, device {device} ({name})", flush=True)

    # Copy bandwidth: clone, read + write.
    src = torch.rand(copy_mib * 1024 * 1024 // 4, device=device)
    assert torch.equal(src.clone(), src)
    t_copy = median_seconds(lambda: src.clone(), device, a.runs, warmup=3, inner=a.inner)
    bw = 2.0 * src.numel() * 4 / t_copy
    print(f"result work=copy_{where}_{copy_mib}MiB impl=pytorch median_ms={1e3 * t_copy:.4f} "
          f"gbps={bw * 1e-9:.1f} runs={a.runs}", flush=True)
    del src

    # The seed's sequence, checked, then timed.
    x = torch.arange(n, dtype=torch.float32, device=device)
    y = torch.cos(x) ** 2 + torch.sin(x) ** 2
    worst = float((y.double() - 1).abs().max())
    print(f"# check: max |y - 1| = {worst:.2e}", flush=True)
    if not worst <= 2e-6:
        sys.exit("check failed: cos(x)**2 + sin(x)**2 == 1 within 2e-6")
    t = median_seconds(lambda: torch.cos(x) ** 2 + torch.sin(x) ** 2, device, a.runs, warmup=3, inner=a.inner)
    print(f"result work=cos2sin2_{where}_n{n} impl=pytorch median_ms={1e3 * t:.4f} "
          f"floor_ms={1e3 * 40.0 * n / bw:.4f} runs={a.runs}", flush=True)


if __name__ == "__main__":
    main()
