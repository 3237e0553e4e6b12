#!/usr/bin/env bash
# The cost of the `auto` timing cadence (DDPTOP_TIME_EVERY=auto, ddptop's GPU default since
# 2026-12-05: one step timed every 0.2-0.45 s) against the old fixed 1 in 10 and the bare d2l
# loop, on one GPU, k=1, interleaved (scripts/device/loop_overhead.sh's rounds, order reversed
# every other round): batch 256 (the book's, ~52 ms steps on an H100: auto times 1 in 8) and
# batch 1024 (~4x slower steps: auto times 1 in 2, where 1 in 10 would space timed steps ~2 s).
#   scripts/device/cadence_overhead.sh   (~8 minutes; tables last, raw in $OUT/cadence.tgz)
set -u
cd "$(dirname "$0")/../.."
. scripts/device/common.sh
R=$OUT/cadence; mkdir -p "$R"
for spec in "256 30000 ${B256_S:-170}" "1024 100000 ${B1024_S:-250}"; do
  set -- $spec
  sub=$(mktemp -d)
  OUT=$sub ARMS="bare ddptop10 auto" KS=1 BATCH=$1 SAMPLES=$2 BUDGET_S=$3 \
    bash scripts/device/loop_overhead.sh > "$R/batch$1.txt" 2>&1
  mkdir -p "$R/batch$1" && cp -r "$sub"/. "$R/batch$1/"
  # What auto picked: the worker's first log line says the cadence, the step messages' `every`.
done
tar -czf "$OUT/cadence.tgz" -C "$OUT" cadence
for b in 256 1024; do echo "== batch $b (k=1, $(head -1 "$R/batch$b/gpus_before.csv" >/dev/null; sed -n 2p "$R/batch$b/gpus_before.csv"))"; cat "$R/batch$b/loop_overhead_table.txt" 2>/dev/null || tail -5 "$R/batch$b.txt"; done
