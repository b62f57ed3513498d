#!/usr/bin/env python3
"""PyTorch side of bench/bench_lstm.c: nn.LSTM and nn.GRU forward + backward (seq 64, batch 64, input
256, hidden 512, 2 layers, unidirectional, with biases by default), timed the same way and printed as
the same `result work=... impl=pytorch median_ms=...` lines.

A run: zero_grad (set to none), forward of the input (not requiring grad), backward with a fixed output
gradient. 3 warm-up runs, then the median of --runs runs each timed alone (synchronised on the GPU).
--tf32 0 (default) sets torch.backends.cudnn.allow_tf32 = False, so cuDNN is true fp32 like cgrad's
default; PyTorch's own default is True (compare with bench_lstm --tf32 1)."""
import argparse
import statistics
import sys
import time

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)


def median_seconds(fn, device, warmup, runs):
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tf32", type=int, default=0)
    a = ap.parse_args()
    device = torch.device(a.device)
    torch.set_num_threads(a.threads)
    torch.backends.cudnn.allow_tf32 = bool(a.tf32)
    torch.manual_seed(1)
    where = f"cpu_t{a.threads}" if device.type == "cpu" else "gpu" + ("_tf32" if a.tf32 else "")
    for kind, cls in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)):
        m = cls(a.input, a.hidden, num_layers=a.layers).to(device)
        x = torch.randn(a.seq, a.batch, a.input, device=device)
        gy = torch.randn(a.seq, a.batch, a.hidden, device=device)

        def run():
            m.zero_grad(set_to_none=True)
            y, _ = m(x)
            y.backward(gy)

        t = median_seconds(run, device, 3, a.runs)
        print(f"result work={kind}_fwd_bwd_{where}_s{a.seq}_b{a.batch}_i{a.input}_h{a.hidden} impl=pytorch "
              f"median_ms={1e3 * t:.4f} runs={a.runs}", flush=True)


if __name__ == "__main__":
    main()
