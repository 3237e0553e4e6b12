#!/usr/bin/env bash
# Issue 46, the sampled timing path: a gloo run timed as NCCL runs are (1 step in
# $DDPTOP_TIME_EVERY after the warm-up epoch, default 10 here) with rank 1 slowed 1.5x in its
# data wait from step STEP on. Per run: the latency from the worker's "slowing from now" log
# event to the straggler record (both `unix` of the store's `events` rows, as the latency test
# of tests/gloo_runs.rs reads them), the step named, the phase, everyone named, the steps/s of
# the run (1000 / step_ms_median) and the load average when it ended.
#
#   . scripts/test_env.sh && scripts/stragglers_sampled_latency.sh K BATCH STEPS_PER_EPOCH STEP [N] [DDPTOP_BINARY]
# Two epochs of STEPS_PER_EPOCH steps: epoch 0 is warm-up (every step timed), epoch 1 sampled;
# STEP should lie in epoch 1, a few timed samples after its start.
set -euo pipefail
k=$1 batch=$2 per_epoch=$3 step=$4
n=${5:-3}
bin=${6:-target/debug/ddptop}
every=${DDPTOP_TIME_EVERY:-10}
: "${DDPTOP_PYTHON:?run . scripts/test_env.sh first}"
for i in $(seq 1 "$n"); do
  d=$(mktemp -d)
  cmd=(run weak --k "$k" --samples $((per_epoch * batch * k)) --batch "$batch" --epochs 2
    --backend gloo --model tiny --inject "slow:1:1.5@$step" --json)
  [ "$i" = 1 ] && echo "\$ DDPTOP_TIME_EVERY=$every ddptop ${cmd[*]}"
  DDPTOP_TIME_EVERY=$every DDPTOP_DATA_DIR=$d DDPTOP_CONFIG=$d/config.toml XDG_RUNTIME_DIR=$d \
    DDPTOP_WORKERS_DIR=$PWD/workers "$bin" "${cmd[@]}" >"$d/out.json" 2>"$d/err.log" || true
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  start=$(sqlite3 "$d/runs.db" "SELECT unix FROM events WHERE type='log' AND instr(body,'slowing from now')>0 ORDER BY seq LIMIT 1")
  named=$(sqlite3 "$d/runs.db" "SELECT unix FROM events WHERE type='straggler' AND instr(body,'\"rank\":1')>0 ORDER BY seq LIMIT 1")
  lat=$(if [ -n "$start" ] && [ -n "$named" ]; then
    awk -v a="$start" -v b="$named" 'BEGIN{printf "%.2f s", b-a}'
  else echo "not named"; fi)
  jq -r --arg k "$k" --arg i "$i" --arg lat "$lat" --arg b "$batch" --arg load "$load" '.runs[0] |
    "k=\($k) batch \($b) run \($i): \(.status) · latency \($lat) · \(1000 / .step_ms_median * 10 | round / 10) steps/s (step \(.step_ms_median * 10 | round / 10) ms)"
    + " · named " + (if (.stragglers | length) > 0 then (.stragglers | map("rank \(.rank) \(.phase) \(.score * 100 | round / 100) at step \(.step)") | join("; ")) else "nobody" end)
    + " · load \($load)"' "$d/out.json" || { echo "k=$k run $i: no JSON"; tail -5 "$d/err.log"; }
  sqlite3 "$d/runs.db" "SELECT body FROM events WHERE type='straggler' ORDER BY seq LIMIT 1" |
    jq -r '"  evidence: \(.evidence)"' 2>/dev/null || true
  rm -rf "$d"
done
