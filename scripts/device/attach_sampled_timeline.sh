#!/usr/bin/env bash
# `ddptop attach`'s sampled bucket timeline on a real GPU, on the comm-hook path (NCCL without
# the profiler plugin, or gloo on CUDA tensors; attach times no communication at k=1, so the
# default K=1 NCCL run checks nothing but the cost arms' plumbing: use SCRIPT below): 1 timed step in 4 takes
# the whole timeline, the others their buckets' ready marks and the backward's end (an autograd
# final callback queued to run after DDP's finalize_backward, timing.py mark_after_finalize).
#   (a) check: every timed step after the hook starts has its timeline or `exposed_ms`, never
#       both; no "backward-end marks unavailable" warning; the exposed comm of the two kinds of
#       step side by side (medians).
#   (b) cost: the chapter's loop (workers/scripts/bare_d2l.py, its own BARE_RESULT figure) bare,
#       attached with the timeline on every timed step (DDPTOP_TIMELINE_EVERY=1, as before), and
#       attached with ddptop's default; rounds with the order reversed every other round.
#   scripts/device/attach_sampled_timeline.sh   (~6 minutes; BATCH 1024, SAMPLES 50000, K 1,
#   BACKEND nccl (a CPU dry run of the check: BACKEND=gloo K=2 BATCH=16 SAMPLES=1024
#   DDPTOP_TIMELINE_EVERY=4 ONLY=check),
#   BUDGET_S 330 for (b); ONLY=check or ONLY=cost; raw in $OUT/attach_tl.tgz, tables last)
set -u
cd "$(dirname "$0")/../.."
. scripts/device/common.sh
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-attach-tl}
B=$(ddptop_bin); PY=$DDPTOP_PYTHON
R=$OUT/attach_tl; mkdir -p "$R"
BATCH=${BATCH:-1024}; SAMPLES=${SAMPLES:-50000}; BUDGET_S=${BUDGET_S:-330}
# SCRIPT (words) replaces the attached script, e.g. two gloo ranks sharing one GPU (attach times
# no communication at k=1, and NCCL refuses two ranks on one device):
#   K=2 BACKEND=gloo SCRIPT="scripts/device/host_sync_gpu.py --unhide-gpu --sync-rank 99 --steps 150" ONLY=check
read -ra SCRIPT <<< "${SCRIPT:-workers/scripts/bare_d2l.py --batch $BATCH --samples $SAMPLES --epochs 2}"
log() { echo "== $(date -u +%T) $*" | tee -a "$R/steps.log"; }
# The script's own figure; under attach its output lines carry torchrun's "[default0]:" prefix.
bare_figure() { $PY -c "import json,sys;[print(json.loads(l.split('BARE_RESULT ',1)[1])['samples_per_s']) for l in open(sys.argv[1]) if 'BARE_RESULT ' in l]" "$1" 2>/dev/null | tail -1; }
output_log() { $PY -c "import json,sys;print(json.load(open(sys.argv[1]))['runs'][0].get('output_log') or '')" "$1" 2>/dev/null; }

attach_run() {  # attach_run NAME [ENV=VAL...] -> $R/NAME.json, its script's output in $R/NAME.out
  local name=$1; shift
  env "$@" timeout 300 "$B" attach --k "${K:-1}" --backend "${BACKEND:-nccl}" --json -- "${SCRIPT[@]}" \
    > "$R/$name.json" 2> "$R/$name.stderr"
  local rc=$? o; o=$(output_log "$R/$name.json"); [ -f "$o" ] && cp "$o" "$R/$name.out"
  log "$name: exit $rc, script's figure $(bare_figure "$R/$name.out")"
}

if [ "${ONLY:-all}" = all ] || [ "${ONLY:-}" = check ]; then
  attach_run check
  $PY - "$R/check.json" "$DDPTOP_DATA_DIR" "$R/check.stderr" <<'PY' | tee "$R/check.txt"
import json, os, statistics, sys
run = json.load(open(sys.argv[1]))["runs"][0]
lines = [json.loads(l) for l in open(os.path.join(sys.argv[2], "runs", run["run_id"], "steps.jsonl"))]
steps = [m for m in lines if m.get("type") == "step"]
tl = {m["step"]: m for m in lines if m.get("type") == "buckets"}
exp = {m["step"]: m["exposed_ms"] for m in steps if "exposed_ms" in m}
# ddptop's live warnings (--json: one JSON line each on stderr), the worker's among them
warns = [l.strip() for l in open(sys.argv[3]) if "backward-end" in l]
first = min([*tl, *exp]) if (tl or exp) else None
after = [m["step"] for m in steps if first is not None and m["step"] >= first]
neither = [s for s in after if s not in tl and s not in exp]
both = sorted(set(tl) & set(exp))
med = lambda v: statistics.median(v) if v else float("nan")
print(f"status {run['status']}, ddptop's figure {run.get('samples_per_s') or 0:.1f} samples/s, "
      f"step median {run.get('step_ms_median') or 0:.1f} ms")
print(f"timelines {len(tl)} at steps {sorted(tl)[:10]}; exposed_ms on {len(exp)} steps")
print(f"exposed comm, median ms: ready-only steps {med(list(exp.values())):.3f}, "
      f"timeline steps {med([m['exposed_ms'] for m in tl.values()]):.3f}")
print(f"from step {first}: neither {neither[:10]} ({len(neither)}), both {both[:10]} ({len(both)}); "
      f"backward-end warnings {warns}")
ok = run["status"] == "completed" and tl and exp and not neither and not both and not warns
print("CHECK", "ok" if ok else "FAILED")
PY
fi

if [ "${ONLY:-all}" = all ] || [ "${ONLY:-}" = cost ]; then
  RES=$R/cost.tsv; : > "$RES"; T0=$(date +%s); round=0
  nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv > "$R/gpus_before.csv" 2>&1
  arm() {
    local a=$1 f; f="$R/${a}_$(date +%s%N)"
    case $a in
      bare) timeout 200 $PY -m torch.distributed.run --standalone --nproc-per-node=1 "${SCRIPT[@]}" \
              > "$f.out" 2>&1 ;;
      attach_tl1) attach_run "$(basename "$f")" DDPTOP_TIMELINE_EVERY=1 ;;
      attach) attach_run "$(basename "$f")" ;;
    esac
    printf '%s\t%s\n' "$a" "$(bare_figure "$f.out")" >> "$RES"
  }
  while :; do
    order="bare attach_tl1 attach"; [ $((round % 2)) -eq 1 ] && order="attach attach_tl1 bare"
    for a in $order; do arm "$a"; done
    round=$((round + 1))
    [ $(( ($(date +%s) - T0) / round * (round + 1) )) -gt "$BUDGET_S" ] && break
  done
  $PY - "$RES" "$round" <<'PY' | tee "$R/cost_table.txt"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
by = {}
for a, v in rows:
    if v:
        by.setdefault(a, []).append(float(v))
bare = statistics.median(by["bare"]) if by.get("bare") else None
print(f"k=1, {sys.argv[2]} rounds (order reversed every other round); the script's own samples/s")
names = {"bare": "bare d2l (torchrun)", "attach_tl1": "attach, timeline every timed step",
         "attach": "attach, default (1 in 4)"}
for a in ("bare", "attach_tl1", "attach"):
    v = by.get(a, [])
    m = statistics.median(v) if v else None
    each = ", ".join(f"{x:.0f}" for x in v)
    ratio = f"{100 * m / bare:.2f}% of bare" if (m and bare) else ""
    print(f"{names[a]:36} {m or 0:9.1f} ({each})  {ratio}")
PY
fi
tar -czf "$OUT/attach_tl.tgz" -C "$OUT" attach_tl
cat "$R/check.txt" "$R/cost_table.txt" 2>/dev/null
