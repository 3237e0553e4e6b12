#!/usr/bin/env bash
# Issue 12: the hand-rolled loop's deficits beside DDP on 2 GPUs. At k=1 then k=2, in one
# session and interleaved: DDP (`ddptop run weak`), then the tch worker as the book wrote it
# (single+star), with one thread per replica (threads+star) and with a ring all-reduce as well
# (threads+ring), all through `ddptop run handrolled --deficits` (d2l ResNet-18, batch 256 per
# rank/replica, synthetic data resident on the device, epoch 0 warm-up).
# Run from the repo root. Needs the release binaries carried in .carry/ (or target/release/):
# ddptop and ddptop-handrolled (built on the CPU machine against pip torch 2.11.0+cu130; ddptop
# puts torch/lib of $DDPTOP_PYTHON, the image's python3, on its LD_LIBRARY_PATH).
# Logs go to $OUT; the deficits table is printed last. About 4 minutes (capped at 5 with the
# drain arm).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-handrolled}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SAMPLES=${SAMPLES:-30000}
pick() { for p in "$@"; do [ -x "$p" ] && { echo "$p"; return; }; done; echo "$1"; }
B=$(pick ./.carry/ddptop target/release/ddptop)
H=$(pick ./.carry/ddptop-handrolled target/release/ddptop-handrolled)
export DDPTOP_HANDROLLED=$PWD/${H#./}
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/handrolled.log"; }

TORCH_LIB=$($DDPTOP_PYTHON -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))" 2>>"$OUT/handrolled.log")
log "ddptop $B, worker $DDPTOP_HANDROLLED, torch/lib $TORCH_LIB"
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$DDPTOP_HANDROLLED" > "$OUT/ldd.txt" 2>&1
grep -E "torch|not found" "$OUT/ldd.txt" | tee -a "$OUT/handrolled.log"

# Smoke: the worker alone sees both GPUs and trains a few tiny steps with each switch (~15 s).
for sw in "single star" "threads ring"; do
  set -- $sw
  LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout 60 "$DDPTOP_HANDROLLED" \
    --k 2 --device cuda --model tiny --batch 64 --samples 4096 --epochs 2 --dispatch "$1" --reduce "$2" \
    >> "$OUT/smoke.log" 2>&1
  log "smoke tiny k=2 $1+$2 rc=$? ($(tail -1 "$OUT/smoke.log"))"
done

# The drain's cost: single+star at k=2 on ResNet-18, every step timed (each step drains every GPU
# at each phase boundary: DDPTOP_TIME_EVERY=1) against 1 step in 10 (ddptop's GPU default `auto` here; the
# other nine issue their work without a drain), interleaved twice. docs/handrolled.md.
for rep in 1 2; do
  for every in 1 10; do
    LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DDPTOP_TIME_EVERY=$every \
      timeout 90 "$DDPTOP_HANDROLLED" --k 2 --device cuda --model resnet18 --batch 256 \
      --samples 16384 --epochs 2 --dispatch single --reduce star >> "$OUT/drain.log" 2>&1
    log "drain arm rep $rep time_every=$every rc=$? ($(tail -1 "$OUT/drain.log"))"
  done
done

# The table: 8 runs (DDP and 3 hand-rolled variants at k=1, 2). SIGTERM at the cap still prints
# the runs that finished.
log "ddptop run handrolled --deficits --k 1,2 --samples $SAMPLES"
t0=$(date +%s)
timeout 200 "$B" run handrolled --deficits --k 1,2 --backend nccl --model resnet18 --batch 256 \
  --samples "$SAMPLES" --epochs 2 --json > "$OUT/deficits.json" 2> "$OUT/deficits.stderr"
log "rc=$? in $(( $(date +%s) - t0 )) s"
log "GPU compute processes left:"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | tee -a "$OUT/handrolled.log"
cp -r "$DDPTOP_DATA_DIR/runs" "$OUT/rundirs" 2>/dev/null
tar czf "$OUT/rundirs.tgz" -C "$OUT" rundirs 2>/dev/null; rm -rf "$OUT/rundirs"

$DDPTOP_PYTHON - "$OUT/deficits.json" <<'PY'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
except Exception as e:
    sys.exit(f"no JSON from ddptop ({e}); see deficits.stderr")
for r in doc["runs"]:
    sps = r.get("samples_per_s")
    print(f"{r['run_id']}  k={r['k']}  {r.get('hand', 'ddp'):13} {r['status']:9} "
          f"sps={sps and round(sps)} step_ms={r.get('step_ms_median') and round(r['step_ms_median'], 2)} "
          f"{(r.get('reason') or '')[:160]}")
d = doc.get("deficits")
if not d:
    sys.exit("no deficits table in the JSON")
cols = d["columns"]
print(f"\ndeficits: samples/s (% of DDP at the same k) — {d['title']}")
print(f"{'k':>2}  " + "  ".join(f"{c:>18}" for c in cols))
for row in d["rows"]:
    ddp = (row["cells"].get("ddp") or {}).get("samples_per_s")
    cells = []
    for c in cols:
        x = (row["cells"].get(c) or {}).get("samples_per_s")
        if x is None:
            cells.append(f"{'—':>18}")
        elif c != "ddp" and ddp:
            cells.append(f"{x:>10.0f} ({x / ddp * 100:3.0f}%)")
        else:
            cells.append(f"{x:>18.0f}")
    print(f"{row['k']:>2}  " + "  ".join(cells))
PY
