#!/usr/bin/env bash
# Is the new build as fast as the old? Runs both in turns (bench/run_ab.sh, the old first in odd
# rounds) on the work a change of the core must not slow, and prints each workload's median new/old
# time against its limit:
#   seed, Linear(1024) (wide), the CPU seed step at 2 threads (cpu_seed)            new/old <= 1.03
#   the Fashion-MNIST MLP and CNN epochs on the GPU (examples/train_fashion_mnist)   new/old <= 1.03
#   the microsecond-scale tiny steps, and the first step of a fresh process          new/old <= 1.05
# Then PyTorch's times for the same work (bench/bench_train_step.py, bench/bench_fashion_mnist.py)
# and new/PyTorch: reported, not gated (they swing more than a regression would), as is the copy
# bandwidth the step benchmark also prints.
# Exit status 1 when a workload misses its limit.
#
# usage: bench/run_speed_gate.sh OLD_BUILD NEW_BUILD [--rounds N] [--epochs N] [--only LIST]
#   --only: some of step,first,mlp,cnn (default all), e.g. --only mlp,cnn to time the epochs again.
#   The builds must hold bench_train_step and train_fashion_mnist; the data set comes from
#   $CGRAD_FASHION_MNIST_DIR. Raw results go to $CGRAD_BENCH_OUT when set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -ge 2 ]] || { sed -n '2,17p' "$0" >&2; exit 2; }
old=$1 new=$2
shift 2
rounds=5 epochs=2 only=step,first,mlp,cnn
while [[ $# -gt 0 ]]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
for part in ${only//,/ }; do
    [[ $part =~ ^(step|first|mlp|cnn)$ ]] || { echo "error: --only takes step, first, mlp, cnn; got '$part'" >&2; exit 2; }
done
out=${CGRAD_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$out"
data=(--data "${CGRAD_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}")
mlp=(--model mlp --optimizer adam --lr 1e-3 --batch 128 --epochs "$epochs" --device cuda)
cnn=(--model cnn --dropout 0 --optimizer sgd --lr 0.05 --momentum 0.9 --batch 128 --epochs "$epochs" --device cuda)

ab() { # name, then run_ab.sh's arguments after the builds
    local name=$1
    shift
    : > "$out/$name.txt"
    [[ ,$only, == *,$name,* ]] || return 0
    CGRAD_BENCH_OUT=$out/$name "$root/bench/run_ab.sh" "$old" "$new" --rounds "$rounds" "$@" | tail -n +2 > "$out/$name.txt"
}
ab step -- --work seed,tiny,wide,cpu_seed
ab first -- --first-step
ab mlp --prog train_fashion_mnist -- "${mlp[@]}" "${data[@]}" --seed 0
ab cnn --prog train_fashion_mnist -- "${cnn[@]}" "${data[@]}" --seed 0

# PyTorch, once each: its result lines have the same work keys.
py=$out/pytorch.txt
: > "$py"
if python3 -c 'import torch' 2>/dev/null; then
    if [[ ,$only, == *,step,* ]]; then
        for work in seed tiny wide cpu_seed; do # a process each: its tiny CUDA graph upsets later work
            python3 "$root/bench/bench_train_step.py" --work "$work" | grep '^result ' >> "$py" || true
        done
    fi
    [[ ,$only, == *,first,* ]] && { python3 "$root/bench/bench_train_step.py" --first-step | grep '^result ' >> "$py" || true; }
    for cfg in mlp cnn; do
        [[ ,$only, == *,$cfg,* ]] || continue
        declare -n args=$cfg
        python3 "$root/bench/bench_fashion_mnist.py" "${args[@]}" "${data[@]}" --seeds 0 | grep '^result ' >> "$py" || true
    done
fi

cat "$out"/step.txt "$out"/first.txt "$out"/mlp.txt "$out"/cnn.txt | awk -v pyfile="$py" '
    BEGIN {
        while ((getline line < pyfile) > 0) {
            n = split(line, f, " "); w = ""; t = ""
            for (i = 2; i <= n; i++) {
                split(f[i], kv, "=")
                if (kv[1] == "work") w = kv[2]
                if (kv[1] == "median_ms") t = kv[2]
                if (kv[1] == "images_per_s" && kv[2] > 0) t = 6e7 / kv[2]
            }
            if (w != "" && t != "") torch[w] = t
        }
        printf "| %-40s | %10s | %10s | %7s | %5s | %10s | %9s |\n", "work", "old ms", "new ms", "new/old", "limit", "PyTorch ms", "new/torch"
        bad = 0
    }
    NF == 4 {
        w = $1; lim = (w ~ /^tiny_/ || w ~ /^first_step/) ? 1.05 : 1.03
        if (w ~ /^copy_/) lim = 0 # the copy bandwidth: reported, not gated
        ok = !lim || $4 <= lim
        if (!ok) bad = 1
        pt = (w in torch) ? sprintf("%.4f", torch[w]) : "-"
        r = (w in torch && torch[w] > 0) ? sprintf("%.3f", $3 / torch[w]) : "-"
        printf "| %-40s | %10.5f | %10.5f | %7.3f | %5s | %10s | %9s |%s\n", w, $2, $3, $4, lim ? lim : "-", pt, r, ok ? "" : " MISSED"
    }
    END { exit bad }'
