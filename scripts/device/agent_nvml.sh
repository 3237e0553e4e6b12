#!/usr/bin/env bash
# Issue 28: the GPU agent on a real GPU node (one node is enough). Run on one H200 on 2026-12-01:
# docs/results/raw/2026-12-01-h200x1-agent/ (there with the stand-in at .carry/nodes/).
#  1. `ddptop agent` against real NVML (no --fake-gpus), through scripts/agent_cost.py's stand-in
#     for ddptop's listener: its CPU % and RSS at 1000 ms and 250 ms, as the fake-GPU figures in
#     docs/multinode.md were measured, plus its last node_sample line of each period.
#  2. The same GPUs as ddptop itself reads them: the dashboard (--backend nccl --script) dumps
#     its GPU pane, and nvidia-smi is queried in the same seconds. compare.py checks that the
#     agent saw every GPU with the same name and memory total, memory used and power close to
#     nvidia-smi's (an idle box: a few % apart between two reads), and that each GPU of the pane
#     shows the agent's name and memory total.
# Output (under $OUT): agent_cost.txt, agent_samples.jsonl, smi.csv, screen.txt, compare.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
B=$PWD/.carry/ddptop; [ -x "$B" ] || B=$PWD/target/release/ddptop
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-agent-check}
SECONDS_PER=${SECONDS_PER:-30}

nvidia-smi -L > "$OUT/gpus.txt" 2>&1
python3 scripts/agent_cost.py "$B" --gpus nvml --periods 1000,250 --seconds "$SECONDS_PER" \
    --samples-out "$OUT/agent_samples.jsonl" > "$OUT/agent_cost.txt" 2> "$OUT/agent_cost.err"
echo "agent_cost exit $?" >> "$OUT/agent_cost.txt"

# ddptop's own NVML sample (the dashboard's sampler), and nvidia-smi at the same time.
DDPTOP_SCREEN=200x60 "$B" --backend nccl --no-mouse --script "sleep:4,Tab,dump:$OUT/screen.txt,q" \
    > /dev/null 2> "$OUT/screen.err" &
dd=$!
sleep 3
nvidia-smi --query-gpu=index,name,memory.total,memory.used,power.draw,utilization.gpu \
    --format=csv,noheader,nounits > "$OUT/smi.csv"
wait "$dd"

cat > "$OUT/compare.py" <<'PY'
import csv, json, sys
out = sys.argv[1]
lines = [json.loads(l) for l in open(f"{out}/agent_samples.jsonl")]
smi = {int(r[0]): [x.strip() for x in r] for r in csv.reader(open(f"{out}/smi.csv"))}
screen = open(f"{out}/screen.txt").read()
ok = True
for s in lines:
    gpus = {g["index"]: g for g in s["gpus"]}
    if sorted(gpus) != sorted(smi):
        print(f"GPU indexes differ: agent {sorted(gpus)}, nvidia-smi {sorted(smi)}"); ok = False
    for i, g in sorted(gpus.items()):
        r = smi.get(i)
        if r is None:
            continue
        total_mib = (g.get("mem_total") or 0) / 2**20
        used_mib = (g.get("mem_used") or 0) / 2**20
        rows = [
            ("name", g.get("name"), r[1], g.get("name") == r[1]),
            ("mem_total MiB", round(total_mib), r[2], abs(total_mib - float(r[2])) <= 1),
            ("mem_used MiB", round(used_mib), r[3], abs(used_mib - float(r[3])) <= max(64, 0.05 * float(r[3]))),
            ("power W", g.get("power_w"), r[4], g.get("power_w") is not None and abs(g["power_w"] - float(r[4])) <= max(10, 0.1 * float(r[4]))),
            ("util %", g.get("util_pct"), r[5], True),  # a moving window: shown, not checked
        ]
        for name, a, b, good in rows:
            print(f"GPU {i} {name:14} agent {a!s:>24}  nvidia-smi {b:>24}  {'ok' if good else 'DIFFERS'}")
            ok &= good
        short = (g.get("name") or "").replace("NVIDIA ", "")
        if short and short not in screen:
            print(f"GPU {i}: {short} not on ddptop's own GPU pane"); ok = False
print("AGREE" if ok else "DISAGREE")
PY
python3 "$OUT/compare.py" "$OUT" > "$OUT/compare.txt" 2>&1
cat "$OUT/agent_cost.txt" "$OUT/compare.txt"
