#!/usr/bin/env bash
# Old against new: runs bench/bench_train_step (or --prog, e.g. train_fashion_mnist) from two builds in turns (old first in odd rounds,
# new first in even ones, so neither always runs on a warmer machine) and prints, per workload, the
# median over the rounds of each side's median step and their ratio new / old. A program's result
# lines give median_ms, or images_per_s (train_fashion_mnist's epochs), read as the ms of a
# 60000-image epoch.
#
# Usage: bench/run_ab.sh OLD_BUILD NEW_BUILD [--rounds N] [--prog NAME] [-- the program's arguments]
#   e.g. bench/run_ab.sh build-old build --rounds 5 -- --work seed,tiny,wide,cpu_seed
#        bench/run_ab.sh build-old build --prog train_fashion_mnist -- --model mlp --epochs 3
# Both builds must hold the program. Raw result lines go to $CGRAD_BENCH_OUT/ab_*.txt when
# that is set.
set -euo pipefail

[[ $# -ge 2 ]] || { sed -n '2,13p' "$0" >&2; exit 2; }
old=$1 new=$2
shift 2
rounds=5 prog=bench_train_step
while [[ $# -gt 0 ]]; do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --prog) prog=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "error: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "error: --rounds needs a count >= 1" >&2; exit 2; }
for b in "$old" "$new"; do
    [[ -x $b/$prog ]] || { echo "error: $b/$prog not found" >&2; exit 2; }
done

out=${CGRAD_BENCH_OUT:-$(mktemp -d)}
mkdir -p "$out"
: > "$out/ab_old.txt"
: > "$out/ab_new.txt"
for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then order=(old new); else order=(new old); fi
    for side in "${order[@]}"; do
        build=$old
        [[ $side == new ]] && build=$new
        "$build/$prog" "$@" | grep '^result ' >> "$out/ab_$side.txt"
    done
done

# Per work key: the median of each side's per-round medians, and new / old.
awk '
    function med(list,   n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    {
        work = ""; ms = ""
        for (i = 2; i <= NF; i++) {
            split($i, kv, "=")
            if (kv[1] == "work") work = kv[2]
            if (kv[1] == "median_ms") ms = kv[2]
            if (kv[1] == "images_per_s" && kv[2] > 0) ms = 6e7 / kv[2]
        }
        if (work == "" || ms == "") next
        side = FILENAME ~ /ab_old/ ? "old" : "new"
        v[side, work] = v[side, work] " " ms
        if (!(work in seen)) { seen[work] = 1; order[++nw] = work }
    }
    END {
        printf "%-44s %12s %12s %8s\n", "work", "old ms", "new ms", "new/old"
        for (k = 1; k <= nw; k++) {
            w = order[k]
            if (v["old", w] == "" || v["new", w] == "") continue
            o = med(v["old", w]); n = med(v["new", w])
            printf "%-44s %12.5f %12.5f %8.3f\n", w, o, n, (o > 0 ? n / o : 0)
        }
    }' "$out/ab_old.txt" "$out/ab_new.txt"
