"""The timing the PyTorch sides of the micro-benchmarks share (bench_*.py), so that every script
measures the same way as the C programs' eu_time_median: warm-up calls, then samples each ending once
the device is idle (torch.cuda.synchronize: the GPU runs asynchronously), and the median sample; and
the `result work=<key> impl=pytorch median_ms=<t> runs=<k> ...` line bench/results.awk reads."""
import statistics
import time

import torch


def sync(device):
    """Waits for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, device, runs, warmup=0, inner=1):
    """fn() `warmup` times, then `runs` samples of `inner` calls each; the median sample / inner, in s."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync(device)
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def result(key, seconds, runs, **extra):
    """Prints `result work=key impl=pytorch median_ms=... runs=...` and the extra fields in order."""
    fields = "".join(f" {k}={v}" for k, v in extra.items())
    print(f"result work={key} impl=pytorch median_ms={1e3 * seconds:.5f} runs={runs}{fields}", flush=True)
