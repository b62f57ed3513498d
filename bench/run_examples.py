#!/usr/bin/env python3
"""Runs the pytorch/examples ports (examples/<program>.c) beside their PyTorch sides (bench/<program>.py)
and prints the comparison issue #31 asks for, as a markdown table last.

For each program and seed, the two sides run one after the other, the order swapped every seed
(cgrad first on odd runs, PyTorch first on even ones), so that both see the same clocks. Each run's
last line is its result:

    result work=<w> impl=cgrad|pytorch seed=<s> <metric>=<v> <rate>=<per second>

Per program: each side's mean metric and seed-to-seed standard deviation s, the difference of the
means against what the issue allows (the larger of 2 * sqrt((s_cgrad^2 + s_torch^2) / n) and a floor:
0.3 accuracy points, or 2% of PyTorch's mean for a perplexity, 1% for a loss), and the median of each
side's throughputs with their ratio. With --device cpu both sides get --threads CPU threads
(OMP_NUM_THREADS, which OpenMP, OpenBLAS and PyTorch all honour) and each program its shorter CPU
configuration: throughput only, no metric check (a few hundred steps say nothing of accuracy).

Usage: python3 bench/run_examples.py [--build build] [--device cuda|cpu] [--seeds 1,2,3]
           [--only mnist,vae,...] [--threads 16] [--python python3] [--log FILE]
Exit status: 0 when every compared metric is within its bound, 1 otherwise (a run that failed counts)."""
import argparse
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Program:
    """One port. `args` is the configuration both sides share ({device} and {seed} filled in);
    `cpu_args` replaces it for CPU throughput runs. `floor` is ("points", x) or ("relative", x); a
    program whose check is elsewhere (dcgan's replay test) has metric None: throughput only."""

    def __init__(self, c, py, args, cpu_args, metric, floor, higher_is_better):
        self.c, self.py, self.args, self.cpu_args = c, py, args, cpu_args
        self.metric, self.floor, self.higher_is_better = metric, floor, higher_is_better


PROGRAMS = {
    # upstream's defaults (14 epochs of batch 64, Adadelta 1.0, StepLR 0.7)
    "mnist": Program("mnist", "mnist.py", "--device {device} --seed {seed} --log-interval 100",
                     "--device cpu --seed {seed} --epochs 1 --limit 6400 --log-interval 100",
                     "test_acc", ("points", 0.3), True),
    # upstream's defaults (10 epochs of batch 128, Adam 1e-3)
    "vae": Program("vae", "vae.py", "--device {device} --seed {seed}",
                   "--device cpu --seed {seed} --epochs 1 --limit 12800",
                   "test_loss", ("relative", 0.01), False),
    # models/residual.c and models/resnet.c through train_fashion_mnist, batch 128: the residual network with
    # Adam 1e-3 (with BatchNorm it diverges at SGD 0.05 momentum 0.9 on both sides for some seeds), ResNet-18
    # with SGD 0.05 momentum 0.9; cuDNN picks its algorithms as PyTorch's default does (--nondeterministic:
    # cgrad's default takes deterministic ones only, about 10% slower for ResNet-18's weight gradients)
    "residual": Program("train_fashion_mnist", "bench_fashion_mnist.py",
                        "--model residual --optimizer adam --lr 1e-3 --epochs 5 --nondeterministic "
                        "--device {device} --seed {seed}",
                        "--model residual --optimizer adam --lr 1e-3 --epochs 1 --limit 12800 "
                        "--device cpu --seed {seed}", "test_acc", ("points", 0.3), True),
    "resnet18": Program("train_fashion_mnist", "bench_fashion_mnist.py",
                        "--model resnet18 --optimizer sgd --lr 0.05 --momentum 0.9 --epochs 5 --nondeterministic "
                        "--device {device} --seed {seed}",
                        "--model resnet18 --optimizer sgd --lr 0.05 --momentum 0.9 --epochs 1 --limit 2560 "
                        "--test-limit 1000 --device cpu --seed {seed}", "test_acc", ("points", 0.3), True),
    # upstream's sizes (batch 64, nz 100, ngf = ndf = 64) at 32x32, 5 epochs; its check is the 50-step replay
    "dcgan": Program("dcgan", "dcgan.py", "--device {device} --seed {seed} --niter 5",
                     "--device cpu --seed {seed} --niter 1 --limit 3200", None, None, None),
    # upstream's defaults (14 epochs of batch 64, Adadelta 0.1, StepLR 0.7): about 20-30 s a side on an H100
    "mnist_rnn": Program("mnist_rnn", "mnist_rnn.py", "--device {device} --seed {seed} --log-interval 100",
                         "--device cpu --seed {seed} --epochs 1 --limit 6400 --log-interval 100",
                         "test_acc", ("points", 0.3), True),
    # upstream's LSTM (2 x 200, batch 20, bptt 35, SGD lr 20, clip 0.25) on Shakespeare's characters: one epoch
    "word_language_model": Program("word_language_model", "word_language_model.py",
                                   "--device {device} --seed {seed} --bench",
                                   "--device cpu --seed {seed} --epochs 1 --max-batches 200 --limit 1000000",
                                   "val_ppl", ("relative", 0.02), False),
}

RESULT = re.compile(r"^result work=(\S+) impl=(\S+) seed=(\S+) (.*)$")


def run_side(cmd, env, log, workdir):
    """Runs one side in workdir (where a program writes its samples and checkpoints); returns its result
    fields (a dict) or None, with the output appended to log."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds = time.perf_counter() - start
    log.write(f"$ {shlex.join(cmd)}\n{proc.stdout}# exit {proc.returncode} after {seconds:.1f} s\n\n")
    log.flush()
    lines = [m for m in (RESULT.match(l) for l in proc.stdout.splitlines()) if m]
    if proc.returncode != 0 or not lines:
        print(f"FAILED ({proc.returncode}): {shlex.join(cmd)}", file=sys.stderr, flush=True)
        return None
    fields = dict(kv.split("=", 1) for kv in lines[-1].group(4).split())
    fields["seconds"] = seconds
    print(f"  {lines[-1].group(0)}  ({seconds:.1f} s)", flush=True)
    return fields


def commands(name, p, args, seed):
    config = (p.cpu_args if args.device == "cpu" else p.args).format(device=args.device, seed=seed)
    c = [os.path.join(args.build, p.c)] + shlex.split(config)
    py = [args.python, os.path.join(ROOT, "bench", p.py)] + shlex.split(config)
    return c, py


def summarize(name, p, runs, device):
    """One table row (a list of cells) and whether the metric is within its bound."""
    c = [r for r in runs["cgrad"] if r]
    t = [r for r in runs["pytorch"] if r]
    rate_key = next((k for k in (c or t or [{}])[0] if k.endswith("_per_s")), None)
    cell = lambda v, fmt: format(v, fmt) if v is not None else "-"
    rc = statistics.median(float(r[rate_key]) for r in c) if c and rate_key else None
    rt = statistics.median(float(r[rate_key]) for r in t) if t and rate_key else None
    ratio = rc / rt if rc and rt else None
    rates = [cell(rc, ".0f"), cell(rt, ".0f"), cell(ratio, ".2f") + ("x" if ratio else "")]
    if device == "cpu" or p.metric is None or len(c) < 2 or len(t) < 2 or len(c) != len(runs["cgrad"]) or len(t) != len(runs["pytorch"]):
        ok = (device == "cpu" or p.metric is None) and len(c) == len(runs["cgrad"]) and len(t) == len(runs["pytorch"])
        return [name, p.metric or "-", "-", "-", "-", "-", "ok" if ok else "FAILED RUNS"] + rates, ok
    mc = [float(r[p.metric]) for r in c]
    mt = [float(r[p.metric]) for r in t]
    sc, st = statistics.stdev(mc), statistics.stdev(mt)
    n = min(len(mc), len(mt))
    kind, x = p.floor
    floor = x if kind == "points" else x * abs(statistics.mean(mt))
    bound = max(2 * math.sqrt((sc ** 2 + st ** 2) / n), floor)
    diff = statistics.mean(mc) - statistics.mean(mt)
    ok = abs(diff) <= bound
    row = [name, p.metric, f"{statistics.mean(mc):.2f} ± {sc:.2f}", f"{statistics.mean(mt):.2f} ± {st:.2f}",
           f"{diff:+.2f}", f"{bound:.2f}", "ok" if ok else "OUTSIDE"] + rates
    return row, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="the build folder with the programs")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--only", default=",".join(PROGRAMS), help="comma-separated programs: " + ", ".join(PROGRAMS))
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="CPU threads of both sides with --device cpu")
    ap.add_argument("--python", default=sys.executable, help="the Python with PyTorch (default: this one)")
    ap.add_argument("--log", default="run_examples.log", help="every run's full output")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    names = [n for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown or not seeds:
        ap.error(f"unknown programs {unknown} (known: {', '.join(PROGRAMS)})" if unknown else "--seeds is empty")
    env = dict(os.environ)
    if args.device == "cpu":
        env["OMP_NUM_THREADS"] = str(args.threads)
    args.build = os.path.abspath(args.build)
    rows, all_ok = [], True
    with open(args.log, "w") as log, tempfile.TemporaryDirectory(prefix="run_examples.") as workdir:
        for name in names:
            p = PROGRAMS[name]
            print(f"# {name}", flush=True)
            runs = {"cgrad": [], "pytorch": []}
            for i, seed in enumerate(seeds):
                c, py = commands(name, p, args, seed)
                order = [("cgrad", c), ("pytorch", py)] if i % 2 == 0 else [("pytorch", py), ("cgrad", c)]
                for side, cmd in order:
                    runs[side].append(run_side(cmd, env, log, workdir))
            row, ok = summarize(name, p, runs, args.device)
            rows.append(row)
            all_ok = all_ok and ok
    head = ["program", "metric", "cgrad mean ± s", "PyTorch mean ± s", "difference", "allowed", "",
            "cgrad /s", "PyTorch /s", "speed ratio"]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    threads = f", {args.threads} threads" if args.device == "cpu" else ""
    print(f"\n{when}, {args.device}{threads}, seeds {seeds}; throughput: the median run, each run its median epoch")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
