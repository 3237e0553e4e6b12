#!/usr/bin/env bash
# Issue 45 on TWO GPUs (nvidia-h200-x2): attach's communication source on real NCCL, switched
# live. Three arms of `ddptop attach --k 2 --backend nccl` on examples/train_ddp.py:
#   plugin  — ddptop's NCCL profiler plugin: the Python comm hook times the first steps, then the
#             plugin's first completed collective confirms it and the hook's marks stop
#             (expect comm_sources timing nccl_profiler, switches 1, "the Python comm hook until
#             step N" in collectives.comm_source).
#   stall   — the same with DDPTOP_NCCL_STALL_MS=200, ddptop stopped (SIGSTOP, its own pid, this
#             script started it) for STOP_S seconds mid-run: the plugin's writes block, it calls
#             it a stall, the bootstrap goes back to the hook live, and after SIGCONT the plugin
#             reconnects and is confirmed again (expect switches >= 2 on some rank and the run
#             completed).
#   hook    — --no-nccl-profiler: the hook throughout (expect comm_hook, switches 0).
# Needs .carry/ddptop and .carry/libnccl_profiler_ddptop.so (build here, carry). ~4 minutes.
# Output: $OUT/attach_fallback/ (each arm's --json, stderr, `show`); the table is printed last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-attach-fallback}
OUT=${OUT:-/tmp/out}/attach_fallback; mkdir -p "$OUT"
B=${DDPTOP_BIN:-.carry/ddptop}
STOP_AT_S=${STOP_AT_S:-25} STOP_S=${STOP_S:-8}
EX=(examples/train_ddp.py --samples 60000 --epochs 3)
nvidia-smi -L > "$OUT/gpus.txt" 2>&1
for arm in plugin stall hook; do
  flag=(); env_extra=()
  [ "$arm" = hook ] && flag=(--no-nccl-profiler)
  [ "$arm" = stall ] && env_extra=(DDPTOP_NCCL_STALL_MS=200)
  env "${env_extra[@]}" timeout -k 5 400 "$B" "${flag[@]}" attach --k 2 --backend nccl --json \
    -- "${EX[@]}" > "$OUT/$arm.json" 2> "$OUT/$arm.stderr" &
  pid=$!
  if [ "$arm" = stall ]; then
    sleep "$STOP_AT_S"
    # `timeout` is the child of this shell; ddptop is timeout's child: stop that one only.
    dd=$(pgrep -P "$pid" -x ddptop || true)
    if [ -n "$dd" ]; then
      kill -STOP "$dd"; echo "stopped ddptop $dd at ${STOP_AT_S}s for ${STOP_S}s" >> "$OUT/stall.txt"
      sleep "$STOP_S"; kill -CONT "$dd"
    else
      echo "ddptop was not running at ${STOP_AT_S}s: the stall arm measured nothing" >> "$OUT/stall.txt"
    fi
  fi
  wait "$pid"; echo "$arm rc=$?" >> "$OUT/rc.txt"
  id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["run_id"])' "$OUT/$arm.json" 2>/dev/null)
  [ -n "$id" ] && "$B" show "$id" > "$OUT/$arm.show.txt" 2>&1
done
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print(f"{'arm':<7} {'status':<10} {'samples/s':>10}  per rank (timing, since step, switches)  | comm_source")
for arm in ("plugin", "stall", "hook"):
    try:
        r = json.loads((out / f"{arm}.json").read_text())["runs"][0]
    except Exception as e:  # noqa: BLE001
        print(f"{arm:<7} no run document ({e})"); continue
    c = r.get("collectives") or {}
    per = c.get("comm_sources") or {}
    ranks = "; ".join(f"{k}: {v.get('timing')} @{v.get('since_step')} x{v.get('switches')}" for k, v in sorted(per.items()))
    print(f"{arm:<7} {r.get('status', '?'):<10} {r.get('samples_per_s') or 0:>10.0f}  {ranks:<40} | {c.get('comm_source')}")
PY
