#!/usr/bin/env bash
# Issue 46, "healthy runs name nobody": N healthy gloo runs (tiny model, batch 8 per rank, 100
# steps: the latency test's runs without the fault) at k=2 and at k=4, each in a fresh data
# directory. Per run: its status, the ranks named, the CPU-starvation caveats, and per phase
# worst ÷ median with the worst rank. Then the report (Markdown) of the last k=4 run, read
# back from its store: its per-phase table as kept at the end.
#
#   . scripts/test_env.sh && scripts/stragglers_healthy.sh [N] [DDPTOP_BINARY] [KS]
# KS: the k's, e.g. "2" (default "2 4"). A rank named is printed with its step, whether it is
# still named at the end, and its evidence.
set -euo pipefail
n=${1:-10}
bin=${2:-target/debug/ddptop}
ks=${3:-2 4}
: "${DDPTOP_PYTHON:?run . scripts/test_env.sh first}"
last=""
for k in $ks; do
  for i in $(seq 1 "$n"); do
    d=$(mktemp -d)
    DDPTOP_DATA_DIR=$d DDPTOP_CONFIG=$d/config.toml XDG_RUNTIME_DIR=$d \
      DDPTOP_WORKERS_DIR=$PWD/workers \
      "$bin" run weak --k "$k" --samples $((50 * 8 * k)) --batch 8 --backend gloo \
      --model tiny --json >"$d/out.json" 2>"$d/err.log" || true
    jq -r --arg k "$k" --arg i "$i" '.runs[0] |
      "k=\($k) run \($i): \(.status) · named \(.stragglers | length)"
      + (if (.stragglers | length) > 0 then " (" + (.stragglers | map("rank \(.rank) \(.phase) \(.score * 100 | round / 100) at step \(.step), \(if .active then "still named" else "un-named" end): \(.evidence)") | join("; ")) + ")" else "" end)
      + " · starvation caveats \([.caveats[] | select(test("CPU starvation"))] | length)"
      + " · worst÷median " + (.phase_scores | map("\(.phase) \(.worst_vs_median * 100 | round / 100) r\(.worst_rank)") | join(", "))' \
      "$d/out.json" || { echo "k=$k run $i: no JSON"; tail -5 "$d/err.log"; }
    echo "  $(uptime)"
    [ -n "$last" ] && rm -rf "$last"
    last=$d
  done
done
echo "--- ddptop report --last --format md of the last k=4 run (from its store)"
"$bin" report --data-dir "$last" --config "$last/config.toml" --last --format md
rm -rf "$last"
