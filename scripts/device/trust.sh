#!/usr/bin/env bash
# Issue 10: the cost model's prediction against the measurement on 2 GPUs.
# For each setting (ddptop's defaults; --env NCCL_P2P_DISABLE=1): an `allreduce` sweep at k=2
# (the busbw the model reads), then a weak k=1,2 sweep (the k=1 run's bucket-ready times and step
# time are the model's input; the k=2 run is what it predicts). Then `ddptop runs --json`, and a
# table: setting, k, measured and predicted samples/s, error %, exposed comm, per-bucket all-reduce
# time predicted/measured with error % (measured = the NCCL kernel's own time when the worker
# measured it, else done - start, marked "inf").
# Run from the repo root; needs the release binary (target/release/ddptop or .carry/ddptop).
# Logs go to $OUT; the table is printed last. About 3 minutes (capped at 4).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# A store of its own, in $OUT: no earlier run can be a baseline, and runs.db comes back.
export DDPTOP_DATA_DIR="$OUT/ddptop-data"
PY=${DDPTOP_PYTHON}
B=${DDPTOP_BIN:-target/release/ddptop}; [ -x "$B" ] || B=./.carry/ddptop
SAMPLES=${SAMPLES:-40000}; EPOCHS=${EPOCHS:-2}
BACKEND=${BACKEND:-nccl}  # BACKEND=sim checks the script itself on a machine without GPUs
PROBE=${PROBE:-0}  # PROBE=1 adds a probe --k 2 per setting (probe ratio; ~40 s more each)
T0=$(date +%s)
log() { echo "== $(date -u +%T) +$(( $(date +%s) - T0 ))s $*" | tee -a "$OUT/trust.log"; }

step() {  # step NAME TIMEOUT ARGS... : one ddptop run, JSON to $OUT/NAME.json
  local name=$1 t=$2; shift 2
  log "$name: $B run $*"
  timeout -k 10 "$t" "$B" run "$@" --backend "$BACKEND" --json > "$OUT/$name.json" 2> "$OUT/$name.stderr"
  log "$name: rc=$? $(tail -n 1 "$OUT/$name.stderr")"
}

nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv > "$OUT/gpus_before.csv" 2>&1
log "binary $B; samples $SAMPLES, epochs $EPOCHS (epoch 0 warm-up)"
for setting in default p2p_off; do
  env=(); [ "$setting" = p2p_off ] && env=(--env NCCL_P2P_DISABLE=1)
  step "allreduce_$setting" 60 allreduce --k 2 "${env[@]}"
  step "weak_$setting" 110 weak --k 1,2 --model resnet18 --batch 256 \
    --samples "$SAMPLES" --epochs "$EPOCHS" "${env[@]}"
  [ "$PROBE" = 1 ] && step "probe_$setting" 90 probe --k 2 "${env[@]}"
done
"$B" runs --json > "$OUT/runs.json" 2> "$OUT/runs.stderr"
log "ddptop runs --json: rc=$?"
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu --format=csv > "$OUT/gpus_after.csv" 2>&1
nvidia-smi --query-compute-apps=pid,process_name --format=csv > "$OUT/gpu_procs_after.csv" 2>&1
log "total $(( $(date +%s) - T0 )) s"

$PY - "$OUT" <<'PY' | tee "$OUT/trust_table.txt"
import json, os, sys
out = sys.argv[1]
def f(x, fmt="{:.1f}"):
    return "—" if x is None else fmt.format(x)
print("setting  k  measured  predicted  err%   exposed pred/meas ms  buckets pred/meas ms (err%)  k=1 run / busbw from")
for setting in ("default", "p2p_off"):
    path = os.path.join(out, f"weak_{setting}.json")
    try:
        doc = json.load(open(path))
    except Exception as e:
        print(f"{setting:<8} no report ({e})")
        continue
    for r in doc.get("runs", []):
        p = r.get("prediction") or {}
        if r["k"] == 1:
            print(f"{setting:<8} 1  {f(r.get('samples_per_s')):>8}  {'(input)':>9}  {'':>5}  {r['status']}")
            continue
        if "na" in p or not p:
            print(f"{setting:<8} {r['k']}  {f(r.get('samples_per_s')):>8}  n/a: {p.get('na', r['status'])}")
            continue
        s, e = p["samples_per_s"], p["exposed_ms"]
        bk = " ".join(
            f"b{b['index']} {f(b['predicted_ms'], '{:.3f}')}/{f(b['measured_ms'], '{:.3f}')}"
            f"{'inf' if b['measured_inferred'] else ''} ({f(b['error_pct'], '{:+.0f}')})"
            for b in p["buckets"])
        print(f"{setting:<8} {r['k']}  {s['measured']:>8.1f}  {s['predicted']:>9.1f}  {s['error_pct']:>+5.1f}  "
              f"{f(e['predicted'], '{:.3f}')}/{f(e['measured'], '{:.3f}')}  {bk}  {p['baseline_run_id']} / {p['busbw_source']}")
    ppath = os.path.join(out, f"probe_{setting}.json")
    if os.path.exists(ppath):
        for r in json.load(open(ppath)).get("runs", []):
            m = r.get("probe_model")
            if m:
                print(f"{setting:<8} probe k={r['k']}: difference {f(r.get('probe', {}).get('difference_ms'), '{:.3f}')} ms, "
                      f"control {f(m.get('control_ms'), '{:.3f}')} ms, predicted exposed "
                      f"{f(m.get('predicted_exposed_ms'), '{:.3f}')} ms, (diff-control)/model {f(m.get('ratio'), '{:.2f}')} {m.get('na', '')}")
PY
