#!/usr/bin/env bash
# Issue 46 on one GPU (two ranks sharing it: gloo, as NCCL refuses two ranks on one device and
# ddptop's NCCL mode k > GPUs; `--backend gloo` hides the GPUs, the script shows GPU 0 again):
#  A. the host-sync row: scripts/device/host_sync_gpu.py attached at k=2, rank 0 calling
#     loss.item() after its forward / after optimizer.step(), or nobody syncing;
#  B. what the wraps cost: k=1, every step's loss.item(), attach with DDPTOP_HOST_SYNC=0 and
#     without, interleaved (ABAB, $ROUNDS rounds), ddptop's samples/s and the script's own;
#  C. a straggler on the sampled CUDA-event path (SLOW_EVERY, default auto): k=2, `--inject slow:1:1.5@200`, latency from
#     the worker's "slowing from now" event to the straggler record (both stored in runs.db).
# Then the remaining families of the smoke (RUNS, default "zero1 jax attach").
#   scripts/device/host_sync_one_gpu.sh   (~6 minutes; table last, raw in $OUT/host_sync.tgz)
set -u
cd "$(dirname "$0")/../.."
. scripts/device/common.sh
B=$(ddptop_bin); R=$OUT/host_sync; mkdir -p "$R"
ROUNDS=${ROUNDS:-4}
S=scripts/device/host_sync_gpu.py
GPU=(--backend gloo)
# EXTRA: more script arguments (a CPU check: EXTRA="--hidden 256 --layers 2 --batch 32").
SG=(--unhide-gpu ${EXTRA:-})
att() {  # att NAME DATA_DIR K [ddptop args] -- [script args]
  local name=$1 data=$2 k=$3; shift 3
  local t0; t0=$(date +%s.%N)
  DDPTOP_DATA_DIR=$data timeout -k 5 240 "$B" attach --k "$k" "$@" > "$R/$name.json" 2> "$R/$name.stderr"
  echo "$name rc=$? wall=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN {printf "%.1f", a - b}') s" | tee -a "$R/steps.log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/gpu.txt" 2>&1
PARTS=${PARTS:-A B C}  # e.g. PARTS=C RUNS= SLOW_STEPS=500: the straggler latency only
# A. who syncs
if [[ " $PARTS " == *" A "* ]]; then
att fwd0 /tmp/hs-a 2 "${GPU[@]}" --json -- $S "${SG[@]}" --sync-rank 0 --sync-at forward
att end0 /tmp/hs-a 2 "${GPU[@]}" --json -- $S "${SG[@]}" --sync-rank 0 --sync-at end
att none /tmp/hs-a 2 "${GPU[@]}" --json -- $S "${SG[@]}" --sync-rank 99
fi
# B. the wraps' cost, interleaved ABBA (a drift over the rounds cancels out)
off() { DDPTOP_HOST_SYNC=0 att "off_$1" /tmp/hs-b 1 "${GPU[@]}" --json -- $S "${SG[@]}" --sync-rank -1 --steps 1000; }
on() { att "on_$1" /tmp/hs-b 1 "${GPU[@]}" --json -- $S "${SG[@]}" --sync-rank -1 --steps 1000; }
[[ " $PARTS " == *" B "* ]] && for i in $(seq 1 "$ROUNDS"); do
  if ((i % 2)); then off "$i"; on "$i"; else on "$i"; off "$i"; fi
done
# C. the sampled path's straggler latency (SLOW_EVERY: auto, ddptop's NCCL default; 10, the old)
[[ " $PARTS " == *" C "* ]] && for i in $(seq 1 "${SLOW_RUNS:-3}"); do
  DDPTOP_TIME_EVERY=${SLOW_EVERY:-auto} att "slow_$i" "/tmp/hs-c$i" 2 "${GPU[@]}" --inject slow:1:1.5@200 --json -- $S "${SG[@]}" --sync-rank 99 --steps "${SLOW_STEPS:-1200}"
done
RUNS=${RUNS-zero1 jax attach}
[ -n "$RUNS" ] && RUNS=$RUNS scripts/device/smoke_one_gpu.sh > "$R/smoke.txt" 2>&1
tar -czf "$OUT/host_sync.tgz" -C "$OUT" host_sync $([ -f "$OUT/smoke.tgz" ] && echo smoke.tgz) 2>/dev/null
$DDPTOP_PYTHON - "$R" "$ROUNDS" <<'PY'
import json, sqlite3, statistics, sys
R, rounds = sys.argv[1], int(sys.argv[2])
def run(name):
    try:
        return json.load(open(f"{R}/{name}.json"))["runs"][0]
    except Exception as e:  # noqa: BLE001 - the table says what is missing
        return {"status": f"no document ({type(e).__name__})"}
print("A. host-sync row (k=2 on one GPU), per rank median ms; straggler named")
for name in ("fwd0", "end0", "none"):
    r = run(name)
    rows = {p["phase"]: p for p in r.get("phase_scores") or []}
    hs = rows.get("host sync")
    per = " ".join(f"r{k}={v:.3f}" for k, v in (hs or {}).get("ranks", {}).items()) or "no row"
    named = "; ".join(f"r{s['rank']} {s['phase']} {s['score']:.2f}" for s in r.get("stragglers") or []) or "none"
    other = " ".join(f"{p}={rows[p]['median_ms']:.2f}/{rows[p]['worst_ms']:.2f}r{rows[p]['worst_rank']}"
                     for p in ("data wait", "compute", "exposed comm", "optimizer") if p in rows)
    print(f"  {name:5} {r.get('status')} {per} | named: {named} | med/worst {other}")
print("B. wraps off vs on (k=1, ABBA), ddptop samples/s")
ratios = []
for i in range(1, rounds + 1):
    a, b = run(f"off_{i}"), run(f"on_{i}")
    sa, sb = a.get("samples_per_s"), b.get("samples_per_s")
    if sa and sb:
        ratios.append(sb / sa)
    print(f"  round {i}: off {sa and round(sa, 1)}  on {sb and round(sb, 1)}  on/off {sa and sb and round(sb / sa, 4)}")
if ratios:
    print(f"  median on/off {statistics.median(ratios):.4f} (min {min(ratios):.4f}, max {max(ratios):.4f})")
print(f"C. slow:1:1.5@200 at k=2, sampled timing ({__import__('os').environ.get('SLOW_EVERY', 'auto')}): latency slowdown -> named")
for i in range(1, int(__import__("os").environ.get("SLOW_RUNS", "3")) + 1):
    r = run(f"slow_{i}")
    try:
        db = sqlite3.connect(f"file:/tmp/hs-c{i}/runs.db?mode=ro", uri=True)
        start = [u for u, b in db.execute("SELECT unix, body FROM events WHERE type='log' ORDER BY seq") if "slowing from now" in b]
        named = [(u, b) for u, b in db.execute("SELECT unix, body FROM events WHERE type='straggler' ORDER BY seq")]
    except Exception as e:  # noqa: BLE001
        start, named = [], [(0, str(e))]
    lat = f"{named[0][0] - start[0]:.2f} s" if start and named else "not named" if start else "no start event"
    s = r.get("stragglers") or []
    # What the timed steps carried (the sampled bucket timeline: buckets messages on 1 timed step
    # in 4, exposed_ms in the step message on the others), from the run's archive.
    try:
        arch = [json.loads(l) for l in open(f"/tmp/hs-c{i}/runs/{r['run_id']}/steps.jsonl")]
        carried = (f"timelines {sum(m.get('type') == 'buckets' for m in arch)}, exposed_ms on "
                   f"{sum('exposed_ms' in m for m in arch if m.get('type') == 'step')} step messages")
    except Exception as e:  # noqa: BLE001
        carried = f"no archive ({type(e).__name__})"
    print(f"  run {i}: {r.get('status')} latency {lat}; named {[(x['rank'], x['phase'], x['step']) for x in s]}; "
          f"samples/s {r.get('samples_per_s') and round(r['samples_per_s'])}; step {r.get('step_ms_median')} ms; {carried}")
try:
    print(open(f"{R}/smoke.txt").read()[-1500:])
except OSError:
    pass
PY
