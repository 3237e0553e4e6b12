#!/usr/bin/env bash
# One GPU (NCCL, k=1), the session of 2026-12-04: what the new failure names and the live stall
# say on the CUDA path. Two GPUs are not lent, so uneven inputs (k >= 2) is not run here.
#  1. unused parameters, injected into ddptop's own loop (`--inject unused:aux_head`);
#  2. unused parameters in an unmodified script (tests/fixtures/scripts/unused_layer.py), attached;
#  3. a stall of an attached job (examples/train_ddp_stalls.py, 12 s in step 4, threshold 3 s)
#     read by a second process with `ddptop show --json` while the job runs: when does the store
#     say `stalled`, against when the stall began.
# Run from the repo root with the release binaries in .carry/. About 2 minutes.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-diagnose}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/diag"
B=./.carry/ddptop; [ -x "$B" ] || B=target/release/ddptop
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/diag/diagnose.log"; }
log "unused injected"
timeout -k 5 120 "$B" run weak --k 1 --backend nccl --samples 4096 --inject unused:aux_head --json \
  > "$OUT/diag/unused_injected.json" 2> "$OUT/diag/unused_injected.stderr"; log "rc=$?"
log "unused script attached"
timeout -k 5 120 "$B" attach --k 1 --backend nccl --json -- tests/fixtures/scripts/unused_layer.py \
  > "$OUT/diag/unused_script.json" 2> "$OUT/diag/unused_script.stderr"; log "rc=$?"
log "stall attached, polled"
t0=$(date +%s.%N)
timeout -k 5 150 "$B" attach --k 1 --backend nccl --hang-floor 3 --json -- \
  examples/train_ddp_stalls.py --stall-s 12 --samples 8192 \
  > "$OUT/diag/stall.json" 2> "$OUT/diag/stall.stderr" &
job=$!
seen=""
while kill -0 $job 2>/dev/null; do
  id=$("$B" runs --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["run_id"])' 2>/dev/null)
  if [ -n "$id" ]; then
    st=$("$B" show "$id" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["run"]["status"])' 2>/dev/null)
    now=$(date +%s.%N)
    echo "$(python3 -c "print(round($now-$t0,2))") $st" >> "$OUT/diag/stall_poll.txt"
    if [ "$st" = "stalled" ] && [ -z "$seen" ]; then
      seen=1; "$B" show "$id" --json > "$OUT/diag/stall_show_live.json" 2>&1
      "$B" show "$id" > "$OUT/diag/stall_show_live.txt" 2>&1
    fi
  fi
  sleep 0.5
done
wait $job; log "stall rc=$?"
log "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
python3 - "$OUT/diag" <<'PY'
import json, sys
d = sys.argv[1]
for name in ["unused_injected", "unused_script", "stall"]:
    try:
        r = json.load(open(f"{d}/{name}.json"))["runs"][0]
    except Exception as e:
        print(f"{name:16} no JSON ({e})"); continue
    kinds = [x["kind"] for x in r.get("diagnoses", [])]
    print(f"{name:16} {r['status']:10} diagnoses={kinds} reason={(r.get('reason') or '')[:160]}")
try:
    polls = [l.split() for l in open(f"{d}/stall_poll.txt")]
    first = next((float(t) for t, *s in polls if s and s[0] == "stalled"), None)
    print(f"stall: first `stalled` seen by show --json at {first} s after launch; polls={len(polls)}")
    live = json.load(open(f"{d}/stall_show_live.json"))["run"]
    print("live evidence:", [l[:140] for l in live["hang_report"]][:2])
except Exception as e:
    print("stall poll:", e)
PY
