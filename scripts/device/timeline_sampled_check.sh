#!/usr/bin/env bash
# The sampled bucket timeline on a real GPU (k=1, NCCL, ddptop's defaults: `auto` cadence, the
# whole timeline on 1 timed step in 4): every timed step after DDP's rebuild carries either a
# buckets message (its timeline) or `exposed_ms` in its step message (ready marks only), and the
# run completes. Prints what the run's archive (runs/<id>/steps.jsonl) holds.
#   scripts/device/timeline_sampled_check.sh   (~40 s; BATCH, SAMPLES, K, MODEL, BACKEND to change
# the run; on a CPU: BACKEND=gloo K=2 MODEL=tiny DDPTOP_TIMELINE_EVERY=4 DDPTOP_TIME_EVERY=2)
set -u
cd "$(dirname "$0")/../.."
. scripts/device/common.sh
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-timeline}
B=$(ddptop_bin)
timeout 240 "$B" run weak --k "${K:-1}" --backend "${BACKEND:-nccl}" --model "${MODEL:-resnet18}" --batch "${BATCH:-1024}" \
  --samples "${SAMPLES:-40000}" --epochs 2 --json > "$OUT/timeline_run.json" 2> "$OUT/timeline_run.stderr"
echo "ddptop run: exit $?"
${DDPTOP_PYTHON} - "$OUT/timeline_run.json" "$DDPTOP_DATA_DIR" <<'PY' | tee "$OUT/timeline_check.txt"
import json, os, sys
run = json.load(open(sys.argv[1]))["runs"][0]
lines = [json.loads(l) for l in open(os.path.join(sys.argv[2], "runs", run["run_id"], "steps.jsonl"))]
steps = [m for m in lines if m.get("type") == "step"]
tl = sorted(m["step"] for m in lines if m.get("type") == "buckets")
exp = [m for m in steps if "exposed_ms" in m]
first = min([m["step"] for m in exp] + tl) if (exp or tl) else None
after = [m for m in steps if first is not None and m["step"] >= first]
neither = [m["step"] for m in after if "exposed_ms" not in m and m["step"] not in tl]
both = [m["step"] for m in exp if m["step"] in tl]
timed = [m for m in steps if not m["warmup"]]
print(f"status {run['status']}, {run['samples_per_s']:.1f} samples/s, step median {run['step_ms_median']:.1f} ms")
print(f"step messages {len(steps)} (timed epoch {len(timed)}, every {sorted({m.get('every', 1) for m in timed})})")
print(f"timelines (buckets messages) {len(tl)} at steps {tl[:12]}{' ...' if len(tl) > 12 else ''}")
print(f"exposed_ms on {len(exp)} step messages, median "
      f"{sorted(m['exposed_ms'] for m in exp)[len(exp) // 2] if exp else float('nan'):.3f} ms")
print(f"from step {first}: neither {neither[:10]} ({len(neither)}), both {both[:10]} ({len(both)})")
print("CHECK", "ok" if run["status"] == "completed" and tl and exp and not neither and not both else "FAILED")
PY
