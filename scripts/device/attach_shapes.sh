#!/usr/bin/env bash
# Issue 43: the loop shapes of workers/scripts/shapes/ under `ddptop attach --k 1` on one GPU
# with NCCL (ddptop's profiler plugin on, sampled timing: ddptop's defaults), each also run bare
# under torchrun. Every shape script prints its own steady-state samples/s over the steps ddptop
# counts; the table sets the script's figure beside ddptop's (and the bare run's). Shapes:
# gradient accumulation (4 micro-batches, no_sync) without and with the fp16 compression comm
# hook, torch.compile(DDP(model)) (inductor; with a recompile at step ODD), DDP(compile(model)),
# static_graph=True, find_unused_parameters=True. Run from the repo root with the release binary
# in target/release/ (or .carry/). $OUT gets table.txt and attach_shapes.tgz (every report,
# stderr, bare log and run folder: the device returns only a few files).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-$(mktemp -d /tmp/ddptop-attach-shapes.XXXX)}
FINAL=${OUT:-/tmp/out}; OUT=${RAW:-$(mktemp -d /tmp/attach-shapes-raw.XXXX)}; mkdir -p "$FINAL" "$OUT/bare"
B=target/release/ddptop; [ -x "$B" ] || B=./.carry/ddptop
S=workers/scripts/shapes
STEPS=${STEPS:-300} ODD=${ODD:-150} CAP=${CAP:-240}
# An MLP HIDDEN wide, BATCH samples per micro-batch (8192, 512: a few ms per step on an H200).
COMMON=(--steps "$STEPS" --hidden "${HIDDEN:-8192}" --batch "${BATCH:-512}")
SHAPES=(
  "accum|$S/accum.py"
  "accum_fp16_hook|$S/accum_fp16_hook.py"
  "compiled_ddp|$S/compiled_ddp.py --odd-step $ODD"
  "ddp_compiled|$S/ddp_compiled.py"
  "static_graph|$S/static_graph.py"
  "find_unused|$S/find_unused.py"
)
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/steps.log"; }
nvidia-smi --query-gpu=index,name,memory.used --format=csv > "$OUT/gpus.txt" 2>&1
"$DDPTOP_PYTHON" -c "import torch; print(torch.__version__, torch.version.cuda)" > "$OUT/torch.txt" 2>&1
for entry in "${SHAPES[@]}"; do
  name=${entry%%|*}; read -r -a script <<< "${entry#*|}"
  log "$name: ddptop attach --k 1 --backend nccl -- ${script[*]} ${COMMON[*]}"
  t0=$(date +%s)
  timeout -k 5 "$CAP" "$B" attach --k 1 --backend nccl --json -- "${script[@]}" "${COMMON[@]}" \
    > "$OUT/$name.json" 2> "$OUT/$name.stderr"
  log "$name rc=$? wall=$(( $(date +%s) - t0 )) s"
  log "$name bare: torchrun --standalone --nproc-per-node=1 ${script[*]} ${COMMON[*]}"
  timeout -k 5 "$CAP" "$DDPTOP_PYTHON" -m torch.distributed.run --standalone --nproc-per-node=1 \
    "${script[@]}" "${COMMON[@]}" > "$OUT/bare/$name.log" 2>&1
  log "$name bare rc=$?"
done
log "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
cp -r "$DDPTOP_DATA_DIR/runs" "$OUT/runs" 2>/dev/null
python3 - "$OUT" "${SHAPES[@]}" <<'PY' | tee "$OUT/table.txt"
import json, re, sys
out, shapes = sys.argv[1], [s.split("|")[0] for s in sys.argv[2:]]
def figure(text, pat=r"script samples/s: ([0-9.]+)"):
    m = re.search(pat, text)
    return float(m.group(1)) if m else None
print(f"{'shape':16} {'status':10} {'instrument':10} {'script':>9} {'ddptop':>9} {'diff':>7} "
      f"{'bare':>9}  compile")
for name in shapes:
    try:
        r = json.load(open(f"{out}/{name}.json"))["runs"][0]
        log = open(r["output_log"]).read() if r.get("output_log") else ""
    except Exception as e:  # noqa: BLE001 - the table says what is missing
        print(f"{name:16} no report ({e})"); continue
    try:
        bare = figure(open(f"{out}/bare/{name}.log").read())
    except OSError:
        bare = None
    own, ours = figure(log), r.get("samples_per_s")
    diff = f"{100 * (ours / own - 1):+.2f}%" if own and ours else "-"
    fmt = lambda x: f"{x:.0f}" if x else "-"
    c = (r.get("compile") or {}).get("text", "")
    reason = "" if r["status"] == "completed" else (r.get("reason") or "")[:80]
    print(f"{name:16} {r['status']:10} {str(r.get('instrument')):10} {fmt(own):>9} {fmt(ours):>9} "
          f"{diff:>7} {fmt(bare):>9}  {c}{reason}")
PY
cp "$OUT/table.txt" "$FINAL/table.txt"
tar czf "$FINAL/attach_shapes.tgz" -C "$OUT" .
