#!/usr/bin/env bash
# Issue 26 on two GPUs: stragglers named on CUDA/NCCL (k=1 cannot show one).
#   healthy  `run weak --k 2`: must name nobody
#   slow     `run weak --k 2 --inject slow:1:1.5`: rank 1 named, phase "data wait", early
#   shared   a second process (a matmul loop) competing for GPU 1, started here and stopped here
#            by its pid, then `--shared-gpus run weak --k 2`: rank 1 named (forward/backward),
#            its evidence ending "its GPU 1 runs 1 other process" (the GPU clause)
#   attach_healthy / attach_slow  `attach --k 2` of examples/train_ddp.py on NCCL with ddptop's
#            profiler plugin (no comm hook: the comm waits come from NCCL's all-reduces,
#            `straggler::comm_from_plugin`), without and with `--inject slow:1:1.5`: nobody, then
#            rank 1 "data wait"; needs .carry/libnccl_profiler_ddptop.so beside the binary
#   Issue 46, the 5 s from a mid-run slowdown on NCCL (latency: the worker's "slowing from now"
#   event to the straggler record, both in runs.db; printed per run):
#   mid / mid_noplugin / mid10  `run weak --k 2 --inject slow:1:1.5@SLOW_AT`: ddptop's default (its
#            plugin, `auto` timing), `--no-nccl-profiler`, and timed 1 in 10 (the old default)
#   attach_mid / attach_mid_noplugin  the same fault on `attach --k 2` of examples/train_ddp.py
#            (waits from the plugin; without it, from the comm hook)
#   KS="2 4" repeats the mid parts at each k (k=4 needs 4 GPUs).
#   SLOW_AT (default 200) is the step the mid-run slowdown starts at: keep it past the detector's
#   first full window (step 34: 3 skipped + 30), or the latency includes the window filling.
#   BACKEND=gloo runs every part on gloo instead (CPU: a dry run of this script's plumbing, e.g.
#   `BACKEND=gloo SAMPLES=24000 SLOW_AT=40 ONLY="mid attach_mid" DDPTOP_BIN=target/release/ddptop`);
#   its latencies are gloo's, not NCCL's.
# ONLY (default "healthy slow shared attach_healthy attach_slow") picks parts, e.g.
#   ONLY="mid mid_noplugin mid10 attach_mid attach_mid_noplugin" scripts/device/straggler.sh
# Needs .carry/ddptop (or target/release/ddptop).
# Raw --json of every run in $OUT/raw, nvidia-smi clocks/power/temperature sampled during each run
# in $OUT/raw/NAME.smi.csv (to check the evidence's GPU clause), a summary in $OUT/straggler.log.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-straggler}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
B=${DDPTOP_BIN:-.carry/ddptop}; [ -x "$B" ] || B=target/release/ddptop
SAMPLES=${SAMPLES:-200000}
BACKEND=${BACKEND:-nccl} SLOW_AT=${SLOW_AT:-200}
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/straggler.log"; }
summary() {  # the run's status, steps/s and stragglers, one line each
  python3 - "$1" <<'PY' 2>&1 | tee -a "$OUT/straggler.log"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
print(f"   status {r['status']} step_ms_median {r.get('step_ms_median')} reason {r.get('reason')}")
for s in r.get("stragglers", []):
    print(f"   straggler rank {s['rank']} score {s['score']:.2f} phase {s['phase']} "
          f"named at {s['since']:.1f} s (step {s['step']}): {s['evidence']}")
if not r.get("stragglers"):
    print("   stragglers: none")
PY
}
run() {  # run NAME GLOBAL_FLAGS -- SUBCOMMAND ARGS...
  local name=$1; shift; local g=(); while [ "$1" != "--" ]; do g+=("$1"); shift; done; shift
  local f="$OUT/raw/$name" t0; t0=$(date +%s)
  nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,power.limit,temperature.gpu,utilization.gpu \
    --format=csv -lms 500 > "$f.smi.csv" 2>/dev/null &
  local smi=$!
  log "$name: ddptop ${g[*]} $* --json"
  # --json right after the subcommand: attach's script arguments follow its `--`.
  timeout -k 5 300 "$B" "${g[@]}" "$1" --json "${@:2}" > "$f.json" 2> "$f.stderr"
  local rc=$?
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  log "$name rc=$rc wall=$(( $(date +%s) - t0 )) s"
  summary "$f.json"
  latency "$f.json"
}
latency() {  # seconds from the run's "slowing from now" event to its first straggler record
  python3 - "$1" "$DDPTOP_DATA_DIR/runs.db" <<'PY' 2>&1 | tee -a "$OUT/straggler.log"
import json, sqlite3, sys
try:
    run = json.load(open(sys.argv[1]))["runs"][0]["run_id"]
except Exception:  # noqa: BLE001 - no document: nothing to time
    sys.exit(0)
db = sqlite3.connect(f"file:{sys.argv[2]}?mode=ro", uri=True)
rows = db.execute("SELECT unix, type, body FROM events WHERE run_id = ? ORDER BY seq", (run,)).fetchall()
start = next((u for u, t, b in rows if t == "log" and "slowing from now" in b), None)
named = next((u for u, t, b in rows if t == "straggler"), None)
if start is not None:
    print(f"   latency {named - start:.2f} s" if named is not None else "   latency: never named")
PY
}
ONLY=${ONLY:-healthy slow shared attach_healthy attach_slow}
case " $ONLY " in *" healthy "*) run healthy -- run weak --k 2 --backend "$BACKEND" --samples "$SAMPLES";; esac
case " $ONLY " in *" slow "*) run slow -- run weak --k 2 --backend "$BACKEND" --samples "$SAMPLES" \
  --inject slow:1:1.5;; esac
EX=(examples/train_ddp.py --samples "${EX_SAMPLES:-40000}" --epochs 2)
case " $ONLY " in *" attach_healthy "*) run attach_healthy -- attach --k 2 --backend "$BACKEND" \
  -- "${EX[@]}";; esac
case " $ONLY " in *" attach_slow "*) run attach_slow -- attach --k 2 --backend "$BACKEND" \
  --inject slow:1:1.5 -- "${EX[@]}";; esac
for k in ${KS:-2}; do
  MID=(run weak --k "$k" --backend "$BACKEND" --samples "$SAMPLES" --inject slow:1:1.5@$SLOW_AT)
  case " $ONLY " in *" mid "*) run "mid_k$k" -- "${MID[@]}";; esac
  case " $ONLY " in *" mid_noplugin "*) run "mid_noplugin_k$k" --no-nccl-profiler -- "${MID[@]}";; esac
  case " $ONLY " in *" mid10 "*) run "mid10_k$k" -- "${MID[@]}" --env DDPTOP_TIME_EVERY=10;; esac
  AMID=(attach --k "$k" --backend "$BACKEND" --inject slow:1:1.5@$SLOW_AT -- "${EX[@]}")
  case " $ONLY " in *" attach_mid "*) run "attach_mid_k$k" -- "${AMID[@]}";; esac
  case " $ONLY " in *" attach_mid_noplugin "*) run "attach_mid_noplugin_k$k" --no-nccl-profiler -- "${AMID[@]}";; esac
done
case " $ONLY " in *" shared "*)
  # The competitor: back-to-back 8k matmuls on GPU 1 until stopped (its pid, below).
  CUDA_VISIBLE_DEVICES=1 "$DDPTOP_PYTHON" -c '
import torch
a = torch.randn(8192, 8192, device="cuda")
while True:
    a = (a @ a).clamp_(-1, 1)
' > "$OUT/raw/competitor.log" 2>&1 &
  comp=$!
  sleep 10  # its CUDA context and first kernels
  run shared --shared-gpus -- run weak --k 2 --backend "$BACKEND" --samples "$SAMPLES"
  kill "$comp"; wait "$comp" 2>/dev/null;;
esac
log "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
