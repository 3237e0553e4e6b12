#!/usr/bin/env bash
# Issue 43: the loop shapes of workers/scripts/shapes/ under `ddptop attach --k 1` on one GPU
# with NCCL (ddptop's profiler plugin on, sampled timing: ddptop's defaults), each also run bare
# under torchrun. Every shape script prints its own steady-state samples/s over the steps ddptop
# counts; the table sets the script's figure beside ddptop's (and the bare run's). Shapes:
# gradient accumulation (4 micro-batches, no_sync) without and with the fp16 compression comm
# hook, torch.compile(DDP(model)) (inductor; with a recompile at step ODD), DDP(compile(model)),
# static_graph=True, find_unused_parameters=True, and (added second) a PyTorch Lightning
# Trainer(strategy="ddp") script, a Hugging Face Accelerate loop with gradient_accumulation_steps=4
# and FSDP2 (fully_shard). Run from the repo root with the release binary in target/release/ (or
# .carry/). $OUT gets table.txt and attach_shapes.tgz (every report, stderr, bare log and run
# folder: the device returns only a few files). SHAPES_ONLY="lightning_ddp accelerate_accum fsdp2"
# runs those only. K=2 (on two GPUs, nvidia-h200-x2) attaches and runs bare at k=2: the shapes'
# own figure is global at any k (the gloo k=2 tests compare against it), so the table reads alike.
#
# Lightning and Accelerate are test dependencies, not the tool's: when the python lacks them they
# are installed with `pip install --no-index --find-links .carry/wheels` (the device has no
# network; carry .carry/wheels, made with `pip download --no-deps` for cp312 manylinux: lightning
# 2.6.6, accelerate 1.16.0 and their dependencies, torch left out), torch pinned to the version
# installed. Where the environment refuses installs, the wheels of the missing modules go to a
# folder on PYTHONPATH instead (--no-deps --target). What happened is in $OUT's pip.log.
# The wheels (31 files, 30 MB), from the repo root on a machine with PyPI:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --abi cp312 --abi abi3 --abi none --platform manylinux_2_28_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     --platform manylinux_2_5_x86_64 --platform any -d .carry/wheels accelerate==1.16.0 \
#     aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 anyio==4.16.0 attrs==26.1.0 \
#     click==8.5.1 filelock==4.3.2 frozenlist==1.8.0 fsspec==2026.9.0 h11==0.16.0 hf-xet==1.8.0 \
#     httpcore2==2.16.2 httpx2==2.16.2 huggingface-hub==2.4.0 idna==3.20 lightning==2.6.6 \
#     lightning-utilities==0.15.3 multidict==7.2.1 numpy==2.4.6 packaging==26.4 \
#     propcache==0.5.4 psutil==7.2.2 pytorch-lightning==2.6.6 pyyaml==6.0.4 safetensors==0.8.0 \
#     torchmetrics==1.9.0 tqdm==4.70.1 truststore==0.10.5 typing-extensions==4.16.0 yarl==1.25.1
# (the closure of lightning's and accelerate's requirements in the test venv, torch left out).
# DDPTOP_BIN: the ddptop binary (default target/release/ddptop, else .carry/ddptop); ddptop's
# NCCL profiler plugin is looked for beside it.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-$(mktemp -d /tmp/ddptop-attach-shapes.XXXX)}
FINAL=${OUT:-/tmp/out}; OUT=${RAW:-$(mktemp -d /tmp/attach-shapes-raw.XXXX)}; mkdir -p "$FINAL" "$OUT/bare"
B=${DDPTOP_BIN:-target/release/ddptop}; [ -x "$B" ] || B=./.carry/ddptop
K=${K:-1}
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
  "lightning_ddp|$S/lightning_ddp.py"
  "accelerate_accum|$S/accelerate_accum.py --accum 4"
  "fsdp2|$S/fsdp2.py"
)
if [ -n "${SHAPES_ONLY:-}" ]; then
  kept=(); for e in "${SHAPES[@]}"; do [[ " $SHAPES_ONLY " == *" ${e%%|*} "* ]] && kept+=("$e"); done
  SHAPES=("${kept[@]}")
fi
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/steps.log"; }
# Lightning and Accelerate from the carried wheels when the python lacks them.
frameworks() {
  "$DDPTOP_PYTHON" -c "import lightning, accelerate" 2>/dev/null && return 0
  local tv; tv=$("$DDPTOP_PYTHON" -c "import torch; print(torch.__version__.split('+')[0])")
  log "installing lightning==2.6.6 accelerate==1.16.0 from .carry/wheels (torch==$tv kept)"
  echo "torch==$tv" > "$OUT/torch-constraint.txt"
  "$DDPTOP_PYTHON" -m pip install --no-index --find-links .carry/wheels \
    --constraint "$OUT/torch-constraint.txt" lightning==2.6.6 accelerate==1.16.0 >> "$OUT/pip.log" 2>&1 \
    && "$DDPTOP_PYTHON" -c "import lightning, accelerate" 2>/dev/null && return 0
  # An externally managed python (or no pip rights): the missing modules' wheels, no deps, on
  # PYTHONPATH (attach keeps the caller's PYTHONPATH after its own entries).
  local site=/tmp/attach-shapes-site; mkdir -p "$site"
  local pairs="lightning:lightning pytorch_lightning:pytorch_lightning accelerate:accelerate
    torchmetrics:torchmetrics lightning_utilities:lightning_utilities huggingface_hub:huggingface_hub
    safetensors:safetensors hf_xet:hf_xet tqdm:tqdm yaml:pyyaml psutil:psutil numpy:numpy
    packaging:packaging fsspec:fsspec aiohttp:aiohttp aiohappyeyeballs:aiohappyeyeballs
    aiosignal:aiosignal attr:attrs frozenlist:frozenlist multidict:multidict propcache:propcache
    yarl:yarl idna:idna anyio:anyio click:click h11:h11 httpcore2:httpcore2 httpx2:httpx2
    truststore:truststore typing_extensions:typing_extensions filelock:filelock"
  local whls=() mod dist
  for p in $pairs; do
    mod=${p%%:*}; dist=${p#*:}
    "$DDPTOP_PYTHON" -c "import $mod" 2>/dev/null && continue
    whls+=(.carry/wheels/"$dist"-[0-9]*.whl)
  done
  log "pip into the environment failed; --no-deps --target $site: ${whls[*]##*/}"
  "$DDPTOP_PYTHON" -m pip install -q --no-index --no-deps --target "$site" "${whls[@]}" >> "$OUT/pip.log" 2>&1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  "$DDPTOP_PYTHON" -c "import lightning, accelerate" >> "$OUT/pip.log" 2>&1
}
frameworks || log "lightning/accelerate not importable (pip.log): those shapes will fail"
nvidia-smi --query-gpu=index,name,memory.used --format=csv > "$OUT/gpus.txt" 2>&1
"$DDPTOP_PYTHON" -c "import torch; print(torch.__version__, torch.version.cuda)" > "$OUT/torch.txt" 2>&1
for entry in "${SHAPES[@]}"; do
  name=${entry%%|*}; read -r -a script <<< "${entry#*|}"
  log "$name: ddptop attach --k $K --backend nccl -- ${script[*]} ${COMMON[*]}"
  t0=$(date +%s)
  timeout -k 5 "$CAP" "$B" attach --k "$K" --backend nccl --json -- "${script[@]}" "${COMMON[@]}" \
    > "$OUT/$name.json" 2> "$OUT/$name.stderr"
  log "$name rc=$? wall=$(( $(date +%s) - t0 )) s"
  log "$name bare: torchrun --standalone --nproc-per-node=$K ${script[*]} ${COMMON[*]}"
  timeout -k 5 "$CAP" "$DDPTOP_PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$K" \
    "${script[@]}" "${COMMON[@]}" > "$OUT/bare/$name.log" 2>&1
  log "$name bare rc=$?"
done
log "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
cp -r "$DDPTOP_DATA_DIR/runs" "$OUT/runs" 2>/dev/null
python3 - "$OUT" "${SHAPES[@]}" <<'PY' | tee "$OUT/table.txt"
import json, re, sys
out, shapes = sys.argv[1], [s.split("|")[0] for s in sys.argv[2:]]
def figure(text, pat=r"script samples/s: ([0-9.]+)"):
    # lightning_ddp / accelerate_accum / fsdp2 print it alike.
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
