#!/usr/bin/env python3
"""PyTorch side of bench/bench_train_step.c: the same training steps of nn.Linear models, timed
the same way, printing the same `result work=... impl=pytorch median_ms=...` lines so
bench/run_step_benchmarks.sh can put the two side by side.

A step is the seed's: optimizer.zero_grad(), output = model(x), loss = MSELoss()(output, y),
loss.backward(), optimizer.step() with SGD(lr=0.01), then torch.cuda.synchronize() on the GPU; the
loss is not read back. Model and data are already on the device (data drawn there:
torch.randn(..., device=...)). Warm-up steps, then the median of many steps, each timed alone
with time.perf_counter(). The loss is checked as in the C bench: finite, and lower after the
timed steps than after the first warm-up step.

Workloads (--work, comma-separated; keys as in the C bench):
  seed      Linear(100000, 10), n=10000 on the GPU; the device-to-device copy bandwidth
            (x.clone() of --copy-mib MiB) [copy_gpu_<m>MiB]
  tiny      Linear(10, 1), n=5: GPU eager, GPU as a CUDA graph (torch.cuda.graph, the
            whole-network capture recipe of the CUDA-graphs docs: warm-up on a side stream,
            zero_grad(set_to_none=True) before capture; skipped with a '#' line if capture
            fails), and CPU at --tiny-threads threads (torch.set_num_threads)
  wide      Linear(1024, 1024), n=4096, true fp32 (allow_tf32 = False); its forward GEMM
            x @ W.T and weight-gradient GEMM g.T @ x timed alone [wide_gemms_...]
  cpu_seed  the seed step on the CPU at --cpu-seed-threads threads
  mlp       (only when listed) issue 32's MLP: --mlp-layers nn.Linear(w, w) with nn.ReLU between,
            w = --mlp-width, n = --mlp-n, in true fp32, TF32, and with forward and loss under
            torch.autocast("cuda", torch.bfloat16) [mlp_gpu_<fp32|tf32|bf16>_w.._l.._n..]; and the
            step's GEMMs alone in its dtype, summed over the step [mlp_gemms_gpu_<mode>_..]
  first_step  (alone, fresh process: --first-step) model built on the CPU and moved to the GPU,
            data drawn on the GPU, synchronise, then time the first step (synchronised)."""
import argparse
import math
import os
import sys
import time

try:
    import torch
except ImportError:
    print("# PyTorch not available", flush=True)
    sys.exit(3)

from timing import median_seconds, result

WORKS = ("seed", "tiny", "wide", "cpu_seed", "mlp", "first_step")


class Trainer:
    """The seed's setup on one device: model = nn.Linear(in, out).to(device), SGD, MSELoss."""

    def __init__(self, device, n_in, n_out, n):
        self.device = device
        self.model = torch.nn.Linear(n_in, n_out).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.loss_fn = torch.nn.MSELoss()
        self.x = torch.randn(n, n_in, device=device)
        self.y = torch.randn(n, n_out, device=device)
        self.loss = None

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    amp = None  # forward and loss under torch.autocast of this dtype; None: no autocast

    def step(self):
        self.optimizer.zero_grad()
        with torch.autocast(self.device.type, dtype=self.amp or torch.bfloat16, enabled=self.amp is not None):
            output = self.model(self.x)
            loss = self.loss_fn(output, self.y)
        loss.backward()
        self.optimizer.step()
        self.loss = loss  # a handle, not a read: no synchronisation

    def loss_value(self):
        return float(self.loss.item())


def check_trained(key, before, after):
    print(f"# {key}: loss {before:.6g} after the first step, {after:.6g} after the timed steps",
          flush=True)
    if not (math.isfinite(before) and math.isfinite(after) and after < before):
        sys.exit(f"check failed: {key}: the loss is finite and went down ({before} -> {after})")


def time_steps(t, key, warmup, steps):
    t.step()
    before = t.loss_value()
    for _ in range(1, warmup):
        t.step()
    med = median_seconds(t.step, t.device, steps)
    check_trained(key, before, t.loss_value())
    return med


def copy_bandwidth(device, mib, key):
    numel = mib * (1 << 20) // 4
    x = torch.rand(numel, device=device)  # never time on zeros
    if not torch.equal(x.clone(), x):
        sys.exit("check failed: clone copies the tensor")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        x.clone()
    t = median_seconds(lambda: x.clone(), device, 20)
    bw = 2.0 * numel * 4 / t
    result(key, t, 20, gbps=f"{bw * 1e-9:.1f}")
    return bw


def work_seed(a, gpu):
    bw = copy_bandwidth(gpu, a.copy_mib, f"copy_gpu_{a.copy_mib}MiB")
    key = f"seed_gpu_in{a.n_in}_out{a.out}_n{a.n}"
    t = Trainer(gpu, a.n_in, a.out, a.n)
    med = time_steps(t, key, a.warmup, a.steps)
    del t
    result(key, med, a.steps, floor_ms=f"{2e3 * a.n * a.n_in * 4 / bw:.4f}")


def graph_step(t, warmup):
    """Captures the step as a CUDA graph (the docs' whole-network recipe); returns the graph."""
    s = torch.cuda.Stream(device=t.device)
    s.wait_stream(torch.cuda.current_stream(t.device))
    with torch.cuda.stream(s):
        for _ in range(max(3, warmup)):
            t.optimizer.zero_grad(set_to_none=True)
            t.loss_fn(t.model(t.x), t.y).backward()
            t.optimizer.step()
    torch.cuda.current_stream(t.device).wait_stream(s)
    g = torch.cuda.CUDAGraph()
    # Grads set to None before capture: backward then allocates them from the graph's pool and
    # each replay writes them afresh, which is zero_grad + accumulate.
    t.optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        output = t.model(t.x)
        loss = t.loss_fn(output, t.y)
        loss.backward()
        t.optimizer.step()
    t.loss = loss
    return g


def work_tiny(a, gpu):
    n_in, n_out, n = 10, 1, 5
    if gpu is not None:
        key = f"tiny_gpu_eager_in{n_in}_out{n_out}_n{n}"
        t = Trainer(gpu, n_in, n_out, n)
        result(key, time_steps(t, key, a.warmup, a.tiny_steps), a.tiny_steps)

        key = f"tiny_gpu_graph_in{n_in}_out{n_out}_n{n}"
        t = Trainer(gpu, n_in, n_out, n)
        t.step()
        before = t.loss_value()
        try:
            g = graph_step(t, a.warmup)
        except Exception as e:  # optional: say why and go on
            print(f"# {key}: CUDA graph capture failed: {type(e).__name__}: {e}", flush=True)
        else:
            for _ in range(a.warmup):
                g.replay()
            med = median_seconds(g.replay, t.device, a.tiny_steps)
            check_trained(key, before, t.loss_value())
            result(key, med, a.tiny_steps)
            del g
    else:
        print("# tiny: no GPU rows", flush=True)

    threads = torch.get_num_threads()
    torch.set_num_threads(a.tiny_threads)
    key = f"tiny_cpu_t{torch.get_num_threads()}_in{n_in}_out{n_out}_n{n}"
    t = Trainer(torch.device("cpu"), n_in, n_out, n)
    result(key, time_steps(t, key, 10 * a.warmup, a.cpu_tiny_steps), a.cpu_tiny_steps)
    torch.set_num_threads(threads)


def check_gemm(what, a, b, r):
    """A few entries (corners included) of r = a @ b against double-precision dot products."""
    m, n = r.shape
    for i in (0, m // 3, m - 1):
        for j in (0, n // 2, n - 1):
            terms = a[i].double() * b[:, j].double()
            ref, mag = float(terms.sum()), float(terms.abs().sum())
            got = float(r[i, j])
            if not abs(got - ref) <= 1e-4 * mag + 1e-6:
                sys.exit(f"check failed: {what} [{i}, {j}] = {got}, expected {ref}")


def work_wide(a, gpu):
    torch.backends.cuda.matmul.allow_tf32 = False  # true fp32 (PyTorch's default)
    key = f"wide_gpu_fp32_in{a.wide}_out{a.wide}_n{a.wide_n}"
    t = Trainer(gpu, a.wide, a.wide, a.wide_n)
    med = time_steps(t, key, a.warmup, a.wide_steps)
    with torch.no_grad():
        w = t.model.weight  # (out, in)
        g = torch.randn(a.wide_n, a.wide, device=gpu)  # a stand-in for dL/dy (n, out)
        check_gemm("x @ W.T", t.x, w.t(), t.x @ w.t())
        check_gemm("g.T @ x", g.t(), t.x, g.t() @ t.x)
        for _ in range(a.warmup):
            t.x @ w.t()
        fwd = median_seconds(lambda: t.x @ w.t(), t.device, a.wide_steps)
        for _ in range(a.warmup):
            g.t() @ t.x
        wgrad = median_seconds(lambda: g.t() @ t.x, t.device, a.wide_steps)
    result(key, med, a.wide_steps, gemm_ms=f"{1e3 * (fwd + wgrad):.5f}",
           gemm_share=f"{(fwd + wgrad) / med:.3f}")
    result(f"wide_gemms_gpu_fp32_in{a.wide}_out{a.wide}_n{a.wide_n}", fwd + wgrad, a.wide_steps,
           gemm_fwd_ms=f"{1e3 * fwd:.5f}", gemm_wgrad_ms=f"{1e3 * wgrad:.5f}")


def time_mlp_gemms(t, dtype, layers, warmup, steps):
    """The MLP step's GEMMs alone in dtype: forward x @ W.T, input gradient g @ W, weight gradient g.T @ x,
    each timed once; the step runs `layers` of the first and last, layers - 1 of the second. Returns the
    weighted sum in seconds and the three medians as result fields, with a fourth not summed: the forward
    with its bias (F.linear), to see what the bias costs."""
    with torch.no_grad():
        x, w, bias = t.x.to(dtype), t.model[0].weight.to(dtype), t.model[0].bias.to(dtype)
        g = torch.randn(x.shape[0], w.shape[0], device=x.device).to(dtype)
        ms = []
        for a, b in ((x, w.t()), (g, w), (g.t(), x)):
            ms.append(1e3 * median_seconds(lambda: a @ b, t.device, steps, warmup=warmup))
        ms.append(1e3 * median_seconds(lambda: torch.nn.functional.linear(x, w, bias), t.device, steps, warmup=warmup))
    fields = {f"gemm_{k}_ms": f"{v:.5f}" for k, v in zip(("fwd", "dgrad", "wgrad", "fwd_bias"), ms)}
    return 1e-3 * (layers * (ms[0] + ms[2]) + (layers - 1) * ms[1]), fields


def work_mlp(a, gpu):
    for name, tf32, amp in (("fp32", False, None), ("tf32", True, None), ("bf16", False, torch.bfloat16)):
        if name not in a.mlp_modes.split(","):
            continue
        torch.backends.cuda.matmul.allow_tf32 = tf32
        key = f"mlp_gpu_{name}_w{a.mlp_width}_l{a.mlp_layers}_n{a.mlp_n}"
        t = Trainer(gpu, a.mlp_width, a.mlp_width, a.mlp_n)
        layers = [m for _ in range(a.mlp_layers) for m in (torch.nn.Linear(a.mlp_width, a.mlp_width), torch.nn.ReLU())]
        t.model = torch.nn.Sequential(*layers[:-1]).to(gpu)
        t.optimizer = torch.optim.SGD(t.model.parameters(), lr=0.01)
        t.amp = amp
        result(key, time_steps(t, key, a.warmup, a.mlp_steps), a.mlp_steps)
        gemms, fields = time_mlp_gemms(t, amp or torch.float32, a.mlp_layers, a.warmup, a.mlp_steps)
        result(f"mlp_gemms_gpu_{name}_w{a.mlp_width}_l{a.mlp_layers}_n{a.mlp_n}", gemms, a.mlp_steps, **fields)
        del t
    torch.backends.cuda.matmul.allow_tf32 = False


def work_cpu_seed(a):
    threads = torch.get_num_threads()
    torch.set_num_threads(a.cpu_seed_threads)
    nt = torch.get_num_threads()
    cpu = torch.device("cpu")
    mib = min(a.copy_mib, 256)
    bw = copy_bandwidth(cpu, mib, f"copy_cpu_t{nt}_{mib}MiB")
    key = f"seed_cpu_t{nt}_in{a.n_in}_out{a.out}_n{a.n}"
    t = Trainer(cpu, a.n_in, a.out, a.n)
    med = time_steps(t, key, 1, a.cpu_seed_steps)
    del t
    result(key, med, a.cpu_seed_steps, floor_ms=f"{2e3 * a.n * a.n_in * 4 / bw:.4f}")
    torch.set_num_threads(threads)


def work_first_step(a, gpu):
    t0 = time.perf_counter()
    t = Trainer(gpu, a.n_in, a.out, a.n)  # first use of the GPU: context, model, data
    torch.cuda.synchronize(gpu)  # model and data are on the GPU, all queued work done
    start = time.perf_counter()
    t.step()
    torch.cuda.synchronize(gpu)
    first = time.perf_counter() - start
    loss = t.loss_value()
    if not math.isfinite(loss):
        sys.exit("check failed: the first step's loss is finite")
    key = f"first_step_gpu_in{a.n_in}_out{a.out}_n{a.n}"
    print(f"# {key}: setup (GPU start-up, model, data) {1e3 * (start - t0):.1f} ms, not counted; "
          f"loss {loss:.6g}", flush=True)
    result(key, first, 1, setup_ms=f"{1e3 * (start - t0):.1f}")


def main():
    p = argparse.ArgumentParser(
        description="benchmark: training steps (zero_grad, forward, MSELoss, backward, SGD step, "
                    "synchronise) of nn.Linear models with PyTorch")
    p.add_argument("--work", default=None,
                   help="comma-separated: seed,tiny,wide,cpu_seed (default), mlp, or first_step alone")
    p.add_argument("--first-step", action="store_true", help="the same as --work first_step")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="the GPU (cuda, cuda:N); cpu skips the GPU workloads")
    p.add_argument("--in", dest="n_in", type=int, default=100000, help="seed model: in_features")
    p.add_argument("--out", type=int, default=10, help="seed model: out_features")
    p.add_argument("--n", type=int, default=10000, help="seed model: examples per step")
    p.add_argument("--wide", type=int, default=1024, help="wide model: Linear(wide, wide)")
    p.add_argument("--wide-n", type=int, default=4096, help="wide model: examples per step")
    p.add_argument("--copy-mib", type=int, default=1024, help="MiB cloned for the copy bandwidth")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before each timing")
    p.add_argument("--steps", type=int, default=50, help="timed seed steps on the GPU")
    p.add_argument("--tiny-steps", type=int, default=2000, help="timed tiny steps on the GPU")
    p.add_argument("--cpu-tiny-steps", type=int, default=20000, help="timed tiny steps on the CPU")
    p.add_argument("--wide-steps", type=int, default=200, help="timed wide steps (and GEMMs)")
    p.add_argument("--cpu-seed-steps", type=int, default=5, help="timed seed steps on the CPU")
    p.add_argument("--tiny-threads", type=int, default=1, help="CPU threads for the tiny step")
    p.add_argument("--cpu-seed-threads", type=int, default=2, help="CPU threads for the seed step")
    p.add_argument("--mlp-width", type=int, default=4096, help="MLP: width of each Linear")
    p.add_argument("--mlp-layers", type=int, default=4, help="MLP: Linear layers")
    p.add_argument("--mlp-n", type=int, default=8192, help="MLP: examples per step")
    p.add_argument("--mlp-steps", type=int, default=20, help="timed steps of the MLP, each mode")
    p.add_argument("--mlp-modes", default="fp32,tf32,bf16", help="the MLP's modes, comma-separated")
    a = p.parse_args()
    works = [w for w in (a.work or "seed,tiny,wide,cpu_seed").split(",") if w]
    if a.first_step:
        works = ["first_step"] + (works if a.work else [])
    bad = [w for w in works if w not in WORKS]
    if bad:
        p.error(f"unknown workload(s) {', '.join(bad)} in --work ({', '.join(WORKS)})")
    if "first_step" in works and len(set(works)) > 1:
        p.error("first_step runs alone, in a fresh process")
    for name in ("n_in", "out", "n", "wide", "wide_n", "copy_mib", "warmup", "steps", "tiny_steps",
                 "cpu_tiny_steps", "wide_steps", "cpu_seed_steps", "tiny_threads",
                 "cpu_seed_threads", "mlp_width", "mlp_layers", "mlp_n", "mlp_steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-').replace('n-in', 'in')} must be >= 1")
    try:
        device = torch.device(a.device)
        if device.type == "cuda" and (not torch.cuda.is_available()
                                      or (device.index or 0) >= torch.cuda.device_count()):
            raise RuntimeError(f"{a.device} is not available")
    except RuntimeError as e:
        p.error(f"bad --device: {e}")
    gpu = device if device.type == "cuda" else None
    torch.manual_seed(0)

    if works != ["first_step"]:
        print(f"# torch {torch.__version__}, {os.cpu_count()} CPUs", flush=True)
        if gpu is not None:
            print(f"# gpu: {gpu} ({torch.cuda.get_device_name(gpu)})", flush=True)
    if gpu is None and any(w in works for w in ("seed", "wide", "first_step")):
        print("# no GPU rows for seed/wide/first_step (no CUDA device)", flush=True)
    if "first_step" in works and gpu is not None:
        work_first_step(a, gpu)
    if "seed" in works and gpu is not None:
        work_seed(a, gpu)
    if "tiny" in works:
        work_tiny(a, gpu)
    if "wide" in works and gpu is not None:
        work_wide(a, gpu)
    if "cpu_seed" in works:
        work_cpu_seed(a)
    if "mlp" in works and gpu is not None:
        work_mlp(a, gpu)


if __name__ == "__main__":
    main()
