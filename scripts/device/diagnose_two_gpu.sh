#!/usr/bin/env bash
# Two GPUs (nvidia-h200-x2, NCCL, k=2): issue 44's failures on the CUDA path, the runs the gloo
# tests (tests/diagnose_gloo.rs) make on the CPU, with `--backend nccl`. Ready to run; not run
# while two GPUs were not lent. Each run: `--json` document and stderr in $OUT/diag2/, then a
# table of status, diagnoses' kinds and the reason's start.
#  uneven_injected    ddptop's loop, rank 1 runs out of data after step 5 (`uneven:1:5`): on NCCL
#                     rank 0 waits in the next all-reduce; named when the watchdog calls the hang
#  uneven_script      tests/fixtures/scripts/uneven_data.py attached (rank 1's own slice is short)
#  unused_k2          `unused:aux_head` at k=2 (one GPU ran it at k=1)
#  nojoin_injected    `nojoin:1`: rank 1 never calls init_process_group
#  mismatch_injected  `mismatch:3`: the last rank issues an extra all-reduce at step 3 (NCCL checks
#                     no sizes: named from the flight recorders once the hang is called)
#  slowlink_injected  `slowlink:200`: every bucket all-reduce ends 200 ms late: slower than one rank
#  small_batch        tests/fixtures/scripts/tiny_model_small_batch.py attached at k=1,2
# Run from the repo root with the release binary and its plugin in .carry/ (or target/release/).
# About 6-10 minutes (the hangs wait for ddptop's stall threshold).
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-diagnose2}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/diag2"
B=./.carry/ddptop; [ -x "$B" ] || B=target/release/ddptop
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/diag2/diagnose.log"; }
one() {  # NAME ARGS... : one ddptop command, its document and stderr kept
  local name=$1; shift
  log "$name: ddptop $*"
  timeout -k 5 240 "$B" "$@" > "$OUT/diag2/$name.json" 2> "$OUT/diag2/$name.stderr"
  log "$name rc=$?"
}
W=(run weak --k 2 --backend nccl --samples 8192 --json)
one uneven_injected "${W[@]}" --inject uneven:1:5
one uneven_script attach --k 2 --backend nccl --json -- tests/fixtures/scripts/uneven_data.py
one unused_k2 "${W[@]}" --inject unused:aux_head
one nojoin_injected "${W[@]}" --inject nojoin:1
one mismatch_injected "${W[@]}" --inject mismatch:3
one slowlink_injected "${W[@]}" --inject slowlink:200
one small_batch attach --k 1,2 --backend nccl --json -- tests/fixtures/scripts/tiny_model_small_batch.py
log "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
python3 - "$OUT/diag2" <<'PY' | tee "$OUT/diag2/table.txt"
import glob, json, os, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    name = os.path.basename(f)[:-5]
    try:
        runs = json.load(open(f))["runs"]
    except Exception as e:  # noqa: BLE001 - the table says what is missing
        print(f"{name:18} no document ({e})"); continue
    for r in runs:
        kinds = [d["kind"] for d in r.get("diagnoses", [])]
        print(f"{name:18} k={r['k']} {r['status']:10} {kinds} {(r.get('reason') or '')[:120]}")
PY
