#!/usr/bin/env bash
# Issue 25: ddptop's NCCL profiler plugin on GPUs (docs/profiler.md).
#   one       (1 GPU) the plugin loads and NCCL calls init: `run weak --k 1` with the plugin on
#             (the default) says "no collectives at k=1" and NCCL's INFO log has the plugin's init
#             line; `--no-nccl-profiler` launches without NCCL_PROFILER_PLUGIN; the plugin
#             driven straight from a k=1 torch process group with the ddptop-less environment
#             says it is off in one line and the process is unharmed
#   overhead  (2 GPUs) the book's script (`run weak --k 2`) with the plugin on and off,
#             interleaved, ROUNDS pairs: samples/s medians and their ratio (target ≤ 0.5% cost)
#   agree     (2 GPUs) per-bucket all-reduce kernel time from the plugin vs c10d's collective
#             timing (TORCH_NCCL_ENABLE_TIMING=1, flight recorder), median over ≥ 20 steps,
#             scripts/device/profiler_agree.py (target within 10%)
#   timeline  (2 GPUs) `ddptop attach --k 2 --backend nccl -- examples/train_ddp.py` with the
#             plugin on: the run's JSON says comm_timing and timeline_source "nccl_profiler"
#             (the Timeline's buckets came from NCCL's collectives), the log says no ddptop comm
#             hook was installed and no `buckets` message came; the same attach with
#             --no-nccl-profiler falls back to the comm hook (timeline_source "comm_hook")
#   hang      (2 GPUs) `--inject hang:30` and the book's deadlock (P2P off + SHM memcpy): the
#             run's hang report must carry the plugin's "which rank, which collective" line
# ONLY (default "one") picks parts: one, overhead, agree, timeline, hang. Needs .carry/ddptop and .carry/libnccl_profiler_ddptop.so
# (or target/release/). Raw --json of every run, NCCL logs and the plugin's lines in $OUT/raw, a
# summary in $OUT/profiler.log.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-profiler}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
B=${DDPTOP_BIN:-.carry/ddptop}; [ -x "$B" ] || B=target/release/ddptop
PLUGIN=$(dirname "$B")/libnccl_profiler_ddptop.so
ROUNDS=${ROUNDS:-4}; SAMPLES=${SAMPLES:-200000}
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/profiler.log"; }
field() { python3 -c "import json,sys;r=json.load(open(sys.argv[1]))['runs'][0];v=r.get(sys.argv[2]);print('' if v is None else v)" "$1" "$2" 2>/dev/null; }
rundir() { python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['runs'][0]['run_id'])" "$1" 2>/dev/null; }
run() {  # run NAME CAP ARGS... (ddptop arguments, --json added)
  local name=$1 cap=$2; shift 2; local f="$OUT/raw/$name" t0; t0=$(date +%s)
  timeout -k 5 "$cap" "$B" "$@" --json > "$f.json" 2> "$f.stderr"
  local rc=$?
  log "$name rc=$rc wall=$(( $(date +%s) - t0 )) s status=$(field "$f.json" status) samples/s=$(field "$f.json" samples_per_s) reason=$(field "$f.json" reason)"
  local d="$DDPTOP_DATA_DIR/runs/$(rundir "$f.json")"
  cat "$d"/nccl.*.log > "$f.nccl.log" 2>/dev/null
  grep -h "ddptop NCCL profiler\|NCCL_PROFILER_PLUGIN" "$d/output.log" "$d/command.txt" > "$f.plugin.txt" 2>/dev/null
  printf '%s\t%s\t%s\t%s\n' "$name" "$(field "$f.json" status)" "$(field "$f.json" samples_per_s)" "$rc" >> "$OUT/profiler.tsv"
}
check() {  # check WHAT COMMAND...: one PASS/FAIL line
  local what=$1; shift
  if "$@" >/dev/null 2>&1; then log "PASS $what"; else log "FAIL $what"; fi
}
: > "$OUT/profiler.tsv"
log "ddptop $B, plugin $PLUGIN ($(stat -c %s "$PLUGIN" 2>/dev/null) bytes); $(python3 -c 'import torch;print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())' 2>&1)"
nm -D "$PLUGIN" 2>/dev/null | grep ncclProfiler | tee -a "$OUT/profiler.log"
ONLY=${ONLY:-one}

case " $ONLY " in *" one "*)
  run k1_on 300 run weak --k 1 --backend nccl --samples 20000 --epochs 2
  f="$OUT/raw/k1_on"
  check "k=1 completed" grep -q '"status": *"completed"' "$f.json"
  check "k=1 says no collectives at k=1" grep -q "no collectives at k=1" "$f.json"
  check "NCCL_PROFILER_PLUGIN set on the launch" grep -q "NCCL_PROFILER_PLUGIN=" "$f.plugin.txt"
  check "NCCL called the plugin's init (its INFO line)" grep -q "ddptop profiler plugin: init comm" "$f.nccl.log"
  check "the plugin stayed on (no off line)" bash -c "! grep -q 'ddptop NCCL profiler: off' '$f.plugin.txt'"
  grep -h "PROFILER\|ddptop profiler\|NCCL version" "$f.nccl.log" | head -20 | tee -a "$OUT/profiler.log"
  run k1_off 300 --no-nccl-profiler run weak --k 1 --backend nccl --samples 20000 --epochs 2
  f="$OUT/raw/k1_off"
  check "--no-nccl-profiler: completed" grep -q '"status": *"completed"' "$f.json"
  check "--no-nccl-profiler: no NCCL_PROFILER_PLUGIN" bash -c "! grep -q NCCL_PROFILER_PLUGIN= '$f.plugin.txt'"
  check "--no-nccl-profiler: no collectives line" bash -c "! grep -q 'no collectives at k=1' '$f.json'"
  # Without ddptop (no DDPTOP_SOCKET): one line, then NCCL runs on unharmed.
  NCCL_PROFILER_PLUGIN=$PLUGIN NCCL_DEBUG=INFO NCCL_DEBUG_FILE="$OUT/raw/bare.nccl.%p.log" timeout 120 python3 - > "$OUT/raw/bare.txt" 2>&1 <<'PY'
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29531")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
x = torch.ones(1 << 20, device="cuda")
for _ in range(10):
    dist.all_reduce(x)
torch.cuda.synchronize()
print("bare all_reduce ok", x[0].item())
dist.destroy_process_group()
PY
  cat "$OUT/raw/bare.txt" | tee -a "$OUT/profiler.log"
  check "no ddptop: exactly one off line" test "$(grep -c 'ddptop NCCL profiler: off' "$OUT/raw/bare.txt")" = 1
  check "no ddptop: NCCL ran on" grep -q "bare all_reduce ok 1.0" "$OUT/raw/bare.txt"
  ;;
esac

case " $ONLY " in *" overhead "*)
  for i in $(seq 1 "$ROUNDS"); do
    if [ $((i % 2)) -eq 1 ]; then order="on off"; else order="off on"; fi
    for a in $order; do
      g=(); [ "$a" = off ] && g=(--no-nccl-profiler)
      run "${a}_$i" 600 "${g[@]}" run weak --k 2 --backend nccl --samples "$SAMPLES" --epochs 3
    done
  done
  python3 - "$OUT/profiler.tsv" <<'PY' | tee -a "$OUT/profiler.log"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
med = {}
for arm in ("on", "off"):
    v = [float(s) for n, st, s, _ in rows if n.startswith(arm + "_") and st == "completed" and s]
    if v:
        med[arm] = statistics.median(v)
        print(f"{arm}: median {med[arm]:.1f} samples/s over {len(v)} ({', '.join(f'{x:.0f}' for x in v)})")
if len(med) == 2:
    cost = 100 * (1 - med["on"] / med["off"])
    print(f"plugin cost {cost:+.2f}% of samples/s (target <= 0.5%)")
PY
  ;;
esac

case " $ONLY " in *" agree "*)
  timeout -k 5 600 python3 scripts/device/profiler_agree.py --plugin "$PLUGIN" --steps 40 --out "$OUT/raw/agree" \
    2>&1 | tee -a "$OUT/profiler.log"
  ;;
esac

case " $ONLY " in *" timeline "*)
  EX=(examples/train_ddp.py --samples 20000)
  # Not run(): --json must come before `--` (after it, it would be the script's argument).
  timeout -k 5 300 "$B" attach --k 2 --backend nccl --json -- "${EX[@]}" > "$OUT/raw/attach_plugin.json" 2> "$OUT/raw/attach_plugin.stderr"
  log "attach_plugin rc=$?"
  timeout -k 5 300 "$B" --no-nccl-profiler attach --k 2 --backend nccl --json -- "${EX[@]}" > "$OUT/raw/attach_hook.json" 2> "$OUT/raw/attach_hook.stderr"
  log "attach_hook rc=$?"
  for n in attach_plugin attach_hook; do
    python3 - "$OUT/raw/$n.json" "$n" <<'PY' 2>&1 | tee -a "$OUT/profiler.log"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
c = r.get("collectives") or {}
want = "nccl_profiler" if sys.argv[2] == "attach_plugin" else "comm_hook"
print(f"   {sys.argv[2]}: status {r['status']} comm_timing {c.get('comm_timing')} timeline_source {c.get('timeline_source')}")
ok = c.get("comm_timing") == want and c.get("timeline_source") == want
print(f"   {'PASS' if ok else 'FAIL'} {sys.argv[2]}: buckets timed by {want}")
if want == "nccl_profiler":
    ar = ((c.get("ranks") or {}).get("0") or {}).get("funcs", {}).get("all_reduce", {})
    print(f"   rank 0 all_reduce count {ar.get('count')} bytes {ar.get('bytes')}")
PY
  done
  id=$(rundir "$OUT/raw/attach_plugin.json")
  "$B" show "$id" > "$OUT/raw/attach_plugin.show.txt" 2>&1
  check "attach on NCCL with the plugin: no ddptop comm hook installed (show's measured line)" grep -q "no ddptop comm hook" "$OUT/raw/attach_plugin.show.txt"
  check "attach on NCCL with the plugin: DDPTOP_NCCL_PLUGIN=1 on the launch" grep -q "DDPTOP_NCCL_PLUGIN" "$OUT/raw/attach_plugin.show.txt"
  ;;
esac

case " $ONLY " in *" hang "*)
  run hang_inject 300 run weak --k 2 --backend nccl --samples "$SAMPLES" --epochs 3 --inject hang:50
  run hang_deadlock 300 --shared-gpus run weak --k 2 --backend nccl --samples "$SAMPLES" --epochs 3 \
    --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_USE_CUDA_MEMCPY=1
  for n in hang_inject hang_deadlock; do
    python3 - "$OUT/raw/$n.json" <<'PY' 2>&1 | tee -a "$OUT/profiler.log"
import json, sys
r = json.load(open(sys.argv[1]))["runs"][0]
print(f"   {sys.argv[1]}: status {r['status']} reason {r.get('reason')}")
lines = r.get("hang_report", [])
for l in lines:
    print(f"   {l}")
print("   PASS plugin named the collective" if any(l.startswith("NCCL profiler:") for l in lines)
      else "   FAIL no NCCL profiler line in the hang report")
PY
  done
  ;;
esac
log "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
