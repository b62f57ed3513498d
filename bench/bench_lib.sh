# Shared by the bench/run_*benchmarks.sh scripts; source it after `set -u`. It provides
#   raw                  a temporary file (removed on exit) that keeps every program's output
#   status               0, or 1 once a program started by run failed
#   run PROG [ARGS...]   runs it, shows its output and appends it to $raw; a failure is noted in
#                        $raw and in status, and run returns the program's exit status
#   publish NAME REPORT  prints REPORT and, when OUT is set, writes it to $OUT/NAME.txt and the raw
#                        output to $OUT/NAME_raw.txt
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
status=0

run() {
    echo "\$ $*"
    "$@" 2>&1 | tee -a "$raw"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "# FAILED (exit $rc): $*" | tee -a "$raw"; status=1; }
    return "$rc"
}

publish() {
    local name=$1 report=$2
    echo
    echo "$report"
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT"
        echo "$report" > "$OUT/$name.txt"
        cp "$raw" "$OUT/${name}_raw.txt"
        echo "(written to $OUT/$name.txt)"
    fi
}
