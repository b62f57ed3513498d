#!/usr/bin/env bash
# Installs what is missing, builds cgrad, and runs the main job: the seed's CPU-vs-GPU training
# step (examples/train_step_timing): Linear(100000, 10) on 10000 examples, SGD(lr=0.01), MSELoss,
# timed on the CPU and, when a GPU is usable, on the GPU, with the speed-up. Without a GPU it times
# the CPU only. Arguments go to the program; without --steps it gets --steps 3, which keeps the
# run short on a 2-core CPU-only machine (about 1-2 s per CPU step at the seed's sizes, plus the
# set-up of a 4 GB input). E.g. scripts/run.sh --steps 10, or --in 10000 --n 1000 for a small run.
# Environment: see scripts/setup.sh (BUILD_DIR, CGRAD_CUDA_ARCH, CGRAD_CMAKE_ARGS, CGRAD_OFFLINE).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export BUILD_DIR=${BUILD_DIR:-build}
"$ROOT/scripts/setup.sh"

args=("$@")
has_steps=0
for a in "$@"; do
  case $a in --steps|--steps=*) has_steps=1 ;; esac
done
if [[ $has_steps -eq 0 ]]; then args=(--steps 3 "${args[@]}"); fi

program=$BUILD_DIR/train_step_timing
[[ -x $program ]] || { echo "run.sh: $program was not built" >&2; exit 1; }
echo "+ $program ${args[*]}" >&2
exec "$program" "${args[@]}"
