#!/usr/bin/env python3
"""PyTorch side of bench/bench_data_parallel.c and bench/bench_ddp.c: the same training steps on
the same GPUs with nn.DataParallel (one process) and DistributedDataParallel (one process per GPU,
started with torch.multiprocessing.spawn, NCCL backend, init_method file://<a fresh temporary
file>, so no TCP port to race for; no torchrun), the 1-GPU step, and NCCL's all-reduce through
torch.distributed at the gradient size.

Workloads (SGD(lr=0.01), MSELoss, float32, TF32 off):
  seed    nn.Linear(10, 2), batch 64: the seed's nn.DataParallel(model, device_ids=[0, 1])
  linear  nn.Linear(100000, 10), N = 10000
  mlp     MLP 4096 -> 4096 x 4 hidden (ReLU) -> 4096, global batch 8192
Modes (the `work` key's suffix):
  single_g1      the plain model on the whole batch on cuda:0
  dp_gN          nn.DataParallel over cuda:0..N-1, the batch on cuda:0 (DataParallel scatters it
                 every step: it cannot take shards already on their GPUs; cgrad's dp rows for
                 linear and mlp use resident shards, so compare those with ddp too)
  ddp_gN         DDP, each rank its shard of the global batch made on its own GPU up front
  ddplocal_gN    the same model and local batch without DDP (the compute alone)
  allreduce_<bytes>B[_bucket<bytes>B]_gN
                 dist.all_reduce (AVG, in place) of the MLP's gradient size, as one call and in
                 DDP-bucket-sized calls; bus bandwidth 2 (n - 1) / n * bytes / time
Timing: warm-up steps, then the median of the steps; every step ends with a synchronisation of
each GPU it used; under DDP each rank times its own steps and per step the slowest rank counts.
Prints the same `result work=... impl=pytorch median_ms=...` lines as the C benchmarks, so
bench/run_dp_benchmarks.sh can put them side by side."""
import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on the shared machines


def parse_args():
    p = argparse.ArgumentParser(
        description="benchmark: data-parallel training steps with PyTorch (DataParallel, DDP) "
                    "against the 1-GPU step, and NCCL all-reduce bandwidth")
    p.add_argument("--gpus", type=int, default=0, help="GPUs 0..N-1 (0: every GPU)")
    p.add_argument("--modes", default="single,dp,ddp,allreduce",
                   help="comma-separated subset of single,dp,ddp,allreduce")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps before each timing")
    p.add_argument("--seed-steps", type=int, default=200,
                   help="timed steps of the seed Linear(10, 2), batch 64 (0 skips)")
    p.add_argument("--linear-steps", type=int, default=30, help="timed steps of Linear(in, 10) (0 skips)")
    p.add_argument("--linear-in", type=int, default=100000, help="in of Linear(in, 10)")
    p.add_argument("--linear-n", type=int, default=10000, help="examples per step of Linear(in, 10)")
    p.add_argument("--mlp-steps", type=int, default=15, help="timed steps of the MLP (0 skips)")
    p.add_argument("--mlp-width", type=int, default=4096, help="MLP width (input, hidden and output)")
    p.add_argument("--mlp-layers", type=int, default=4, help="MLP hidden layers")
    p.add_argument("--mlp-batch", type=int, default=8192, help="MLP global batch")
    p.add_argument("--local", type=int, default=1,
                   help="1: also time the model without DDP on each rank's local batch")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    p.add_argument("--allreduce-runs", type=int, default=20,
                   help="timed all-reduces of the MLP's gradient size (0 skips)")
    p.add_argument("--cpu-check", action="store_true",
                   help="smoke-test this script without GPUs: CPU tensors, gloo, --gpus processes "
                        "(the times mean nothing; keep the sizes small)")
    a = p.parse_args()
    modes = set(m for m in a.modes.split(",") if m)
    if not modes <= {"single", "dp", "ddp", "allreduce"}:
        p.error(f"--modes: unknown mode(s) {sorted(modes - {'single', 'dp', 'ddp', 'allreduce'})}")
    a.modes = modes
    for name in ("gpus", "warmup", "seed_steps", "linear_steps", "mlp_steps", "mlp_layers",
                 "allreduce_runs"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    for name in ("linear_in", "linear_n", "mlp_width", "mlp_batch"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.bucket_mb <= 0:
        p.error("--bucket-mb must be > 0")
    return a


# ---- workloads ------------------------------------------------------------------------------------
def workloads(a):
    """(name, layer sizes, global batch, timed steps), named as in the C benchmarks."""
    w = []
    if a.seed_steps > 0:
        w.append(("seed_linear10x2_b64", [10, 2], 64, a.seed_steps))
    if a.linear_steps > 0:
        w.append((f"linear{a.linear_in}x10_n{a.linear_n}", [a.linear_in, 10], a.linear_n, a.linear_steps))
    if a.mlp_steps > 0:
        w.append((mlp_name(a), mlp_sizes(a), a.mlp_batch, a.mlp_steps))
    return w


def mlp_sizes(a):
    return [a.mlp_width] * (a.mlp_layers + 2)


def mlp_name(a):
    return f"mlp{a.mlp_width}x{a.mlp_layers}_b{a.mlp_batch}"


def make_model(torch, sizes):
    nn = torch.nn
    torch.manual_seed(0)
    if len(sizes) == 2:
        return nn.Linear(sizes[0], sizes[1])
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def sync(torch, devices):
    for d in devices:
        if torch.device(d).type == "cuda":
            torch.cuda.synchronize(d)


def timed_steps(torch, step, devices, warmup, steps):
    """Per-step seconds: warm-up, then `steps` steps, each ending with every device synchronised."""
    for _ in range(warmup):
        step()
    sync(torch, devices)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync(torch, devices)  # the GPUs run asynchronously: wait before reading the clock
        times.append(time.perf_counter() - t0)
    return times


def make_step(torch, model, opt, x, t):
    loss_fn = torch.nn.MSELoss()

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), t)
        loss.backward()
        opt.step()
        return loss
    return step


def result(key, t, runs, extra=""):
    print(f"result work={key} impl=pytorch median_ms={1e3 * t:.4f}{extra} runs={runs}", flush=True)


# ---- one process: 1 GPU and nn.DataParallel -----------------------------------------------------------
def run_one_process(torch, a, n):
    nn = torch.nn
    dev0 = torch.device("cpu") if a.cpu_check else torch.device("cuda", 0)
    for name, sizes, batch, steps in workloads(a):
        torch.manual_seed(1)
        x = torch.randn(batch, sizes[0], device=dev0)  # never time on zeros
        t = torch.randn(batch, sizes[-1], device=dev0)
        print(f"# {name}: batch {batch}", flush=True)
        if "single" in a.modes:
            model = make_model(torch, sizes).to(dev0)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            step = make_step(torch, model, opt, x, t)
            loss = float(step())
            if loss != loss:
                sys.exit(f"check failed: {name}: the 1-GPU loss is NaN")
            result(f"{name}_single_g1", statistics.median(timed_steps(torch, step, [dev0], a.warmup, steps)), steps)
            del model, opt, step
        if "dp" in a.modes and n >= 2:
            # model = nn.DataParallel(model, device_ids=[0, ..., n-1]).cuda(), the batch on cuda:0
            model = nn.DataParallel(make_model(torch, sizes).to(dev0), device_ids=None if a.cpu_check else list(range(n)))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            step = make_step(torch, model, opt, x, t)
            loss = float(step())
            if loss != loss:
                sys.exit(f"check failed: {name}: the DataParallel loss is NaN")
            result(f"{name}_dp_g{n}",
                   statistics.median(timed_steps(torch, step, [dev0] if a.cpu_check else list(range(n)),
                                                 a.warmup, steps)), steps)
            del model, opt, step
        del x, t
        torch.cuda.empty_cache()


# ---- several processes: DDP and the all-reduce ----------------------------------------------------------
def slowest_median(torch, dist, times, device):
    """Per step the slowest rank's time, then the median over the steps (every rank gets it)."""
    v = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(v, op=dist.ReduceOp.MAX)
    return statistics.median(v.tolist())


def ddp_worker(rank, world, a, store):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.backends.cuda.matmul.allow_tf32 = False
    init = f"file://{store}"
    if a.cpu_check:
        torch.set_num_threads(1)
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    else:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world, device_id=device)
    # gloo has no AVG: the check sums instead (same traffic)
    avg = dist.ReduceOp.SUM if a.cpu_check else dist.ReduceOp.AVG
    try:
        if "ddp" in a.modes:
            for name, sizes, batch, steps in workloads(a):
                if batch % world:
                    if rank == 0:
                        print(f"# {name}: batch {batch} does not split evenly over {world} ranks: skipped", flush=True)
                    continue
                local = batch // world
                torch.manual_seed(100 + rank)  # each rank its own shard, made on its GPU
                x = torch.randn(local, sizes[0], device=device)
                t = torch.randn(local, sizes[-1], device=device)
                if a.local:
                    model = make_model(torch, sizes).to(device)
                    opt = torch.optim.SGD(model.parameters(), lr=0.01)
                    times = timed_steps(torch, make_step(torch, model, opt, x, t), [device], a.warmup, steps)
                    m = slowest_median(torch, dist, times, device)
                    if rank == 0:
                        result(f"{name}_ddplocal_g{world}", m, steps)
                    del model, opt
                model = DDP(make_model(torch, sizes).to(device), device_ids=None if a.cpu_check else [rank],
                            bucket_cap_mb=a.bucket_mb)
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
                step = make_step(torch, model, opt, x, t)
                loss = float(step())
                if loss != loss:
                    sys.exit(f"check failed: {name}: the DDP loss is NaN")
                times = timed_steps(torch, step, [device], a.warmup, steps)
                m = slowest_median(torch, dist, times, device)
                if rank == 0:
                    result(f"{name}_ddp_g{world}", m, steps)
                del model, opt, step, x, t
                if not a.cpu_check:
                    torch.cuda.empty_cache()
        if "allreduce" in a.modes and a.allreduce_runs > 0 and world > 1:
            sizes = mlp_sizes(a)
            count = sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))
            nbytes = 4 * count
            chunk = int(a.bucket_mb * 1048576.0) // 4
            if rank == 0:
                print(f"# all-reduce: {nbytes} bytes (the gradients of {mlp_name(a)}), NCCL, average in place",
                      flush=True)
            buf = torch.full((count,), 0.0115, device=device)  # not zeros
            for c in (count, chunk):
                c = min(c, count)
                times = []
                for i in range(-3, a.allreduce_runs):
                    sync(torch, [device])
                    dist.barrier(**({} if a.cpu_check else {"device_ids": [rank]}))  # start together
                    sync(torch, [device])
                    t0 = time.perf_counter()
                    for at in range(0, count, c):
                        dist.all_reduce(buf[at:at + c], op=avg)
                    sync(torch, [device])
                    if i >= 0:
                        times.append(time.perf_counter() - t0)
                m = slowest_median(torch, dist, times, device)
                if rank == 0:
                    busbw = 2.0 * (world - 1) / world * nbytes / m * 1e-9
                    key = f"allreduce_{nbytes}B_g{world}" if c == count else f"allreduce_{nbytes}B_bucket{4 * c}B_g{world}"
                    result(key, m, a.allreduce_runs, f" busbw_gbs={busbw:.1f}")
                if c == count and chunk >= count:
                    break  # one bucket holds it all: the bucketed run is the same call
            del buf
    finally:
        dist.destroy_process_group()


def main():
    a = parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("# PyTorch not available", flush=True)
        sys.exit(3)
    if a.cpu_check:
        n = a.gpus or 2
        print(f"# torch {torch.__version__}, CPU check with {n} processes: the times mean nothing", flush=True)
    else:
        if not torch.cuda.is_available():
            print("# no GPU: nothing to run", flush=True)
            return
        count = torch.cuda.device_count()
        n = a.gpus or count
        if n > count:
            sys.exit(f"bench_data_parallel.py: --gpus {n}, but this machine has {count} GPUs")
        print(f"# torch {torch.__version__}, {n} GPUs; NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}",
              flush=True)
        for i in range(n):
            print(f"# gpu: cuda:{i} ({torch.cuda.get_device_name(i)})", flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False  # true fp32, as cgrad by default
    if a.modes & {"single", "dp"}:
        run_one_process(torch, a, n)
    if a.modes & {"ddp", "allreduce"} and n >= 2:
        with tempfile.TemporaryDirectory() as tmp:  # the rendezvous file, new for this run
            mp.spawn(ddp_worker, args=(n, a, os.path.join(tmp, "store")), nprocs=n, join=True)


if __name__ == "__main__":
    main()
