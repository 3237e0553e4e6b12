#!/usr/bin/env bash
# The book's deadlock through ddptop (time from last progress to "hung"), and the
# instrumentation overhead: a bare DDP loop (no hook, no events, no messages) against ddptop's
# instrumented run, interleaved A B A B at k=2 in one session.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3} DDPTOP_DATA_DIR=/tmp/ddptop-data PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; B=./.carry/ddptop
echo "== $(date -u +%T) deadlock"; timeout 200 $B run weak --k 2 --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_USE_CUDA_MEMCPY=1 --json > "$OUT/deadlock.json" 2>>"$OUT/stderr.log"; echo "rc=$?"
echo "== GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
for i in 1 2; do
  echo "== $(date -u +%T) bare $i"
  PYTHONPATH=workers timeout 200 torchrun --standalone --nproc-per-node=2 -m ddptop_worker train --backend nccl --no-instrument 2>&1 | grep -iE "samples/s" | tail -2 | tee -a "$OUT/overhead.txt"
  echo "== $(date -u +%T) ddptop $i"
  timeout 200 $B run weak --k 2 --json > "$OUT/inst$i.json" 2>>"$OUT/stderr.log"
  python3 -c "import json;r=json.load(open('$OUT/inst$i.json'))['runs'][0];print('instrumented', r['status'], r['samples_per_s'])" | tee -a "$OUT/overhead.txt"
done
python3 - "$OUT" <<'PY'
import json,sys
d=json.load(open(sys.argv[1]+"/deadlock.json"))["runs"][0]
print(d["status"], d["reason"]); [print("  ",h) for h in d["hang_report"]]
PY
