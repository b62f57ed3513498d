#!/usr/bin/env bash
# Fashion-MNIST benchmarks of issue 7, cgrad (examples/train_fashion_mnist) and PyTorch
# (bench/bench_fashion_mnist.py) side by side on this machine in one run, and a table:
#   work | cgrad | PyTorch | ratio (cgrad/PyTorch) | goal
# GPU rows (when a GPU is present), every configuration over the seeds, each seed its own process:
#   mlp_adam  MLP 784-256-128-10, Adam(lr=1e-3), batch 128, 10 epochs
#   cnn_sgd   CNN (conv 32, conv 64, 128 hidden), SGD(lr=0.05, momentum=0.9), batch 128, 15 epochs
#   cnn_drop  the same CNN with Dropout(--cnn-dropout, default 0.5) before its last layer (0: skipped)
#   for each: the mean final test accuracy and the mean of the per-seed median epoch rates (images/s)
# CPU rows: the same two models, --cpu-limit training images, --cpu-epochs epochs, seed 0, both at
# --threads threads (default: all cores), for training images/s only.
# Convolutions and matmuls are true fp32 on both sides (PyTorch's cuDNN TF32 default switched off).
# Goals (issue 7): accuracy MLP >= 88.3%, CNN >= 91.0%, each within 0.5 points of PyTorch's mean;
# GPU images/s MLP >= 3x PyTorch, CNN >= 1.2x; CPU >= 1.0x for both.
# It builds nothing (configure and build first); the data set comes from --data, else
# $CGRAD_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist.
# The table goes to $OUT/fmnist_bench.txt and the raw output to $OUT/fmnist_bench_raw.txt when OUT
# is set.
#
# usage: bench/run_fmnist_benchmarks.sh [--build DIR] [--seeds 0,1,2] [--threads N]
#            [--cpu-limit N] [--cpu-epochs N] [--cnn-dropout P] [--python PY] [--only gpu|cpu] [--quick]
#   --quick: 1 epoch on 5000 images, one seed (a smoke test; numbers mean little)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
seeds=0,1,2 threads=$(nproc) cpu_limit=10000 cpu_epochs=2 cnn_dropout=0.5 python="" only="" quick=0
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
    case $1 in
        --help|-h) usage; exit 0 ;;
        --quick) quick=1; shift; continue ;;
        --build|--seeds|--threads|--cpu-limit|--cpu-epochs|--cnn-dropout|--python|--only)
            [ $# -ge 2 ] || { echo "error: $1 needs a value" >&2; exit 2; } ;;
        *) echo "error: unknown flag '$1'" >&2; usage >&2; exit 2 ;;
    esac
    case $1 in
        --build) build=$2 ;; --seeds) seeds=$2 ;; --threads) threads=$2 ;; --cpu-limit) cpu_limit=$2 ;;
        --cpu-epochs) cpu_epochs=$2 ;; --cnn-dropout) cnn_dropout=$2 ;; --python) python=$2 ;; --only) only=$2 ;;
    esac
    shift 2
done
prog=$build/train_fashion_mnist
[ -x "$prog" ] || { echo "error: $prog not found: build first" >&2; exit 2; }
torch_ok=0
for py in ${python:-python3 /usr/bin/python3}; do
    if "$py" -c 'import torch' >/dev/null 2>&1; then python=$py torch_ok=1; break; fi
done
[ "$torch_ok" -eq 1 ] || echo "# PyTorch not available: the PyTorch column stays empty"
gpu=0
if [ "$only" != cpu ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then gpu=1; fi

mlp=(--model mlp --optimizer adam --lr 1e-3 --batch 128 --epochs 10)
cnn=(--model cnn --dropout 0 --optimizer sgd --lr 0.05 --momentum 0.9 --batch 128 --epochs 15)
cnn_drop=(--model cnn --dropout "$cnn_dropout" --optimizer sgd --lr 0.05 --momentum 0.9 --batch 128 --epochs 15)
gpu_configs=(mlp cnn)
[ "$cnn_dropout" != 0 ] && gpu_configs+=(cnn_drop)
extra=()
if [ "$quick" -eq 1 ]; then
    seeds=0 cpu_limit=5000 cpu_epochs=1
    mlp[-1]=1 cnn[-1]=1 cnn_drop[-1]=1
    extra=(--limit 5000)
fi
source "$root/bench/bench_lib.sh"
# `tag` lines in the raw output tell the table which configuration the results belong to.
tag() { echo "tag $*" >> "$raw"; }

if [ "$gpu" -eq 1 ]; then
    for cfg in "${gpu_configs[@]}"; do
        declare -n args=$cfg
        tag "gpu_${cfg}"
        for s in ${seeds//,/ }; do run "$prog" "${args[@]}" "${extra[@]}" --device cuda --seed "$s"; done
        [ "$torch_ok" -eq 1 ] && run "$python" "$root/bench/bench_fashion_mnist.py" "${args[@]}" "${extra[@]}" \
            --device cuda --seeds "$seeds"
    done
fi
if [ "$only" != gpu ]; then
    for cfg in mlp cnn; do
        declare -n args=$cfg
        a=("${args[@]}")
        a[-1]=$cpu_epochs
        tag "cpu_${cfg}"
        run "$prog" "${a[@]}" --limit "$cpu_limit" --device cpu --threads "$threads" --seed 0
        [ "$torch_ok" -eq 1 ] && run "$python" "$root/bench/bench_fashion_mnist.py" "${a[@]}" --limit "$cpu_limit" \
            --device cpu --threads "$threads" --seeds 0
    done
fi

table=$(awk -v threads="$threads" -v cpu_limit="$cpu_limit" -v drop="$cnn_dropout" '
    $1 == "tag" { cfg = $2; next }
    $1 == "result" {
        impl = ""; acc = ""; rate = ""
        for (i = 2; i <= NF; i++) {
            split($i, kv, "=")
            if (kv[1] == "impl") impl = kv[2]
            if (kv[1] == "test_acc") acc = kv[2]
            if (kv[1] == "images_per_s") rate = kv[2]
        }
        n[cfg, impl]++; acc_sum[cfg, impl] += acc; rate_sum[cfg, impl] += rate
    }
    function mean(sum, c, k) { return (c, k) in n ? sum[c, k] / n[c, k] : "" }
    function count(c) { return (c, "cgrad") in n ? n[c, "cgrad"] : 0 }
    function row(work, c, what, goal, is_rate,   a, b, ratio) {
        a = is_rate ? mean(rate_sum, c, "cgrad") : mean(acc_sum, c, "cgrad")
        b = is_rate ? mean(rate_sum, c, "pytorch") : mean(acc_sum, c, "pytorch")
        if (a == "") return
        ratio = (b != "" && b > 0) ? sprintf(is_rate ? "%.2fx" : "%+.2f pts", is_rate ? a / b : a - b) : "-"
        printf "| %s | %s | %s | %s | %s |\n", work, is_rate ? sprintf("%.0f img/s", a) : sprintf("%.2f%%", a),
               b == "" ? "-" : (is_rate ? sprintf("%.0f img/s", b) : sprintf("%.2f%%", b)), ratio, goal
    }
    END {
        print "| work | cgrad | PyTorch | cgrad vs PyTorch | goal |"
        print "|---|---|---|---|---|"
        row("GPU MLP Adam, test accuracy (mean of " count("gpu_mlp") " seeds)", "gpu_mlp", "acc", ">= 88.3%, within 0.5", 0)
        row("GPU MLP Adam b128, training throughput", "gpu_mlp", "rate", ">= 3x", 1)
        row("GPU CNN SGD, test accuracy (mean of " count("gpu_cnn") " seeds)", "gpu_cnn", "acc", ">= 91.0%, within 0.5", 0)
        row("GPU CNN SGD b128, training throughput (fp32)", "gpu_cnn", "rate", ">= 1.2x", 1)
        row("GPU CNN + Dropout(" drop ") SGD, test accuracy (mean of " count("gpu_cnn_drop") " seeds)", "gpu_cnn_drop", "acc", ">= 91.0%, within 0.5", 0)
        row("GPU CNN + Dropout(" drop ") SGD b128, training throughput (fp32)", "gpu_cnn_drop", "rate", ">= 1.2x", 1)
        row("CPU MLP b128, " threads " threads, " cpu_limit " images", "cpu_mlp", "rate", ">= 1.0x", 1)
        row("CPU CNN b128, " threads " threads, " cpu_limit " images", "cpu_cnn", "rate", ">= 1.0x", 1)
    }' "$raw")
publish fmnist_bench "$table"
exit $status
