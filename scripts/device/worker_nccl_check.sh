#!/usr/bin/env bash
# The worker's NCCL-only paths, checked on 2 GPUs against the fake ddptop of the worker tests
# (workers/scripts/gpu_check.py): per-bucket kernel_ms from Work._get_duration with
# TORCH_NCCL_ENABLE_TIMING (train2), the live probe's label, warm-up and DDP-logger switch
# (control2: probe_on/probe_off/dump_fr/stop during training), the standalone probe (probe2).
# No ddptop binary needed. Logs and messages.jsonl in $OUT/gpu_check; a table last. About 2 min.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=${DDPTOP_PYTHON:-python3}
GPU_CHECK_BUDGET_S=150 timeout 240 $PY workers/scripts/gpu_check.py "$OUT/gpu_check" train2 control2 probe2 \
  > "$OUT/gpu_check.log" 2>&1
echo "gpu_check rc=$?"
$PY - "$OUT/gpu_check/summary.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name in ("train2", "control2", "probe2"):
    v = d.get(name)
    if not isinstance(v, dict):
        print(f"{name}: {v}")
        continue
    print(f"{name}: rc {v.get('rc')}, {v.get('wall_s')} s, aggregate {v.get('aggregate_samples_per_s')} samples/s")
    if "bucket_us_median_last20" in v:
        spans = v["bucket_us_median_last20"]
        kern = v.get("bucket_kernel_us_median_last20") or {}
        queue = v.get("bucket_queue_us_median_last20") or {}
        print(f"  start_inferred {v.get('start_inferred')}; per bucket (bytes: done-start us | kernel us | start-ready us):")
        for i, (nb, us) in spans.items():
            print(f"    {i}: {nb}: {us} | {kern.get(i)} | {queue.get(i)}")
    for key in ("probe_synced_ms", "probe_no_sync_ms", "probe_live", "plans", "control"):
        if key in v:
            print(f"  {key}: {v[key]}")
    for line in v.get("logs", []):
        if any(w in line for w in ("probe", "kernel", "DDP logger", "timing")):
            print(f"  log {line[:180]}")
PY
