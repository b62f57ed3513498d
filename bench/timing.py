"""The timing the PyTorch sides of the micro-benchmarks share (bench_*.py), so that every script
measures the same way as the C programs' eu_time_median: warm-up calls, then samples each ending once
the device is idle (torch.cuda.synchronize: the GPU runs asynchronously), and the median sample; and
the `result work=<key> impl=pytorch median_ms=<t> runs=<k> ...` line bench/results.awk reads."""
import statistics
import time

import torch


def layer_args(ap, runs=20):
    """The flags the layer benchmarks share (bench_conv, bench_lstm, bench_resnet_block), as their C twins."""
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--tf32", type=int, default=0, help="1: cuDNN may use TF32 (PyTorch's default)")


def layer_setup(a):
    """torch.device(a.device) with a.threads CPU threads, cuDNN's TF32 as a.tf32 says, seed 1; and the
    result key's device part, as eu_bench_setup writes it: "cpu_t<threads>", "gpu" or "gpu_tf32"."""
    torch.set_num_threads(a.threads)
    torch.backends.cudnn.allow_tf32 = bool(a.tf32)
    torch.manual_seed(1)
    device = torch.device(a.device)
    return device, f"cpu_t{a.threads}" if device.type == "cpu" else "gpu" + ("_tf32" if a.tf32 else "")


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
