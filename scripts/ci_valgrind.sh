#!/usr/bin/env bash
# CI: valgrind memcheck over the CPU test binaries that cover the core (tensors, autograd, modules,
# optimizer, losses), everything that reads files (safetensors, IDX, the data loader), and the
# misuse, freed-handle and size-overflow cases (test_misuse, test_handles, test_sizes). A test
# fails on any memcheck error or definite leak; third-party reports are suppressed
# (tests/valgrind.supp, each explained). Matmul / elementwise / skinny GEMM sweeps are left to
# ci_sanitize.sh: their large sizes take minutes under valgrind and add no new code paths.
#
# Usage: scripts/ci_valgrind.sh [BUILD_DIR]   an existing CPU-only build (default build-cpu, as
# .ci/run leaves it); when it holds no test binaries, a CPU-only RelWithDebInfo build is made there.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD_DIR=${1:-build-cpu}
TESTS=(test_tensor_cpu test_autograd_cpu test_nn_cpu test_adam_cpu test_cross_entropy_cpu
       test_reduce_cpu test_errors_cpu test_fixtures_cpu test_graph_cpu test_data_parallel_cpu
       test_step_memory_cpu test_safetensors_cpu test_idx test_data_loader_cpu test_misuse_cpu test_handles
       test_sizes_cpu)

if ! command -v valgrind >/dev/null 2>&1; then
  [[ $EUID -eq 0 ]] || { echo "ci_valgrind: valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
  apt-get -o DPkg::Lock::Timeout=300 update
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends valgrind
fi
if [[ ! -x $BUILD_DIR/tests/test_tensor_cpu ]]; then
  BUILD_DIR=$BUILD_DIR CGRAD_CMAKE_ARGS="-DCGRAD_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo" scripts/setup.sh
fi

LOGS=$BUILD_DIR/valgrind_logs
mkdir -p "$LOGS"
# Two threads per test (OpenMP and OpenBLAS): the threaded paths run; valgrind serialises a
# process's threads anyway, so two tests at once keep both cores busy.
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2

run_one() {
  local t=$1 start=$SECONDS
  if (cd "$BUILD_DIR/tests" && valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --suppressions="$ROOT/tests/valgrind.supp" --num-callers=30 "./$t") > "$LOGS/$t.log" 2>&1; then
    printf 'ok    %-26s %4ds\n' "$t" $((SECONDS - start))
  else
    printf 'FAIL  %-26s %4ds (exit %d)\n' "$t" $((SECONDS - start)) "$?"
    cat "$LOGS/$t.log"
    return 1
  fi
}
export -f run_one
export ROOT BUILD_DIR LOGS

printf '%s\n' "${TESTS[@]}" | xargs -P 2 -I{} bash -c 'run_one {}'
