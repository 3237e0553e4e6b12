#!/usr/bin/env bash
# The cost of the `auto` timing cadence (DDPTOP_TIME_EVERY=auto, ddptop's GPU default since
# 2026-12-05: one step timed every 0.2-0.45 s) against the old fixed 1 in 10 and the bare d2l
# loop, on one GPU, k=1, interleaved (scripts/device/loop_overhead.sh's rounds, order reversed
# every other round): batch 256 (the book's, ~52 ms steps on an H100: auto times 1 in 8) and
# batch 1024 (~4x slower steps: auto times 1 in 2, where 1 in 10 would space timed steps ~2 s).
#   scripts/device/cadence_overhead.sh   (~8 minutes; tables last, raw in $OUT/cadence.tgz)
# SPECS picks the batches ("BATCH SAMPLES BUDGET_S;..."), e.g. three ABBA rounds at batch 1024 only:
#   SPECS="1024 50000 480" scripts/device/cadence_overhead.sh
# What `auto` picked is read from each run's archive (runs/<id>/steps.jsonl, the step messages'
# `every`: the steps one timed step's samples cover) and printed under each table.
set -u
cd "$(dirname "$0")/../.."
. scripts/device/common.sh
R=$OUT/cadence; mkdir -p "$R"
SPECS=${SPECS:-"256 30000 ${B256_S:-170};1024 100000 ${B1024_S:-250}"}
BATCHES=""
IFS=';' read -ra specs <<< "$SPECS"
for spec in "${specs[@]}"; do
  set -- $spec
  BATCHES="$BATCHES $1"
  sub=$(mktemp -d)
  OUT=$sub ARMS="bare ddptop10 auto" KS=1 BATCH=$1 SAMPLES=$2 BUDGET_S=$3 \
    bash scripts/device/loop_overhead.sh > "$R/batch$1.txt" 2>&1
  mkdir -p "$R/batch$1" && cp -r "$sub"/. "$R/batch$1/"
  # What each instrumented run timed: the `every` of its step messages after the warm-up epoch.
  for j in "$R/batch$1"/overhead_{auto,ddptop10}_k1_*.log; do
    [ -f "$j" ] || continue
    ${DDPTOP_PYTHON} - "$j" "${DDPTOP_DATA_DIR:-/tmp/ddptop-data-overhead}" >> "$R/batch$1/picked.txt" <<'PY'
import collections, json, os, sys
run = json.load(open(sys.argv[1]))["runs"][0]
arch = os.path.join(sys.argv[2], "runs", run["run_id"], "steps.jsonl")
seen = collections.Counter()
for line in open(arch) if os.path.exists(arch) else []:
    m = json.loads(line)
    if m.get("type") == "step" and m.get("epoch", 0) >= 1:
        seen[m.get("every", 1)] += 1
print(f"{os.path.basename(sys.argv[1])}: {run.get('settings')}, step median {run.get('step_ms_median') or 0:.1f} ms, "
      f"timed-step messages by `every` (epochs >= 1): {dict(sorted(seen.items())) or 'no archive'}")
PY
  done
done
tar -czf "$OUT/cadence.tgz" -C "$OUT" cadence
for b in $BATCHES; do echo "== batch $b (k=1, $(head -1 "$R/batch$b/gpus_before.csv" >/dev/null; sed -n 2p "$R/batch$b/gpus_before.csv"))"; cat "$R/batch$b/loop_overhead_table.txt" 2>/dev/null || tail -5 "$R/batch$b.txt"; cat "$R/batch$b/picked.txt" 2>/dev/null; done
