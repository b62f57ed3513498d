#!/usr/bin/env bash
# The data-parallel speed-up of the Linear(100000, 10) step (N = 10000, shards resident), measured
# R times: each run times the 1-GPU step (build/bench_data_parallel --gpus 1: eager and replayed
# from a CUDA graph), then the DDP step over N GPUs (mpirun -np N build/bench_ddp, replayed from a
# CUDA graph), and divides the faster 1-GPU time by the DDP time. Prints every run's times and
# speed-up, then their median, least and greatest. A single run moves by about +-0.02 between
# machines and runs (the GPUs' own speeds differ), so a claim about the speed-up rests on several.
# It builds nothing: configure and build first (cmake -S . -B build && cmake --build build -j).
# The report is also written to $OUT/linear_speedup.txt (raw output: _raw.txt) when OUT is set.
#
# usage: bench/run_linear_speedup.sh [--gpus N] [--runs R] [--steps S] [--build DIR] [--mpirun PATH]
#   --gpus: ranks of the DDP step (default 2)   --runs: runs (default 5)
#   --steps: timed steps of each timing (default 40; the median counts)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
gpus=2 runs=5 steps=40 mpirun=mpirun
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
    case $1 in
        --help|-h) usage; exit 0 ;;
        --gpus|--runs|--steps|--build|--mpirun)
            [ $# -ge 2 ] || { echo "error: $1 needs a value" >&2; usage >&2; exit 2; } ;;
        *) echo "error: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
    esac
    case $1 in
        --gpus) gpus=$2 ;; --runs) runs=$2 ;; --steps) steps=$2 ;; --build) build=$2 ;; --mpirun) mpirun=$2 ;;
    esac
    shift 2
done
for v in "$gpus" "$runs" "$steps"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "error: --gpus, --runs and --steps want a positive integer (got '$v')" >&2; exit 2; }
done
[ "$gpus" -ge 2 ] || { echo "error: --gpus wants at least 2 (got $gpus)" >&2; exit 2; }
for prog in bench_data_parallel bench_ddp; do
    [ -x "$build/$prog" ] || { echo "error: $build/$prog not found: build first" >&2; exit 2; }
done
command -v "$mpirun" >/dev/null 2>&1 || { echo "error: $mpirun not found" >&2; exit 2; }

export NCCL_NVLS_ENABLE=0
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
source "$root/bench/bench_lib.sh"

only_linear=(--seed-steps 0 --mlp-steps 0 --linear-steps "$steps")
key=linear100000x10_n10000
lines=()
for r in $(seq 1 "$runs"); do
    echo "# ---- run $r of $runs ----" | tee -a "$raw"
    run "$build/bench_data_parallel" --gpus 1 "${only_linear[@]}" || break
    run "$mpirun" -np "$gpus" --bind-to none -x NCCL_NVLS_ENABLE "$build/bench_ddp" "${only_linear[@]}" \
        --allreduce-runs 0 --local 0 || break
    # This run's times: the last result line of each key in the raw output.
    times=$(awk -v k="$key" -v n="$gpus" '
        $1 == "result" && $2 == "work=" k "_single_g1" { split($4, a, "="); e = a[2] }
        $1 == "result" && $2 == "work=" k "_singlegraph_g1" { split($4, a, "="); g = a[2] }
        $1 == "result" && $2 == "work=" k "_ddpgraph_g" n { split($4, a, "="); d = a[2] }
        END { b = (g != "" && g + 0 < e + 0) ? g : e
              if (b == "" || d == "" || d + 0 <= 0) exit 1
              printf "%.4f %.4f %.4f %.4f", e, g, d, b / d }' "$raw") || { echo "# run $r: a time is missing" | tee -a "$raw"; status=1; break; }
    lines+=("$times")
done

report=$(printf '%s\n' "${lines[@]}" | awk -v n="$gpus" '
    NF == 4 { printf "run %2d: 1 GPU %s ms (graph %s ms), DDP over %d GPUs (graph) %s ms: %.3fx\n", ++k, $1, $2, n, $3, $4
              s[k] = $4 }
    END {
        if (k == 0) { print "no complete run"; exit }
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (s[j] < s[i]) { x = s[i]; s[i] = s[j]; s[j] = x }
        m = k % 2 ? s[(k + 1) / 2] : (s[k / 2] + s[k / 2 + 1]) / 2
        printf "speed-up over %d runs: median %.3fx, least %.3fx, greatest %.3fx\n", k, m, s[1], s[k]
    }')
publish linear_speedup "# $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ): Linear(100000, 10), N = 10000, shards resident;
# speed-up = the faster 1-GPU step (eager or graph) / the DDP step over $gpus GPUs (graph)
$report"
exit $status
