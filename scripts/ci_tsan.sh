#!/usr/bin/env bash
# CI: the thread tests under ThreadSanitizer, on a CPU-only build (gcc, -fsanitize=thread). Checks the
# thread model stated at the top of include/cgrad.h: several threads each train a model of their own
# over one shared data set, shared tensor and shared model (tests/test_threads.c). A data race, or
# any other report, fails the run: TSAN_OPTIONS halt_on_error, exit code 66.
#
# OpenMP (libgomp) and OpenBLAS are not instrumented: TSan cannot see how they order their own
# threads, and would report false races between their workers. So each gets one thread: libgomp
# then runs a parallel region on the calling thread, and OpenBLAS starts no threads. No suppressions
# are needed that way; one added later must name a third-party frame and say why, never cgrad's code.
#
# Environment: BUILD_DIR (default build-tsan). Arguments go to ctest (default: -R ^test_threads$).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD_DIR=${BUILD_DIR:-build-tsan}
tests=(test_threads)

# The library's dependencies come from setup.sh's package list; CI's earlier stages installed them.
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGRAD_CUDA=OFF -DCGRAD_MPI=OFF \
  -DCGRAD_WERROR=ON -DCGRAD_SANITIZE=thread >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${tests[@]}"

export TSAN_OPTIONS=halt_on_error=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
if [[ $# -eq 0 ]]; then
  set -- -R "^($(IFS='|'; echo "${tests[*]}"))\$"
fi
ctest --test-dir "$BUILD_DIR" --output-on-failure "$@"
