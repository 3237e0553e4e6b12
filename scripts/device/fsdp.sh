#!/usr/bin/env bash
# Issue 13 on 2×H200: `ddptop run fsdp` with FSDP2 and with DDP, both with Adam on the book's
# ResNet-18 (per-rank batch 256, 60,000 samples, 2 epochs, epoch 0 warm-up), interleaved
# ddp k=1, fsdp k=1, ddp k=2, fsdp k=2. Per run it reports:
# - memory per rank: exact parameter/gradient/optimizer bytes (sums of local shards), the 16P/k
#   prediction, and the CUDA peak and reserved bytes over the last epoch;
# - throughput (samples/s) with speedup against the same strategy's k=1 run;
# - collectives per timed step: all-gathers and reduce-scatters (FSDP) or bucket all-reduces
#   (DDP), bytes and CUDA-event time.
# Run from the repo root; needs the release binary (target/release/ddptop or .carry/ddptop).
# Logs and JSON go to $OUT; the table is printed last. About 3 minutes (runs are cut to stay
# within 4: each gets at most 80 s and what is left of 235 s).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-fsdp}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=${DDPTOP_BIN:-target/release/ddptop}; [ -x "$B" ] || B=./.carry/ddptop
SAMPLES=${SAMPLES:-60000}
T0=$(date +%s)
log() { echo "== $(date -u +%T) +$(( $(date +%s) - T0 ))s $*" | tee -a "$OUT/fsdp.log"; }

nvidia-smi --query-gpu=index,name,memory.total --format=csv > "$OUT/fsdp_gpus.txt" 2>&1
for k in 1 2; do
  for s in ddp fsdp; do
    f="$OUT/fsdp_${s}_k${k}.json"
    log "ddptop run fsdp --k $k --strategy $s --optimizer adam --samples $SAMPLES"
    left=$(( 235 - ($(date +%s) - T0) )); lim=$(( left < 80 ? left : 80 ))
    if [ "$lim" -lt 20 ]; then log "  skipped: the 4-minute budget is spent"; continue; fi
    timeout "$lim" "$B" run fsdp --k "$k" --strategy "$s" --optimizer adam --backend nccl \
      --samples "$SAMPLES" --json > "$f" 2>> "$OUT/fsdp_stderr.log"
    log "  rc=$?"
  done
done
log "GPU processes left:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$OUT/fsdp.log"
cp -r "$DDPTOP_DATA_DIR/runs" "$OUT/fsdp_rundirs" 2>/dev/null
tar czf "$OUT/fsdp_rundirs.tgz" -C "$OUT" fsdp_rundirs 2>/dev/null && rm -rf "$OUT/fsdp_rundirs"

"$DDPTOP_PYTHON" - "$OUT" <<'PY'
import json, sys, glob, os
out = sys.argv[1]
mb = lambda b: "—" if b is None else f"{b / 1e6:.1f}"
gb = lambda b: "—" if b is None else f"{b / 1e9:.2f}"
print("strategy k  samples/s  speedup | rank state_MB pred_MB params/grads/optim_MB peak_GB reserved_GB data_GB | per step: op calls MB ms")
print("  (state: exact local bytes at the last epoch; pred: 16P/k (+ largest gathered block for fsdp k>1); peak: CUDA max allocated over")
print("   the last epoch, includes activations and data_GB, the resident dataset measured before the model existed)")
base = {}  # strategy -> k=1 samples/s (each run is its own invocation: speedup computed here)
for k in (1, 2):
    for s in ("ddp", "fsdp"):
        f = f"{out}/fsdp_{s}_k{k}.json"
        try:
            r = json.load(open(f))["runs"][0]
        except Exception as e:  # a failed run: say so and go on
            print(f"{s:8} {k}  no result ({type(e).__name__}: {e})")
            continue
        sps = r.get("samples_per_s")
        if k == 1 and sps:
            base[s] = sps
        speedup = sps / base[s] if sps and base.get(s) else None
        head = f"{s:8} {k}  {sps and round(sps)!s:>9}  {speedup and round(speedup, 3)!s:>7}"
        if r["status"] != "completed":
            print(head, r["status"], (r.get("reason") or "")[:200])
            continue
        last, data = {}, {}
        for m in r.get("memory", []):
            last[m["rank"]] = m
            if m["phase"] == "data":
                data[m["rank"]] = m.get("allocated_bytes")
        comm = {c["rank"]: c for c in r.get("comm", [])}
        for rank, m in sorted(last.items()):
            ops = comm.get(rank, {}).get("per_step", {})
            ctext = "  ".join(f"{op} {v['calls']:.0f}x {v['bytes'] / 1e6:.1f} {v['ms']:.2f}" for op, v in sorted(ops.items()))
            print(f"{head if rank == 0 else ' ' * len(head)} | r{rank} {mb(m['state_bytes']):>8} {mb(m['predicted_bytes']):>7} "
                  f"{mb(m['param_bytes'])}/{mb(m['grad_bytes'])}/{mb(m['optim_bytes'])} {gb(m['peak_bytes']):>7} {gb(m['reserved_bytes']):>11} {gb(data.get(rank)):>7} | {ctext}")
PY
log "done"
