#!/usr/bin/env bash
# Runs the cgrad benchmarks and the PyTorch scripts that do the same work, on this machine, one
# after the other, and prints a table:  work | cgrad | PyTorch | ratio (cgrad / PyTorch time) | floor
# It builds nothing: configure and build first (cmake -S . -B build && cmake --build build).
# The table is also written to $OUT/bench.txt (and the raw output to $OUT/bench_raw.txt) when
# OUT is set. Without PyTorch (python3 lacking torch) the PyTorch column says so.
#
# usage: bench/run_benchmarks.sh [--build DIR] [--device D] [--size N] [--cpu-size N]
#                                [--threads N] [--n N] [--repeats N] [--runs N] [--copy-mib N]
#                                [--python PY] [--quick]
#   defaults: GPU matmul n 16000, CPU matmul n 4000 on all cores (nproc), n 1e7, copy 1 GiB
#   --python: the interpreter for the PyTorch scripts (default python3)
#   --quick: small sizes, for a CPU-only machine or CI.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
device="" size=16000 cpu_size=4000 threads=$(nproc) n=10000000 repeats=10 runs=50 copy_mib=0
python=python3
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
    case $1 in
        --help|-h) usage; exit 0 ;;
        --quick) size=512 cpu_size=512 n=1000000 repeats=3 runs=10 copy_mib=64; shift; continue ;;
        --build|--device|--size|--cpu-size|--threads|--n|--repeats|--runs|--copy-mib|--python)
            [ $# -ge 2 ] || { echo "error: $1 needs a value" >&2; usage >&2; exit 2; } ;;
        *) echo "error: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
    esac
    case $1 in
        --build) build=$2 ;; --device) device=$2 ;; --size) size=$2 ;; --cpu-size) cpu_size=$2 ;;
        --threads) threads=$2 ;; --n) n=$2 ;; --repeats) repeats=$2 ;; --runs) runs=$2 ;;
        --copy-mib) copy_mib=$2 ;; --python) python=$2 ;;
    esac
    shift 2
done
for prog in bench_matmul bench_elementwise; do
    if [ ! -x "$build/$prog" ]; then
        echo "error: $build/$prog not found: build first (cmake -S . -B build && cmake --build build)" >&2
        exit 2
    fi
done

dev_flag=()
[ -n "$device" ] && dev_flag=(--device "$device")
matmul_args=(--size "$size" --cpu-size "$cpu_size" --threads "$threads" --repeats "$repeats" "${dev_flag[@]}")
elem_args=(--n "$n" --threads "$threads" --runs "$runs" --copy-mib "$copy_mib" "${dev_flag[@]}")

source "$root/bench/bench_lib.sh"

run "$build/bench_matmul" "${matmul_args[@]}"
run "$build/bench_elementwise" "${elem_args[@]}"

if "$python" -c 'import torch' >/dev/null 2>&1; then
    torch_ok=1
    run "$python" "$root/bench/bench_matmul.py" "${matmul_args[@]}"
    run "$python" "$root/bench/bench_elementwise.py" "${elem_args[@]}"
else
    torch_ok=0
    echo "# PyTorch not available ($python cannot import torch)"
fi

# Join the `result work=... impl=...` lines by work key.
table=$(awk -v torch_ok="$torch_ok" -f "$root/bench/results.awk" -f /dev/stdin "$raw" <<'AWK'
    END {
        printf "%-30s | %-24s | %-24s | %-7s | %s\n", "work", "cgrad", "PyTorch", "ratio", "floor"
        for (i = 1; i <= nw; i++) {
            w = order[i]
            f = (w in fl) ? sprintf("%.4f ms", fl[w]) : "-"
            printf "%-30s | %-24s | %-24s | %-7s | %s\n", w, show(w, "cgrad"), show(w, "pytorch"), ratio(w), f
        }
    }
AWK
)

header="# $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ); ratio = cgrad time / PyTorch time (< 1: cgrad faster)
# floor = 40 bytes/element / copy bandwidth measured by cgrad (cos2sin2 rows)"
publish bench "$header
$(grep -h '^# \(gpu\|cpu\|device\|torch\)' "$raw" | sort -u)
$table"
exit $status
