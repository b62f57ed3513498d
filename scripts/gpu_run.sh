#!/usr/bin/env bash
# The one command for the GPU machine (no network; CUDA, OpenBLAS, CMake there, cmocka/cJSON not):
# builds with the .debs brought along in .deps/ (scripts/fetch_gpu_deps.sh, run online), runs the
# whole test suite, runs bench/run_benchmarks.sh when it exists, and prints a summary table.
# Logs are written to $OUT when it is set, else to $BUILD_DIR/gpu_run_logs. Arguments go to ctest.
#
# Environment (besides scripts/setup.sh's BUILD_DIR, CGRAD_CUDA_ARCH, CGRAD_CMAKE_ARGS):
#   CGRAD_SKIP_TESTS=1   skip the test suite        CGRAD_SKIP_BENCH=1   skip the benchmarks
#   CGRAD_CTEST_JOBS     parallel tests (default: number of cores)
# The benchmark script gets CGRAD_BENCH_OUT (a folder for its result files) and
# CGRAD_BENCH_SUMMARY (a file; a short table written there is printed in the summary).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export BUILD_DIR=${BUILD_DIR:-build}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}   # NVLink multicast stays off
# Fashion-MNIST brought along as a Debian package (scripts/fetch_gpu_deps.sh), once unpacked
fmnist=$ROOT/.deps/prefix/usr/share/datasets/fashion-mnist
[[ -z ${CGRAD_FASHION_MNIST_DIR:-} ]] && export CGRAD_FASHION_MNIST_DIR=$fmnist
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
LOGS=${OUT:-$BUILD_DIR/gpu_run_logs}
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)

say() { printf '[gpu_run %4ds] %s\n' "$SECONDS" "$*"; }
overall=0

# ---- machine ---------------------------------------------------------------------------------
{
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
  else
    echo "no nvidia-smi"
  fi
  command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 2
  cmake --version | head -n 1
  cc --version | head -n 1
  echo "cpus: $(nproc)"
} > "$LOGS/machine.txt" 2>&1
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c |
       awk '{n=$1; $1=""; printf "%s%dx%s", sep, n, $0; sep=", "}')
machine="${gpus:-no GPU} | $(nproc) cores | $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'no nvcc')"
say "machine: $machine"

# ---- build -------------------------------------------------------------------------------------
say "build (log: $LOGS/build.log)"
t0=$SECONDS
if scripts/setup.sh > "$LOGS/build.log" 2>&1; then
  build_status="ok"
else
  build_status="FAILED"; overall=1
  tail -n 60 "$LOGS/build.log"
fi
build_time=$((SECONDS - t0))
# What configuring chose (CUDA architectures, cuDNN, NCCL, MPI), one "cgrad:" line each.
grep '^-- cgrad: ' "$LOGS/build.log" | sed 's/^-- cgrad: //' > "$LOGS/config.txt"

# ---- tests -------------------------------------------------------------------------------------
tests_status="not run"; tests_time=0; failed_list=""
if [[ $build_status == ok && ${CGRAD_SKIP_TESTS:-0} != 1 ]]; then
  say "tests (log: $LOGS/ctest.log)"
  t0=$SECONDS
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "${CGRAD_CTEST_JOBS:-$(nproc)}" \
        --output-junit "$LOGS/ctest.xml" "$@" > "$LOGS/ctest.log" 2>&1
  ctest_rc=$?
  tests_time=$((SECONDS - t0))
  # One line per test: "  3/40 Test  #7: name ......   Passed    0.01 sec" (or ***Skipped, ***Failed, ...)
  results=$(grep -E '^ *[0-9]+/[0-9]+ +Test +#[0-9]+: ' "$LOGS/ctest.log")
  total=$(grep -c . <<< "$results")
  passed=$(grep -c '  Passed ' <<< "$results")
  skipped=$(grep -c '\*\*\*Skipped' <<< "$results")
  failed=$((total - passed - skipped))
  tests_status="$passed passed, $skipped skipped, $failed failed (of $total)"
  if [[ $ctest_rc -ne 0 || $failed -ne 0 ]]; then
    overall=1
    failed_list=$(grep -vE '  Passed |\*\*\*Skipped' <<< "$results" | sed -E 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: /  /')
    [[ $total -eq 0 ]] && tail -n 40 "$LOGS/ctest.log"
  fi
  # CTest's own summary: the pass rate, then the lists of skipped and failed tests.
  sed -n '/tests passed, /,$p' "$LOGS/ctest.log" | grep -v '^Errors while running CTest' | head -n 60
fi

# ---- benchmarks --------------------------------------------------------------------------------
bench_status="not run"; bench_time=0
export CGRAD_BENCH_OUT=$LOGS/bench CGRAD_BENCH_SUMMARY=$LOGS/bench_summary.txt
rm -f "$CGRAD_BENCH_SUMMARY"
if [[ ! -f bench/run_benchmarks.sh ]]; then
  bench_status="none (bench/run_benchmarks.sh does not exist)"
elif [[ $build_status == ok && ${CGRAD_SKIP_BENCH:-0} != 1 ]]; then
  say "benchmarks (log: $LOGS/bench.log)"
  mkdir -p "$CGRAD_BENCH_OUT"
  t0=$SECONDS
  if bash bench/run_benchmarks.sh > "$LOGS/bench.log" 2>&1; then
    bench_status="ok"
  else
    bench_status="FAILED (exit $?)"; overall=1
  fi
  bench_time=$((SECONDS - t0))
  [[ -s $CGRAD_BENCH_SUMMARY ]] || tail -n 40 "$LOGS/bench.log"
fi

# ---- summary -------------------------------------------------------------------------------------
{
  echo
  echo "==================== cgrad gpu_run summary ===================="
  printf '%-11s %s\n' "machine" "$machine"
  printf '%-11s %-48s %5ss\n' "build" "$build_status" "$build_time"
  sed 's/^/            /' "$LOGS/config.txt"
  printf '%-11s %-48s %5ss\n' "tests" "$tests_status" "$tests_time"
  [[ -n $failed_list ]] && printf '%s\n' "$failed_list"
  printf '%-11s %-48s %5ss\n' "benchmarks" "$bench_status" "$bench_time"
  if [[ -s $CGRAD_BENCH_SUMMARY ]]; then cat "$CGRAD_BENCH_SUMMARY"; fi
  printf '%-11s %s\n' "logs" "$LOGS"
  printf '%-11s %s\n' "result" "$([[ $overall -eq 0 ]] && echo PASS || echo FAIL)"
} | tee "$LOGS/summary.txt"
exit $overall
