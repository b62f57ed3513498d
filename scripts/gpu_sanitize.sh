#!/usr/bin/env bash
# Runs every GPU test binary (build/tests/*_cuda) under NVIDIA compute-sanitizer, once with
# memcheck (out-of-bounds and misaligned accesses, invalid frees)
# and once with racecheck (shared-memory hazards), and prints a table: test | memcheck | racecheck.
# Not checked: device memory still allocated at exit (the caching allocator keeps its blocks for
# the life of the process, by design) and failing CUDA API calls (the tests provoke some on
# purpose, e.g. out-of-memory, and check that they become errors).
# A tool that reports anything, or a test that fails under it, is a failure; a test that skips
# (exit 77: e.g. the multi-GPU ones on one GPU) is listed as skipped. Needs a GPU and a built tree.
#
# usage: scripts/gpu_sanitize.sh [BUILD_DIR] [regex of test names, default: all]
# Environment: CGRAD_SANITIZE_TIMEOUT seconds per run (default 600); CGRAD_SANITIZE_TOOLS (default
# "memcheck racecheck"; a tool left out shows as "-"). Logs go to $OUT (else
# BUILD_DIR/sanitize_logs); the table to $OUT/gpu_sanitize.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$ROOT/build}
filter=${2:-.}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[[ -x $sanitizer ]] || { echo "gpu_sanitize: compute-sanitizer not found" >&2; exit 2; }
logs=${OUT:-$build/sanitize_logs}
mkdir -p "$logs"
limit=${CGRAD_SANITIZE_TIMEOUT:-600}
tools=" ${CGRAD_SANITIZE_TOOLS:-memcheck racecheck} "

# tool -> the flags that make it strict and make reports fail the run
declare -A flags=(
  [memcheck]="--report-api-errors no"
  [racecheck]="--racecheck-report all"
)
overall=0
table="| test | memcheck | racecheck |"$'\n'"|---|---|---|"
for bin in "$build"/tests/*_cuda; do
  name=$(basename "$bin")
  [[ $name =~ $filter ]] || continue
  row="| $name"
  for tool in memcheck racecheck; do
    if [[ $tools != *" $tool "* ]]; then row+=" | -"; continue; fi
    log=$logs/${name}.${tool}.log
    # shellcheck disable=SC2086  # the flags are words
    timeout "$limit" "$sanitizer" --tool "$tool" ${flags[$tool]} --error-exitcode 99 "$bin" > "$log" 2>&1
    rc=$?
    summary=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard' "$log" | tail -n 1)
    case $rc in
      0) cell="clean${summary:+ ($summary)}" ;;
      77) cell="skipped" ;;
      124) cell="TIMEOUT after ${limit}s"; overall=1 ;;
      99) cell="REPORTS: $summary"; overall=1 ;;
      *) cell="FAILED (exit $rc)"; overall=1 ;;
    esac
    row+=" | $cell"
    printf '%s %s: %s\n' "$name" "$tool" "$cell"
  done
  table+=$'\n'"$row |"
done
echo
echo "$table"
[[ -n ${OUT:-} ]] && echo "$table" > "$OUT/gpu_sanitize.txt"
exit $overall
