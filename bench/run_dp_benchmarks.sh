#!/usr/bin/env bash
# Runs the data-parallel benchmarks, cgrad and PyTorch, on this machine's GPUs, and prints a table:
#   work | cgrad | PyTorch | ratio (cgrad / PyTorch time) | speed-up over own 1 GPU (cgrad, PyTorch)
# For each GPU count N it runs, one after the other:
#   build/bench_data_parallel --gpus N           one process: 1-GPU step and cg_data_parallel
#   mpirun -np N build/bench_ddp                 one process per GPU: DDP, all-reduce bandwidth
#   python3 bench/bench_data_parallel.py --gpus N   the same with nn.DataParallel and DDP
# It builds nothing: configure and build first (cmake -S . -B build && cmake --build build -j).
# NCCL_NVLS_ENABLE=0 is set (NVLink multicast stays off on the shared GPU machines). The table is
# also written to $OUT/dp_bench.txt (raw output: $OUT/dp_bench_raw.txt) when OUT is set.
#
# usage: bench/run_dp_benchmarks.sh [--gpus N[,N...]] [--build DIR] [--python PY] [--mpirun PATH]
#                                   [--quick] [--no-mpi] [--no-torch]
#   --gpus: GPU counts to run, e.g. 2 or 2,4,8 (default: every GPU of the machine)
#   --quick: small sizes and few steps (a smoke test; the times mean little)
#   --no-mpi / --no-torch: skip bench_ddp / the PyTorch script
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
gpus="" python=python3 mpirun=mpirun quick=0 use_mpi=1 use_torch=1
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
    case $1 in
        --help|-h) usage; exit 0 ;;
        --quick) quick=1; shift; continue ;;
        --no-mpi) use_mpi=0; shift; continue ;;
        --no-torch) use_torch=0; shift; continue ;;
        --gpus|--build|--python|--mpirun)
            [ $# -ge 2 ] || { echo "error: $1 needs a value" >&2; usage >&2; exit 2; } ;;
        *) echo "error: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
    esac
    case $1 in
        --gpus) gpus=$2 ;; --build) build=$2 ;; --python) python=$2 ;; --mpirun) mpirun=$2 ;;
    esac
    shift 2
done

export NCCL_NVLS_ENABLE=0
# OpenMPI in containers: no cross-memory-attach (ptrace is often denied); as root, allowed to run.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

for prog in bench_data_parallel bench_ddp; do
    if [ ! -x "$build/$prog" ]; then
        echo "error: $build/$prog not found: build first (cmake -S . -B build && cmake --build build -j)" >&2
        exit 2
    fi
done
if [ -z "$gpus" ]; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    if [ "${gpus:-0}" -lt 1 ]; then
        echo "error: no GPU found (nvidia-smi -L); pass --gpus N" >&2
        exit 2
    fi
fi
if ! [[ $gpus =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; then
    echo "error: --gpus wants N or N,N,... (got '$gpus')" >&2
    exit 2
fi

sizes=()
[ "$quick" -eq 1 ] && sizes=(--warmup 2 --seed-steps 20 --linear-steps 5 --linear-in 10000 --linear-n 1000
                             --mlp-steps 5 --mlp-width 512 --mlp-layers 2 --mlp-batch 1024)
ar_runs=()
[ "$quick" -eq 1 ] && ar_runs=(--allreduce-runs 5)
if [ "$use_mpi" -eq 1 ] && ! command -v "$mpirun" >/dev/null 2>&1; then
    echo "# $mpirun not found: the MPI (bench_ddp) rows are skipped"
    use_mpi=0
fi
if [ "$use_torch" -eq 1 ] && ! "$python" -c 'import torch' >/dev/null 2>&1; then
    echo "# PyTorch not available ($python cannot import torch): the PyTorch column is empty"
    use_torch=0
fi

source "$root/bench/bench_lib.sh"

start=$SECONDS
IFS=, read -r -a counts <<< "$gpus"
for n in "${counts[@]}"; do
    t0=$SECONDS
    echo "# ---- $n GPU(s) ----" | tee -a "$raw"
    run "$build/bench_data_parallel" --gpus "$n" "${sizes[@]}"
    if [ "$use_mpi" -eq 1 ] && [ "$n" -ge 2 ]; then
        run "$mpirun" -np "$n" --bind-to none -x NCCL_NVLS_ENABLE "$build/bench_ddp" "${sizes[@]}" "${ar_runs[@]}"
    fi
    if [ "$use_torch" -eq 1 ]; then
        run "$python" "$root/bench/bench_data_parallel.py" --gpus "$n" "${sizes[@]}" "${ar_runs[@]}"
    fi
    echo "# $n GPU(s): $((SECONDS - t0)) s" | tee -a "$raw"
done

# Join the `result work=... impl=...` lines by work key; the speed-up divides a key's time into
# the time of the same workload's single_g1 key, for each implementation; for a graph mode, into
# the faster of single_g1 and singlegraph_g1 (the 1-GPU step replayed from a graph), so a graph is
# never compared with a slower eager baseline.
table=$(awk -v torch_ok="$use_torch" -f "$root/bench/results.awk" -f /dev/stdin "$raw" <<'AWK'
    function speedup(w, impl,   b, g, base) {
        b = w
        if (!sub(/_(dp|dpgraph|ddp|ddpgraph)_g[0-9]+$/, "_single_g1", b)) return "-"
        if (!((b, impl) in t) || !((w, impl) in t) || t[w, impl] <= 0) return "-"
        base = t[b, impl]; g = b
        sub(/_single_g1$/, "_singlegraph_g1", g)
        if (w ~ /graph_g[0-9]+$/ && (g, impl) in t && t[g, impl] + 0 < base + 0) base = t[g, impl]
        return sprintf("%.2fx", base / t[w, impl])
    }
    END {
        printf "%-46s | %-26s | %-26s | %-6s | %s\n", "work", "cgrad", "PyTorch", "ratio", "speed-up over own 1 GPU (cgrad / PyTorch)"
        for (i = 1; i <= nw; i++) {
            w = order[i]
            s = speedup(w, "cgrad") " / " speedup(w, "pytorch")
            if (s == "- / -") s = ""
            printf "%-46s | %-26s | %-26s | %-6s | %s\n", w, show(w, "cgrad"), show(w, "pytorch"), ratio(w), s
        }
    }
AWK
)

header="# $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ), GPU counts $gpus, $((SECONDS - start)) s; ratio = cgrad time / PyTorch time (< 1: cgrad faster)
# modes: single_g1 = plain model on 1 GPU (singlegraph_g1: in a CUDA graph); dp_gN = one process over N GPUs (cgrad: linear and mlp shards resident,
# PyTorch DataParallel: batch scattered from cuda:0 every step); ddp_gN = MPI ranks (cgrad) / DDP processes (PyTorch),
# shards resident; ddplocal_gN (ddplocalgraph_gN: in a CUDA graph) = the same local batch without communication; allreduce = NCCL at the MLP gradient size;
# dpgraph_gN / ddpgraph_gN = cgrad's dp / ddp step captured once in a CUDA graph (over the N GPUs / per rank) and replayed"
publish dp_bench "$header
$(grep -h '^# \(gpu\|torch\|MPI\|one process\)' "$raw" | sort -u)
$table"
exit $status
