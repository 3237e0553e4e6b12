#!/usr/bin/env bash
# The 2×H200 runs of docs/results/h200x2.md, through ddptop's headless mode.
# Run from the repo root on the GPU machine with the release binary at .carry/ddptop.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3} DDPTOP_DATA_DIR=/tmp/ddptop-data PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=./.carry/ddptop
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; }
run() { local name=$1; shift; log "$name: ddptop run $*"; local t0=$(date +%s.%N)
  timeout 240 $B run "$@" --json > "$OUT/$name.json" 2>> "$OUT/stderr.log"; local rc=$?
  log "$name rc=$rc wall=$(echo "$(date +%s.%N) - $t0" | bc) s"; }
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
run weak        weak --k 1,2
run weak_p2poff weak --k 2 --env NCCL_P2P_DISABLE=1
run probe       probe --k 2
run ar          allreduce --k 2
run ar_p2poff   allreduce --k 2 --env NCCL_P2P_DISABLE=1
run ar_p2poff_memcpy allreduce --k 2 --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_USE_CUDA_MEMCPY=1
run deadlock    weak --k 2 --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_USE_CUDA_MEMCPY=1 --startup-timeout 45
log "GPU compute processes left:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$OUT/steps.log"
log "python processes left:"; ps -eo pid,pgid,stat,cmd | grep -E "ddptop_worker|torch.distributed|torchrun" | grep -v grep | tee -a "$OUT/steps.log"
cp -r /tmp/ddptop-data/runs "$OUT/rundirs" 2>/dev/null; tar czf "$OUT/rundirs.tgz" -C "$OUT" rundirs 2>/dev/null; rm -rf "$OUT/rundirs"
python3 - "$OUT" <<'PY'
import json,sys,glob,os
out=sys.argv[1]
for f in sorted(glob.glob(out+"/*.json")):
    d=json.load(open(f)); n=os.path.basename(f)[:-5]
    for r in d["runs"]:
        extra=""
        if r.get("probe"): p=r["probe"]; extra=f"probe synced {p['synced_ms']['median']:.2f} no_sync {p['no_sync_ms']['median']:.2f} diff {p['difference_ms']:.2f}"
        if r.get("bench"): extra=" ".join(f"{b['bytes']>>20 if b['bytes']>=1<<20 else b['bytes']}:{b['busbw_gbs']:.1f}" for b in r["bench"])
        if r.get("timeline"): extra+=" buckets(us) "+",".join(f"{b['comm_ms']*1e3:.0f}" for b in r["timeline"][0]["buckets"])+f" overlap {r['timeline'][0]['overlap_pct']}"
        sps=r.get("samples_per_s"); print(f"{n:18} k={r['k']} {r['status']:9} sps={sps and round(sps)} speedup={r.get('speedup') and round(r['speedup'],3)} transport={r.get('transport')} {extra} {(r.get('reason') or '')[:200]}")
        for h in r.get("hang_report") or []: print("     ", h[:300])
PY
