#!/usr/bin/env bash
# Runs several device scripts back to back in one device call (the device machine is lent by
# the call, so batching saves start-up time). Usage: scripts/device/batch.sh NAME:CAP_S ...
# Each script gets its own $OUT/NAME folder and a wall-clock cap; the tables each prints last
# are repeated at the end, in order.
set -u
export NCCL_NVLS_ENABLE=0
ROOT_OUT=${OUT:-/tmp/out}; mkdir -p "$ROOT_OUT"
for item in "$@"; do
  name=${item%%:*}; cap=${item##*:}
  mkdir -p "$ROOT_OUT/$name"
  start=$(date +%s)
  echo "### $name (cap ${cap}s) $(date -u +%T)"
  OUT="$ROOT_OUT/$name" timeout -k 10 "$cap" bash "scripts/device/$name.sh" \
    > "$ROOT_OUT/$name/stdout.txt" 2>&1
  rc=$?
  echo "### $name rc=$rc in $(( $(date +%s) - start )) s"
  tail -n 25 "$ROOT_OUT/$name/stdout.txt" > "$ROOT_OUT/$name/tail.txt"
done
nvidia-smi --query-compute-apps=pid,process_name --format=csv > "$ROOT_OUT/leftover-gpu-procs.csv" 2>&1
for item in "$@"; do
  name=${item%%:*}
  echo "================ $name"
  cat "$ROOT_OUT/$name/tail.txt"
done
