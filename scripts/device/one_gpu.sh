#!/usr/bin/env bash
# The k=1 CUDA paths of every experiment on a machine with one GPU (when 2 are not lent): does
# each real path run on CUDA, and what does it report. Interleaving and k=2 figures need 2 GPUs
# (trust.sh, handrolled.sh, fsdp.sh, jax.sh, attach.sh). Each run is capped; the table is printed
# last. About 4 minutes. Run from the repo root with the release binaries in .carry/.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-one-gpu}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/hlo"
pick() { for p in "$@"; do [ -x "$p" ] && { echo "$p"; return; }; done; echo "$1"; }
B=$(pick ./.carry/ddptop target/release/ddptop)
export DDPTOP_HANDROLLED=$PWD/$(pick .carry/ddptop-handrolled target/release/ddptop-handrolled)
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/one_gpu.log"; }
run() { local name=$1 cap=$2; shift 2; log "$name: ddptop $*"; local t0; t0=$(date +%s)
  # --json is ddptop's: before a `--`, after which the arguments are the attached script's.
  local args=() a json=0
  for a in "$@"; do
    if [ "$a" = "--" ] && [ $json = 0 ]; then args+=(--json); json=1; fi
    args+=("$a")
  done
  [ $json = 0 ] && args+=(--json)
  timeout -k 5 "$cap" "$B" "${args[@]}" > "$OUT/$name.json" 2> "$OUT/$name.stderr"
  log "$name rc=$? wall=$(( $(date +%s) - t0 )) s"; }
run weak 90 run weak --k 1 --backend nccl --samples 30000 --epochs 2
run handrolled 90 run handrolled --k 1 --backend nccl --model resnet18 --batch 256 --samples 30000 --epochs 2
run fsdp 90 run fsdp --k 1 --strategy fsdp --optimizer adam --backend nccl --samples 30000 --epochs 2
run ddp_adam 90 run fsdp --k 1 --strategy ddp --optimizer adam --backend nccl --samples 30000 --epochs 2
run jax 150 run jax --k 1 --backend nccl --samples 30000 --env "DDPTOP_JAX_HLO_DIR=$OUT/hlo"
run attach 90 attach --k 1 --backend nccl -- examples/train_ddp.py --epochs 2 --samples 65536 \
  --batch-size 256 --hidden 8192 --workers 4
log "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
print(f"{'run':11} {'status':10} {'samples/s':>10}  notes")
for name in ["weak", "handrolled", "fsdp", "ddp_adam", "jax", "attach"]:
    f = f"{out}/{name}.json"
    try:
        r = json.load(open(f))["runs"][0]
    except Exception as e:
        err = open(f"{out}/{name}.stderr").read().strip().splitlines()[-1:] if os.path.exists(f"{out}/{name}.stderr") else []
        print(f"{name:11} {'no JSON':10} {'':>10}  {(err or [str(e)])[0][:110]}")
        continue
    notes = []
    for k in ("transport", "nccl_read", "memory", "hlo", "checks", "instrument", "step_ms_median"):
        v = r.get(k)
        if v:
            notes.append(f"{k}={json.dumps(v)[:90]}")
    if r["status"] != "completed":
        notes.insert(0, (r.get("reason") or "")[:120])
    sps = r.get("samples_per_s")
    print(f"{name:11} {r['status']:10} {sps if sps is None else round(sps):>10}  {'; '.join(notes)[:300]}")
PY
