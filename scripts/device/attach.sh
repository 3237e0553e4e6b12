#!/usr/bin/env bash
# `ddptop attach` on 2×H200: examples/train_ddp.py, an unmodified tutorial-style DDP script
# (init_process_group("nccl"), one GPU per rank, DistributedSampler + DataLoader, SGD), headless
# at k=1 and k=2 (one curve), then at k=2 hung by an injected fault (caught, flight recorder read,
# stopped). About 2.5 minutes. Run from the repo root; logs and JSON under $OUT, a table last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3} PYTHONUNBUFFERED=1
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-attach-data}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=target/release/ddptop; [ -x "$B" ] || B=./.carry/ddptop
# 74M parameters (296 MB of fp32 gradients, several 25 MiB buckets), 256 samples per rank.
SCRIPT=(examples/train_ddp.py --epochs 3 --samples 131072 --batch-size 256 --hidden 8192 --workers 4)
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.log"; }
attach() { local name=$1 limit=$2; shift 2; log "$name: ddptop attach $* -- ${SCRIPT[*]}"
  local t0; t0=$(date +%s.%N)
  timeout "$limit" "$B" attach "$@" --json -- "${SCRIPT[@]}" > "$OUT/$name.json" 2>> "$OUT/stderr.log"
  local rc=$?; log "$name rc=$rc wall=$(awk -v a="$(date +%s.%N)" -v b="$t0" "BEGIN {printf \"%.1f\", a - b}") s"; }
nvidia-smi --query-gpu=index,name,memory.used --format=csv > "$OUT/gpus.txt" 2>&1
attach curve 150 --k 1,2 --backend nccl
attach hang 80 --k 2 --backend nccl --inject hang:40 --hang-floor 5
log "GPU compute processes left:"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$OUT/steps.log"
log "python processes left:"
ps -eo pid,pgid,stat,cmd | grep -E "train_ddp|torchrun|torch.distributed" | grep -v grep | tee -a "$OUT/steps.log"
tar czf "$OUT/rundirs.tgz" -C "$DDPTOP_DATA_DIR" runs 2>/dev/null
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
print(f"{'run':6} {'k':>2} {'status':9} {'samples/s':>10} {'per-rank':>17} {'speedup':>7} {'instrument':10} "
      f"{'steps':>11} {'buckets (MiB:comm ms)':32} transport / reason")
for name in ("curve", "hang"):
    path = os.path.join(out, name + ".json")
    try:
        doc = json.load(open(path))
    except Exception as e:  # noqa: BLE001 - the table says what is missing
        print(f"{name:6} no report ({e})"); continue
    for r in doc["runs"]:
        per = r.get("per_rank_samples_per_s") or []
        tl = (r.get("timeline") or [{}])[0]
        b = tl.get("buckets") or []
        buckets = ",".join(f"{x['bytes'] / 2**20:.0f}:{x['comm_ms']:.2f}" for x in b)
        sps, sp = r.get("samples_per_s"), r.get("speedup")
        print(f"{name:6} {r['k']:>2} {r['status']:9} {sps and round(sps) or '-':>10} "
              f"{'/'.join(str(round(p)) for p in per) or '-':>17} {sp and round(sp, 2) or '-':>7} "
              f"{str(r.get('instrument')):10} {'/'.join(map(str, r.get('steps') or [])):>11} "
              f"{buckets[:32]:32} {r.get('transport') or ''} {(r.get('reason') or '')[:160]}")
        for h in (r.get("hang_report") or [])[:6]:
            print("       ", h[:200])
PY
