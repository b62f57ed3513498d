#!/usr/bin/env bash
# Training-step benchmarks of issue 6, cgrad and PyTorch side by side on this machine in one run,
# and a table:   work | cgrad | PyTorch | ratio (cgrad/PyTorch) | goal | floor
#   seed      Linear(100000, 10), n=10000, GPU; floor 2 x bytes(X) / device copy bandwidth
#   tiny      Linear(10, 1), n=5: GPU eager, GPU CUDA graph (capture + replay), CPU at 1 thread
#   wide      Linear(1024, 1024), n=4096, true fp32, GPU; the GEMMs' share of the step
#   cpu_seed  the seed step on the CPU at 2 threads (floor: X read twice at the CPU copy bandwidth)
#   first     the first GPU step of a fresh process (--first-runs processes per side, median)
# Each workload runs as its own process: build/bench_train_step, then bench/bench_train_step.py;
# every step is zero_grad, forward, MSELoss, backward, SGD(lr=0.01) step, device synchronisation.
# Goals (issue 6): seed GPU <= 0.55x PyTorch, tiny GPU < 25 us, tiny CPU < 3 us, wide <= 0.80x,
# first step < 20 ms, CPU seed at 2 threads <= 1.0x. About 2 minutes on an H100 machine.
# It builds nothing: configure and build first (cmake -S . -B build && cmake --build build -j).
# The table goes to $OUT/step_bench.txt and the raw output to $OUT/step_bench_raw.txt when OUT is
# set. Without a GPU the GPU rows are skipped; without PyTorch the PyTorch column says so.
#
# usage: bench/run_step_benchmarks.sh [--build DIR] [--device D] [--python PY] [--quick]
#                                     [--first-runs N] [--cpu-seed-steps N] [--no-torch]
#   --python: interpreter for the PyTorch script (default: python3 if it has torch, else
#             /usr/bin/python3 if that has)
#   --quick: small sizes and few steps (a smoke test for a CPU-only machine; times mean little)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
device="" python="" quick=0 first_runs=3 cpu_seed_steps=5 use_torch=1
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
    case $1 in
        --help|-h) usage; exit 0 ;;
        --quick) quick=1; shift; continue ;;
        --no-torch) use_torch=0; shift; continue ;;
        --build|--device|--python|--first-runs|--cpu-seed-steps)
            [ $# -ge 2 ] || { echo "error: $1 needs a value" >&2; usage >&2; exit 2; } ;;
        *) echo "error: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
    esac
    case $1 in
        --build) build=$2 ;; --device) device=$2 ;; --python) python=$2 ;;
        --first-runs) first_runs=$2 ;; --cpu-seed-steps) cpu_seed_steps=$2 ;;
    esac
    shift 2
done
for v in "$first_runs" "$cpu_seed_steps"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "error: expected a count >= 1, got '$v'" >&2; exit 2; }
done
prog=$build/bench_train_step
if [ ! -x "$prog" ]; then
    echo "error: $prog not found: build first (cmake -S . -B build && cmake --build build -j)" >&2
    exit 2
fi

if [ "$quick" -eq 1 ]; then
    sizes=(--in 20000 --n 2000 --wide 256 --wide-n 512 --copy-mib 64 --warmup 3 --steps 10
           --tiny-steps 200 --cpu-tiny-steps 2000 --wide-steps 20)
    [ "$first_runs" -gt 1 ] && first_runs=1
    cpu_seed_steps=3
else
    sizes=()
fi
sizes+=(--cpu-seed-steps "$cpu_seed_steps")
dev_flag=()
[ -n "$device" ] && dev_flag=(--device "$device")

torch_ok=0
if [ "$use_torch" -eq 1 ]; then
    for py in ${python:-python3 /usr/bin/python3}; do
        if "$py" -c 'import torch' >/dev/null 2>&1; then python=$py torch_ok=1; break; fi
    done
    [ "$torch_ok" -eq 1 ] || echo "# PyTorch not available (${python:-python3, /usr/bin/python3}: no torch)"
fi

source "$root/bench/bench_lib.sh"

start=$SECONDS
for work in seed tiny wide cpu_seed; do
    run "$prog" --work "$work" "${sizes[@]}" "${dev_flag[@]}"
    [ "$torch_ok" -eq 1 ] && run "$python" "$root/bench/bench_train_step.py" --work "$work" "${sizes[@]}" "${dev_flag[@]}"
done
# The first step: a fresh process each time, the two sides alternating.
for ((i = 1; i <= first_runs; i++)); do
    run "$prog" --first-step "${sizes[@]}" "${dev_flag[@]}"
    [ "$torch_ok" -eq 1 ] && run "$python" "$root/bench/bench_train_step.py" --first-step "${sizes[@]}" "${dev_flag[@]}"
done
elapsed=$((SECONDS - start))

# Join the `result work=... impl=...` lines by work key (several lines of one key: the median).
table=$(awk -v torch_ok="$torch_ok" '
    function field(name,   i, kv) {
        for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
        return ""
    }
    function median(w, impl,   n, i, j, v, tmp) {
        n = cnt[w, impl]
        for (i = 1; i <= n; i++) v[i] = val[w, impl, i]
        for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { tmp = v[j]; v[j] = v[j - 1]; v[j - 1] = tmp }
        return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    function fmt(ms) {
        if (ms >= 1000) return sprintf("%.3f s", ms / 1000)
        if (ms >= 1) return sprintf("%.3f ms", ms)
        if (ms >= 0.1) return sprintf("%.1f us", ms * 1000)
        return sprintf("%.2f us", ms * 1000)
    }
    $1 == "result" {
        w = field("work"); impl = field("impl")
        if (!(w in seen)) { seen[w] = 1; order[++nw] = w }
        val[w, impl, ++cnt[w, impl]] = field("median_ms") + 0
        if (field("gbps") != "") bw[w, impl] = field("gbps")
        if (impl == "cgrad" && field("floor_ms") != "") fl[w] = field("floor_ms")
        if (field("gemm_ms") != "") gemm[w, impl] = field("gemm_ms")
        if (field("setup_ms") != "") setup[w, impl] = setup[w, impl] (setup[w, impl] == "" ? "" : ", ") field("setup_ms")
    }
    function has(w, impl) { return cnt[w, impl] > 0 }
    function show(w, impl,   s) {
        if (!has(w, impl)) return (impl == "pytorch" && !torch_ok) ? "no PyTorch" : "-"
        s = fmt(median(w, impl))
        if ((w, impl) in bw) s = s " (" bw[w, impl] " GB/s)"
        if (cnt[w, impl] > 1) s = s " [" cnt[w, impl] " runs]"
        return s
    }
    # goal: "<= 0.55x" (ratio) or "< 25 us" (our time), with the verdict
    function goal(w, r,   kind, lim, text, ok) {
        if (w ~ /^seed_gpu_/) { kind = "ratio"; lim = 0.55; text = "<= 0.55x" }
        else if (w ~ /^tiny_gpu_/) { kind = "abs"; lim = 0.025; text = "< 25 us" }
        else if (w ~ /^tiny_cpu_/) { kind = "abs"; lim = 0.003; text = "< 3 us" }
        else if (w ~ /^wide_gpu_/) { kind = "ratio"; lim = 0.80; text = "<= 0.80x" }
        else if (w ~ /^first_step_gpu_/) { kind = "abs"; lim = 20; text = "< 20 ms" }
        else if (w ~ /^seed_cpu_/) { kind = "ratio"; lim = 1.0; text = "<= 1.0x" }
        else return "-"
        if (kind == "ratio") {
            if (r == "-") return text ": ?"
            ok = r + 0 <= lim
        } else {
            if (!has(w, "cgrad")) return text ": ?"
            ok = median(w, "cgrad") < lim
        }
        return text (ok ? ": met" : ": MISSED")
    }
    function floor_of(w) {
        if (w in fl) return fmt(fl[w])
        if ((w, "cgrad") in gemm)
            return sprintf("GEMMs %s = %.0f%% of step", fmt(gemm[w, "cgrad"]), 100 * gemm[w, "cgrad"] / median(w, "cgrad"))
        return "-"
    }
    END {
        printf "%-42s | %-26s | %-26s | %-7s | %-16s | %s\n", "work", "cgrad", "PyTorch", "ratio", "goal", "floor"
        for (i = 1; i <= nw; i++) {
            w = order[i]
            r = (has(w, "cgrad") && has(w, "pytorch") && median(w, "pytorch") > 0) ? sprintf("%.3f", median(w, "cgrad") / median(w, "pytorch")) : "-"
            printf "%-42s | %-26s | %-26s | %-7s | %-16s | %s\n", w, show(w, "cgrad"), show(w, "pytorch"), r, goal(w, r), floor_of(w)
        }
        for (i = 1; i <= nw; i++) {
            w = order[i]
            if ((w, "cgrad") in gemm && (w, "pytorch") in gemm)
                printf "# %s: GEMMs (forward + weight gradient, timed alone) %s of a %s step (%.0f%%); PyTorch %s of %s (%.0f%%)\n", w,
                    fmt(gemm[w, "cgrad"]), fmt(median(w, "cgrad")), 100 * gemm[w, "cgrad"] / median(w, "cgrad"),
                    fmt(gemm[w, "pytorch"]), fmt(median(w, "pytorch")), 100 * gemm[w, "pytorch"] / median(w, "pytorch")
            if ((w, "cgrad") in setup || (w, "pytorch") in setup)
                printf "# %s: set-up before the clock (GPU start-up, model, data; ms per process): cgrad %s; PyTorch %s\n", w,
                    ((w, "cgrad") in setup) ? setup[w, "cgrad"] : "-", ((w, "pytorch") in setup) ? setup[w, "pytorch"] : "-"
        }
    }' "$raw")

header="# $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs; benchmarks took ${elapsed} s$([ "$quick" -eq 1 ] && echo ' (--quick: small sizes)')
# ratio = cgrad time / PyTorch time (< 1: cgrad faster); step = zero_grad, forward, MSELoss,
# backward, SGD step, synchronise; median of the timed steps (first step: median over processes)
# floor: 2 x bytes(X) / copy bandwidth measured by cgrad (copy_* rows: read + write bytes / time)"
notes=$(grep -h '^# \(gpu\|cpu\|torch\|no GPU\|PyTorch\|FAILED\)' "$raw" | sort -u)
publish step_bench "$header${notes:+
$notes}
$table"
exit $status
