#!/usr/bin/env bash
# Issue #32's accuracy check: the final test accuracy of examples/train_fashion_mnist over several seeds
# in float32, under bfloat16 autocast, and under float16 autocast with the gradient scaler, each run
# its own process, the modes taking turns within a seed. Prints each mode's accuracies, mean and
# standard deviation, and whether each 16-bit mean is at least the float32 mean minus 0.4 points
# (exit status 1 when one is not).
# Recipes (those of bench/run_fmnist_benchmarks.sh): mlp: Adam(lr 1e-3), batch 128, 10 epochs;
# cnn: SGD(lr 0.05, momentum 0.9), batch 128, dropout 0.5, 15 epochs.
#
# usage: bench/run_amp_accuracy.sh [--build DIR] [--device cpu|cuda] [--model mlp|cnn]
#            [--seeds 1,2,3,4,5] [--epochs N] [--threads N]
# The data set comes from $CGRAD_FASHION_MNIST_DIR (else /usr/share/datasets/fashion-mnist). Raw
# result lines go to $CGRAD_BENCH_OUT/amp_accuracy_raw.txt when that is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build device=cuda model=mlp seeds=1,2,3,4,5 epochs="" threads=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --device) device=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        --seeds) seeds=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        *) sed -n '2,14p' "$0" >&2; exit 2 ;;
    esac
done
case $model in
    mlp) recipe=(--model mlp --optimizer adam --lr 1e-3 --batch 128 --epochs "${epochs:-10}") ;;
    cnn) recipe=(--model cnn --optimizer sgd --lr 0.05 --momentum 0.9 --batch 128 --dropout 0.5 --epochs "${epochs:-15}") ;;
    *) echo "error: --model takes mlp or cnn, got '$model'" >&2; exit 2 ;;
esac
[[ -x $build/train_fashion_mnist ]] || { echo "error: $build/train_fashion_mnist not found (build first)" >&2; exit 2; }
[[ -n $threads ]] && recipe+=(--threads "$threads")
raw=${CGRAD_BENCH_OUT:-$(mktemp -d)}/amp_accuracy_raw.txt
mkdir -p "$(dirname "$raw")"
: > "$raw"
modes=(fp32 bf16 fp16)
for seed in ${seeds//,/ }; do
    for mode in "${modes[@]}"; do
        amp=()
        [[ $mode != fp32 ]] && amp=(--amp "$mode")
        line=$("$build/train_fashion_mnist" "${recipe[@]}" --device "$device" --seed "$seed" "${amp[@]}" |
               grep '^result ')
        echo "mode=$mode $line" | tee -a "$raw"
    done
done
awk '
    {
        mode = substr($1, 6)
        for (i = 2; i <= NF; i++) if ($i ~ /^test_acc=/) { n[mode]++; v[mode, n[mode]] = substr($i, 10) + 0 }
    }
    END {
        split("fp32 bf16 fp16", order, " ")
        for (k = 1; k <= 3; k++) {
            m = order[k]; s = 0
            for (i = 1; i <= n[m]; i++) s += v[m, i]
            mean[m] = s / n[m]; ss = 0
            for (i = 1; i <= n[m]; i++) ss += (v[m, i] - mean[m]) ^ 2
            sd = n[m] > 1 ? sqrt(ss / (n[m] - 1)) : 0
            list = ""
            for (i = 1; i <= n[m]; i++) list = list sprintf("%s%.2f", i > 1 ? " " : "", v[m, i])
            verdict = m == "fp32" ? "" : mean[m] >= mean["fp32"] - 0.4 ? "ok (>= fp32 - 0.4)" : "MISSED (< fp32 - 0.4)"
            if (m != "fp32" && mean[m] < mean["fp32"] - 0.4) bad = 1
            printf "| %s | %s | %.2f +- %.2f | %s |\n", m, list, mean[m], sd, verdict
        }
        exit bad
    }' "$raw"
