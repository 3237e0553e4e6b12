#!/usr/bin/env bash
# After a refactor: every family that runs on one GPU, through the carried release binary, on
# CUDA/NCCL at k=1 (weak, strong, fsdp, zero1, jax, attach of examples/train_ddp.py), small runs.
# Per run: its status, samples/s, the lines ddptop dropped as bad (a worker's `result` naming a
# family ddptop does not know would be one; its settings would then be missing) and `ddptop
# show` / `report` reading it back.
#   scripts/device/smoke_one_gpu.sh     (~3 minutes; table last, raw in $OUT/smoke.tgz)
set -u
cd "$(dirname "$0")/../.."
. scripts/device/common.sh
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-smoke}
B=$(ddptop_bin); R=$OUT/smoke; mkdir -p "$R"
# BACKEND=gloo SAMPLES=2048 runs the same on the CPU (a check of this script where no GPU is).
BK=${BACKEND:-nccl} N=${SAMPLES:-20480}
T=$R/table.tsv; : > "$T"
# RUNS="zero1 jax attach" runs only those (default: all six).
want() { [[ " ${RUNS:-weak strong fsdp zero1 jax attach} " == *" $1 "* ]]; }
run() {  # run NAME ARGS... (ARGS with --json)
  local name=$1; shift
  timeout -k 5 240 "$B" "$@" > "$R/$name.json" 2> "$R/$name.stderr"
  local rc=$?
  $DDPTOP_PYTHON - "$R/$name.json" "$name" "$rc" >> "$T" <<'PY'
import json, sys
path, name, rc = sys.argv[1:]
try:
    r = json.load(open(path))["runs"][0]
except Exception as e:  # noqa: BLE001
    print(f"{name}\trc={rc}\tno run document ({type(e).__name__})"); sys.exit()
sps = r.get("samples_per_s")
# Read from the ranks' `result` only, each from its family's own record: torch_seen (a torch
# family's settings), jax_matmul_precision (JAX's), process_group (an attached script's
# instrumentation). Null when the result was refused or its family's fields were not read.
own = {"jax": ["jax_matmul_precision"], "attach": ["torch_seen", "process_group"]}
keys = own.get(r["experiment"], ["torch_seen"])
seen = "result read" if all(r.get(k) is not None for k in keys) else "no result: " + ",".join(keys)
print(f"{name}\trc={rc}\t{r['status']}\t{sps and round(sps, 1)} samples/s\tbad lines {r.get('bad_lines')}\t{seen}\t{r['run_id']}")
PY
}
want weak && run weak run weak --k 1 --backend "$BK" --samples "$N" --json
want strong && run strong run strong --k 1 --backend "$BK" --samples "$N" --json
want fsdp && run fsdp run fsdp --k 1 --backend "$BK" --samples "$N" --json
want zero1 && run zero1 run zero1 --k 1 --backend "$BK" --samples "$N" --json
want jax && run jax run jax --k 1 --samples "$N" --json
want attach && run attach attach --k 1 --backend "$BK" --json -- examples/train_ddp.py --epochs 2 --samples "$((N * 3))"
"$B" runs > "$R/runs.txt" 2>&1; echo "runs rc=$?" >> "$T"
for id in $(grep -o 'r20[0-9]*-[0-9]*-[0-9a-f]*' "$T"); do
  "$B" show "$id" > "$R/show_$id.txt" 2>&1 || echo "show $id failed" >> "$T"
done
"$B" report --last --format md > "$R/report.md" 2>&1; echo "report rc=$? ($(wc -l < "$R/report.md") lines)" >> "$T"
grep -h "rejected\|bad line\|unknown experiment" "$R"/*.stderr "$R"/show_*.txt 2>/dev/null | head -5 >> "$T"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$T" 2>&1
tar -czf "$OUT/smoke.tgz" -C "$OUT" smoke
column -t -s $'\t' "$T" 2>/dev/null || cat "$T"
