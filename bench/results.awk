# The result lines of the benchmark programs, for the tables of bench/run_benchmarks.sh and
# bench/run_dp_benchmarks.sh (awk -f this file -f the table's own program). A line
#   result work=<key> impl=<cgrad|pytorch> median_ms=<t> [gbps=<b> | busbw_gbs=<b>] [floor_ms=<f>]
# sets t[key, impl] and, where given, bw[key, impl] and cgrad's fl[key]; order[1..nw] lists the keys
# as they first appear. With -v torch_ok=0 a missing PyTorch time says why.
function field(name,   i, kv) {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
    return ""
}
$1 == "result" {
    w = field("work"); impl = field("impl")
    if (!(w in seen)) { seen[w] = 1; order[++nw] = w }
    t[w, impl] = field("median_ms")
    b = field("gbps") field("busbw_gbs")
    if (b != "") bw[w, impl] = b
    if (impl == "cgrad" && field("floor_ms") != "") fl[w] = field("floor_ms")
}
# "1.2345 ms (678.9 GB/s)", or why there is no time
function show(w, impl,   s) {
    if (!((w, impl) in t)) return (impl == "pytorch" && !torch_ok) ? "PyTorch not available" : "-"
    s = sprintf("%.4f ms", t[w, impl])
    if ((w, impl) in bw) s = s sprintf(" (%s GB/s)", bw[w, impl])
    return s
}
# cgrad time / PyTorch time
function ratio(w) {
    return ((w, "cgrad") in t && (w, "pytorch") in t && t[w, "pytorch"] > 0) ? sprintf("%.3f", t[w, "cgrad"] / t[w, "pytorch"]) : "-"
}
