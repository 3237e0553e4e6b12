#!/usr/bin/env bash
# Issue 48 on the CPU, on the GPU machine's quiet 16-core host: scripts/loader_cpu.sh (the
# book's loader loop vs `ddptop run weak --data-path loader`, gloo, k=1, tiny model, one OpenMP
# thread, interleaved rounds) with every arm pinned to the same cores (PIN, default 2-5: the rank
# and its 2 loader workers, ddptop and torchrun beside them) and no GPU visible. Unpinned, the
# same comparison on that host moved ~20% between two epochs of one run
# (docs/results/loader.md); pinning is meant to take the scheduler's placement out of it.
#   ROUNDS=10 SAMPLES=3072 EPOCHS=2 BUDGET_S=500 scripts/device/loader_cpu_pinned.sh
# Writes $OUT/loader_cpu_pinned.tgz (every run's log, the table) and prints the table last.
set -u
cd "$(dirname "$0")/../.."
. scripts/device/common.sh
need_torchvision || { echo "loader_cpu_pinned: needs torchvision (see $OUT/pip.log)"; exit 1; }
export CUDA_VISIBLE_DEVICES= DDPTOP_BIN=$(ddptop_bin)
export PIN=${PIN:-2-5} ROUNDS=${ROUNDS:-10} SAMPLES=${SAMPLES:-3072} EPOCHS=${EPOCHS:-2}
export BUDGET_S=${BUDGET_S:-500} ARMS=${ARMS:-book loader}
R=$OUT/loader_cpu_pinned; mkdir -p "$R"
{ nproc; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node|MHz"; cut -d' ' -f1-3 /proc/loadavg
  $DDPTOP_PYTHON -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
  "$DDPTOP_BIN" --version; } > "$R/env.txt" 2>&1
OUT=$R bash scripts/loader_cpu.sh > "$R/stdout.txt" 2>&1
tar -czf "$OUT/loader_cpu_pinned.tgz" --exclude=ddptop-data -C "$OUT" loader_cpu_pinned
cat "$R/env.txt"; tail -4 "$R/stdout.txt"
