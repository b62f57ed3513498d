#!/usr/bin/env bash
# Installs what is missing (Debian's dataset-fashion-mnist included), builds cgrad, and runs the
# main job: examples/train_fashion_mnist trains the MLP 784-256-128-10 with Adam on Fashion-MNIST
# on the best device present (a GPU when one is usable, else the CPU) and ends with the test
# accuracy. Arguments go to the program; without --epochs it gets --epochs 3 (about half a minute
# on a 2-core CPU-only machine, a second on a GPU). E.g. scripts/run.sh --epochs 10, or
# scripts/run.sh --model cnn --optimizer sgd --lr 0.05 --momentum 0.9 --epochs 15.
# The seed's CPU-vs-GPU training-step timing is build/train_step_timing (see the README).
# Environment: see scripts/setup.sh (BUILD_DIR, CGRAD_CUDA_ARCH, CGRAD_CMAKE_ARGS, CGRAD_OFFLINE).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export BUILD_DIR=${BUILD_DIR:-build}
"$ROOT/scripts/setup.sh"

# Offline machines get the data set from the .deb that setup.sh unpacked into .deps/prefix.
offline_data=$ROOT/.deps/prefix/usr/share/datasets/fashion-mnist
if [[ -z ${CGRAD_FASHION_MNIST_DIR:-} && ! -d /usr/share/datasets/fashion-mnist && -d $offline_data ]]; then
  export CGRAD_FASHION_MNIST_DIR=$offline_data
fi

args=("$@")
has_epochs=0
for a in "$@"; do
  case $a in --epochs|--epochs=*) has_epochs=1 ;; esac
done
if [[ $has_epochs -eq 0 ]]; then args=(--epochs 3 "${args[@]}"); fi

program=$BUILD_DIR/train_fashion_mnist
[[ -x $program ]] || { echo "run.sh: $program was not built" >&2; exit 1; }
echo "+ $program ${args[*]}" >&2
exec "$program" "${args[@]}"
