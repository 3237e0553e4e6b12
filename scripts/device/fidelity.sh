#!/usr/bin/env bash
# Issues 22 and 29 on the GPUs at hand: ddptop's weak run and `ddptop attach` against the
# chapter's own loop (workers/scripts/bare_d2l.py, its two settings included), interleaved, and
# every ddptop run's verdict (a slow first step under cudnn.benchmark must never end "hung").
# Arms, in the order A B C, then C B A, ... while the budget lasts:
#   bare    the chapter's loop under plain torchrun (its own BARE_RESULT figure)
#   ddptop  `ddptop run weak --k K` (defaults: book settings on, steps timed 1 in 10 on GPUs)
#   attach  `ddptop attach --k K -- bare_d2l.py` (the script's own BARE_RESULT, and ddptop's)
#   torchdef `ddptop run weak --k K --no-book-settings` (only with ARMS including it)
# KS (default "1") picks k; 2 needs two GPUs. Needs the release binary (.carry/ddptop or
# target/release/ddptop). Logs and the raw --json of every run go to $OUT; the table is last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-fidelity}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
PY=${DDPTOP_PYTHON}
B=${DDPTOP_BIN:-.carry/ddptop}; [ -x "$B" ] || B=target/release/ddptop
SAMPLES=${SAMPLES:-30000}; EPOCHS=${EPOCHS:-3}; BUDGET_S=${BUDGET_S:-420}
RES="$OUT/fidelity.tsv"; : > "$RES"
T0=$(date +%s)
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/fidelity.log"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
bare_figure() { $PY -c "import json,sys;[print(json.loads(l.split(' ',1)[1])['samples_per_s']) for l in open(sys.argv[1]) if l.startswith('BARE_RESULT')]" "$1" 2>/dev/null | tail -1; }
json_field() { $PY -c "import json,sys;r=json.load(open(sys.argv[1]))['runs'][0];v=r.get(sys.argv[2]);print('' if v is None else v)" "$1" "$2" 2>/dev/null; }

arm() {  # arm NAME K -> appends "arm<TAB>k<TAB>samples/s<TAB>status<TAB>note" to $RES
  local a=$1 k=$2 n; n="${a}_k${k}_$(date +%s%N)"; local f="$OUT/raw/$n"
  local sps="" status="" note=""
  case $a in
    bare)
      timeout 200 $PY -m torch.distributed.run --standalone --nproc-per-node="$k" \
        workers/scripts/bare_d2l.py --batch 256 --samples "$SAMPLES" --epochs "$EPOCHS" > "$f.log" 2>&1
      sps=$(bare_figure "$f.log"); status=$([ -n "$sps" ] && echo completed || echo failed) ;;
    ddptop|torchdef)
      local extra=""; [ "$a" = torchdef ] && extra="--no-book-settings"
      timeout 300 "$B" run weak --k "$k" --backend nccl --model resnet18 --batch 256 \
        --samples "$SAMPLES" --epochs "$EPOCHS" $extra --json > "$f.json" 2> "$f.stderr"
      status=$(json_field "$f.json" status); sps=$(json_field "$f.json" samples_per_s)
      note="$(json_field "$f.json" torch_settings) $(json_field "$f.json" reason)" ;;
    attach)
      timeout 300 "$B" attach --k "$k" --backend nccl --json -- workers/scripts/bare_d2l.py \
        --batch 256 --samples "$SAMPLES" --epochs "$EPOCHS" > "$f.json" 2> "$f.stderr"
      status=$(json_field "$f.json" status)
      local olog; olog=$(json_field "$f.json" output_log)
      [ -f "$olog" ] && cp "$olog" "$f.output.log"
      sps=$(bare_figure "$f.output.log")   # the script's own figure
      note="ddptop's figure $(json_field "$f.json" samples_per_s); $(json_field "$f.json" reason)" ;;
  esac
  log "$a k=$k: ${sps:-none} samples/s, ${status:-no status} ${note}"
  printf '%s\t%s\t%s\t%s\t%s\n' "$a" "$k" "${sps:-}" "${status:-none}" "$note" >> "$RES"
}

nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv > "$OUT/gpus_before.csv" 2>&1
log "binary $B; samples $SAMPLES, epochs $EPOCHS (epoch 0 warm-up), budget ${BUDGET_S} s"
round=0
while :; do
  if [ $((round % 2)) -eq 0 ]; then order=${ARMS:-bare ddptop attach}; else order=$(echo ${ARMS:-bare ddptop attach} | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for k in ${KS:-1}; do for a in $order; do arm "$a" "$k"; done; done
  round=$((round + 1))
  [ $(( $(elapsed) / round * (round + 1) )) -gt "$BUDGET_S" ] && break
done
log "rounds: $round, total $(elapsed) s"
$PY - "$RES" <<'PY' | tee "$OUT/fidelity_table.txt"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
by, verdicts = {}, {}
for a, k, v, status, note in rows:
    verdicts.setdefault((a, int(k)), []).append(status)
    if v and status == "completed":
        by.setdefault((a, int(k)), []).append(float(v))
print(f"{'arm':10}{'k':3}{'verdicts':28}{'samples/s median (each run)':40}vs bare")
for k in sorted({k for _, k in verdicts}):
    bare = statistics.median(by[("bare", k)]) if ("bare", k) in by else None
    for a in ("bare", "ddptop", "torchdef", "attach"):
        if (a, k) not in verdicts:
            continue
        st = verdicts[(a, k)]
        vs = ",".join(sorted({f"{s}x{st.count(s)}" for s in st}))
        v = by.get((a, k), [])
        m = statistics.median(v) if v else None
        cell = (f"{m:9.1f} (" + ", ".join(f"{x:.0f}" for x in v) + ")") if v else "-"
        ratio = f"{100 * m / bare:6.2f}%" if (bare and m) else "   n/a"
        print(f"{a:10}{k:<3}{vs:28}{cell:40}{ratio}")
PY
