#!/usr/bin/env bash
# Installs what is missing, builds cgrad, and runs the main job: the CPU-vs-GPU matmul timing
# (examples/matmul_timing). Arguments go to the program; without --size it gets --size 2000, which
# stays short on a 2-core CPU-only machine (the seeds' size is --size 16000).
# Environment: see scripts/setup.sh (BUILD_DIR, CGRAD_CUDA_ARCH, CGRAD_CMAKE_ARGS, CGRAD_OFFLINE).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export BUILD_DIR=${BUILD_DIR:-build}
"$ROOT/scripts/setup.sh"

args=("$@")
has_size=0
for a in "$@"; do
  case $a in --size|--size=*) has_size=1 ;; esac
done
if [[ $has_size -eq 0 ]]; then args=(--size 2000 "${args[@]}"); fi

program=$BUILD_DIR/matmul_timing
[[ -x $program ]] || { echo "run.sh: $program was not built" >&2; exit 1; }
echo "+ $program ${args[*]}" >&2
exec "$program" "${args[@]}"
