#!/usr/bin/env bash
# Issue 17: where one dashboard second goes on a GPU box: NVML start, each NVML call of a sample,
# one full frame (`ddptop bench-gpu`, hidden subcommand). About 10 s.
set -u
B=./.carry/ddptop; [ -x "$B" ] || B=target/release/ddptop
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee "$OUT/gpus.csv"
"$B" bench-gpu --samples 30 --period-ms 100 --frames 200 | tee "$OUT/bench_gpu.txt"
