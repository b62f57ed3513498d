#!/usr/bin/env python3
"""PyTorch side of bench/bench_lstm.c: nn.LSTM and nn.GRU forward + backward (seq 64, batch 64, input
256, hidden 512, 2 layers, unidirectional, with biases by default), timed the same way and printed as
the same `result work=... impl=pytorch median_ms=...` lines.

A run: zero_grad (set to none), forward of the input (not requiring grad), backward with a fixed output
gradient. 3 warm-up runs, then the median of --runs runs each timed alone (synchronised on the GPU).
--tf32 0 (default) sets torch.backends.cudnn.allow_tf32 = False, so cuDNN is true fp32 like cgrad's
default; PyTorch's own default is True (compare with bench_lstm --tf32 1)."""
import argparse
import sys

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)

from timing import layer_args, layer_setup, median_seconds, result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=2)
    layer_args(ap)
    a = ap.parse_args()
    device, where = layer_setup(a)
    for kind, cls in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU)):
        m = cls(a.input, a.hidden, num_layers=a.layers).to(device)
        x = torch.randn(a.seq, a.batch, a.input, device=device)
        gy = torch.randn(a.seq, a.batch, a.hidden, device=device)

        def run():
            m.zero_grad(set_to_none=True)
            y, _ = m(x)
            y.backward(gy)

        t = median_seconds(run, device, a.runs, warmup=3)
        result(f"{kind}_fwd_bwd_{where}_s{a.seq}_b{a.batch}_i{a.input}_h{a.hidden}", t, a.runs)


if __name__ == "__main__":
    main()
