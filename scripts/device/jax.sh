#!/usr/bin/env bash
# JAX on 2×H200 (issue 14), through ddptop's headless mode: `ddptop run jax --k 1,2` (data
# sharding: batch split, weights replicated) and `--k 2 --sharding fsdp`, each run's HLO receipt
# with the compiled HLO text kept in $OUT/hlo, then one table: collectives per kind, the largest
# all-reduce, samples/s, the k=1 equality check and peak memory per GPU.
# Run from the repo root on the GPU machine (jax with CUDA, flax, optax, torch). Three processes,
# each compiling ResNet-18's step (k=2 twice: the k=1 equality check): about 3-4 minutes, not yet
# measured; each run is capped at 170 s.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3} DDPTOP_DATA_DIR=/tmp/ddptop-jax PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/hlo"
if [ -x ./target/release/ddptop ]; then B=./target/release/ddptop; else B=./.carry/ddptop; fi
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/jax_steps.log"; }
run() { local name=$1; shift; log "$name: ddptop run $*"; local t0=$(date +%s)
  timeout 170 $B run "$@" --backend nccl --samples 30000 --env "DDPTOP_JAX_HLO_DIR=$OUT/hlo" --json \
    > "$OUT/$name.json" 2>> "$OUT/jax_stderr.log"
  log "$name rc=$? wall=$(( $(date +%s) - t0 )) s"; }
log "versions: $($DDPTOP_PYTHON -c 'import jax, flax, optax; print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__, jax.devices())' 2>&1 | tail -1)"
run jax_data jax --k 1,2
run jax_fsdp jax --k 2 --sharding fsdp
log "GPU compute processes left:"; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$OUT/jax_steps.log"
cp -r "$DDPTOP_DATA_DIR/runs" "$OUT/jax_rundirs" 2>/dev/null
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
print(f"{'run':9} {'k':>2} {'shard':5} {'status':9} {'samples/s':>9} {'AR ops':>6} {'largest AR elems':>16} "
      f"{'AR MB':>7} {'AG ops':>6} {'RS ops':>6} {'check |diff|':>12}  combined by / peak MB per GPU")
for f in sorted(glob.glob(out + "/jax_*.json")):
    name = os.path.basename(f)[:-5]
    try:
        doc = json.load(open(f))
    except ValueError as e:
        print(f"{name:9} no JSON ({e}); see jax_stderr.log"); continue
    for r in doc["runs"]:
        rc = r.get("receipt") or {}
        ops = rc.get("ops") or {}
        ar, ag, rs = (ops.get(k) or {} for k in ("all_reduce", "all_gather", "reduce_scatter"))
        chk = (r.get("checks") or [{}])[0]
        diff = f"{chk['diff']:.1e}{'' if chk.get('ok') else ' FAIL'}" if "diff" in chk else "-"
        peaks = ",".join(f"{m['peak_bytes'] / 1e6:.0f}" for m in r.get("device_memory") or [] if m.get("peak_bytes"))
        sps = r.get("samples_per_s")
        print(f"{name[4:]:9} {r['k']:>2} {r.get('sharding', '?'):5} {r['status']:9} "
              f"{(round(sps) if sps else '-'):>9} {ar.get('count', '-'):>6} {ar.get('largest_elems', '-'):>16} "
              f"{(round(ar['total_bytes'] / 1e6, 1) if ar.get('total_bytes') is not None else '-'):>7} "
              f"{ag.get('count', '-'):>6} {rs.get('count', '-'):>6} {diff:>12}  "
              f"{'+'.join(rc.get('combined_by') or []) or '-'} / {peaks or '-'}"
              + (f"  reason: {r['reason'][:150]}" if r.get("reason") else ""))
PY
