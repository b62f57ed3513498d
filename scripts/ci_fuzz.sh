#!/usr/bin/env bash
# CI: builds the libFuzzer targets (fuzz/: fuzz_safetensors and fuzz_idx for the file readers,
# fuzz_checkpoint for checkpoint restore) with clang, ASan and UBSan, and runs each from its seed
# corpus (fuzz/corpus/<target>) for a short time. Fails on any crash, sanitizer report, leak,
# timeout (an input slower than 10 s) or out-of-memory (past 2 GB of RSS, or one malloc past 2 GB):
# the failing input is kept as $BUILD_DIR/artifacts/<target>-<kind>-<hash> (reproduce:
# $BUILD_DIR/fuzz/<target> <that file>).
#
# Environment: BUILD_DIR (default build-fuzz), FUZZ_SECONDS per target (default 30), FUZZ_TARGETS
# (default "fuzz_safetensors fuzz_idx fuzz_checkpoint"). New inputs found go to
# $BUILD_DIR/corpus/<target>, never into the committed seeds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD_DIR=${BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
read -r -a targets <<< "${FUZZ_TARGETS:-fuzz_safetensors fuzz_idx fuzz_checkpoint}"

# clang with libFuzzer (Debian: clang + libclang-rt-dev) and its OpenMP runtime (libomp-dev); the
# library's own dependencies come from setup.sh's package list.
need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/*/libclang_rt.fuzzer[.-]*a" >/dev/null || need+=(libclang-rt-dev)
compgen -G "/usr/lib/llvm-*/lib/libomp.so" >/dev/null || need+=(libomp-dev)
if [[ ${#need[@]} -gt 0 ]]; then
  [[ $EUID -eq 0 ]] || { echo "ci_fuzz: missing ${need[*]} (apt-get install ${need[*]})" >&2; exit 1; }
  apt-get -o DPkg::Lock::Timeout=300 update
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${need[@]}"
fi

CC=clang cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCGRAD_CUDA=OFF -DCGRAD_MPI=OFF \
  -DCGRAD_TESTS=OFF -DCGRAD_FUZZ=ON -DCGRAD_SANITIZE=address,undefined >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}"

export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$BUILD_DIR/artifacts"
status=0
for t in "${targets[@]}"; do
  mkdir -p "$BUILD_DIR/corpus/$t"
  dict=()
  [[ -f fuzz/$t.dict ]] && dict=(-dict="fuzz/$t.dict")
  log=$BUILD_DIR/$t.log
  start=$SECONDS
  if "$BUILD_DIR/fuzz/$t" "${dict[@]}" -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$BUILD_DIR/artifacts/$t-" -print_final_stats=1 \
       "$BUILD_DIR/corpus/$t" "fuzz/corpus/$t" > "$log" 2>&1; then
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
    printf 'ok    %-17s %4ds  %s\n' "$t" $((SECONDS - start)) "${done_line:-}"
  else
    status=1
    printf 'FAIL  %-17s %4ds  (log: %s)\n' "$t" $((SECONDS - start)) "$log"
    grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' "$log" | tail -60
  fi
done
exit $status
