#!/usr/bin/env bash
# After changing GPU defaults: (1) a default `ddptop run weak --k 1` (steps timed 1 in 10 after
# warm-up): throughput, timed steps and the bucket timeline still there; (2) `--shared-gpus` beside
# another CUDA process: the run goes and carries the "GPUs shared" mark; without the flag it is
# refused naming that process. Table last. About 90 s.
set -u
export NCCL_NVLS_ENABLE=0 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3} DDPTOP_DATA_DIR=/tmp/ddptop-defaults
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=./.carry/ddptop; [ -x "$B" ] || B=target/release/ddptop
timeout 90 "$B" run weak --k 1 --backend nccl --samples 30000 --epochs 2 --json > "$OUT/default.json" 2> "$OUT/default.stderr"
echo "default rc=$?"
python3 - "$OUT/default.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
tl = (r.get("timeline") or [{}])[0]
med = (r.get("timeline_median") or [{}])[0]
print("default:", r["status"], round(r["samples_per_s"] or 0), "step_ms_median", r.get("step_ms_median"),
      "| timeline step", tl.get("step"), "buckets", len(tl.get("buckets") or []),
      "| median", json.dumps(med)[:200])
PY
python3 -c "import torch, time; x = torch.ones(1, device='cuda'); print('holder up', flush=True); time.sleep(60)" &
holder=$!
sleep 8
timeout 30 "$B" run weak --k 1 --backend nccl --samples 10000 --epochs 2 --json > "$OUT/refused.json" 2> "$OUT/refused.stderr"
echo "without --shared-gpus rc=$?: $(grep -v '^\s*$' "$OUT/refused.stderr" | tail -1 | cut -c1-300)"
timeout 60 "$B" --shared-gpus run weak --k 1 --backend nccl --samples 10000 --epochs 2 > "$OUT/shared.txt" 2> "$OUT/shared.stderr"
echo "with --shared-gpus rc=$?:"; cat "$OUT/shared.txt" | cut -c1-250
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
echo "GPU processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
