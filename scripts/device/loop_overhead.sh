#!/usr/bin/env bash
# Issue 17: ddptop's training loop against the independent bare d2l loop, on 2 GPUs.
# Arms, interleaved in one session (A B C at k=2, A B C at k=1, then C B A, C B A while the time
# budget lasts): bare = workers/scripts/bare_d2l.py under torchrun; ddptop = `ddptop run weak`
# (instrumented worker talking to ddptop over its socket); noinst = the worker's --no-instrument
# loop under torchrun. Same model (d2l ResNet-18), per-rank batch 256, samples, epochs (epoch 0
# warm-up). Figure: sum over ranks of each rank's mean samples/s over the timed epochs.
# ARMS (default "bare ddptop noinst") may add ddptop10: ddptop with steps timed 1 in 10
# (DDPTOP_TIME_EVERY=10); KS (default "2 1") picks the k values.
# Run from the repo root; needs the release binary (target/release/ddptop or .carry/ddptop).
# Logs go to $OUT; the table is printed last. About 4 minutes.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-overhead}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=${DDPTOP_PYTHON}
B=${DDPTOP_BIN:-target/release/ddptop}; [ -x "$B" ] || B=./.carry/ddptop
SAMPLES=${SAMPLES:-30000}; EPOCHS=${EPOCHS:-3}; BUDGET_S=${BUDGET_S:-230}
RES="$OUT/loop_overhead.tsv"; : > "$RES"
T0=$(date +%s)
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/loop_overhead.log"; }
elapsed() { echo $(( $(date +%s) - T0 )); }

arm() {  # arm K -> appends "arm<TAB>k<TAB>samples/s" to $RES
  local a=$1 k=$2 f="$OUT/overhead_${1}_k${2}_$(date +%s%N).log" sps="" t=$(date +%s.%N)
  case $a in
    bare)
      timeout 150 $PY -m torch.distributed.run --standalone --nproc-per-node="$k" \
        workers/scripts/bare_d2l.py --batch 256 --samples "$SAMPLES" --epochs "$EPOCHS" > "$f" 2>&1
      sps=$($PY -c "import json,sys;[print(json.loads(l.split(' ',1)[1])['samples_per_s']) for l in open(sys.argv[1]) if l.startswith('BARE_RESULT')]" "$f" | tail -1) ;;
    noinst)
      PYTHONPATH=workers timeout 150 $PY -m torch.distributed.run --standalone --nproc-per-node="$k" \
        -m ddptop_worker train --backend nccl --model resnet18 --batch 256 --samples "$SAMPLES" \
        --epochs "$EPOCHS" --no-instrument > "$f" 2>&1
      sps=$($PY -c "import re,sys;v=[float(m.group(1)) for m in re.finditer(r'rank \d+: ([0-9.]+) samples/s per rank', open(sys.argv[1]).read())];print(round(sum(v),1) if v else '')" "$f") ;;
    ddptop|ddptop10)
      local every=1; [ "$a" = ddptop10 ] && every=10
      timeout 150 "$B" run weak --k "$k" --backend nccl --model resnet18 --batch 256 \
        --samples "$SAMPLES" --epochs "$EPOCHS" --env "DDPTOP_TIME_EVERY=$every" --json > "$f" 2> "$f.stderr"
      sps=$($PY -c "import json,sys;r=json.load(open(sys.argv[1]))['runs'][0];print(r['samples_per_s'] if r['status']=='completed' and r['samples_per_s'] else '')" "$f" 2>/dev/null) ;;
  esac
  log "$a k=$k: ${sps:-FAILED} samples/s ($(awk -v a="$(date +%s.%N)" -v b="$t" "BEGIN {printf \"%.1f\", a - b}") s, log $f)"
  [ -n "$sps" ] && printf '%s\t%s\t%s\n' "$a" "$k" "$sps" >> "$RES"
}

nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv > "$OUT/gpus_before.csv" 2>&1
log "binary $B; samples $SAMPLES, epochs $EPOCHS (epoch 0 warm-up), budget ${BUDGET_S} s"
round=0
while :; do
  if [ $((round % 2)) -eq 0 ]; then order=${ARMS:-bare ddptop noinst}; else order=$(echo ${ARMS:-bare ddptop noinst} | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for k in ${KS:-2 1}; do for a in $order; do arm "$a" "$k"; done; done
  round=$((round + 1))
  # a round takes about as long as the last one did; stop when another would overrun
  [ $(( $(elapsed) / round * (round + 1) )) -gt "$BUDGET_S" ] && break
done
log "rounds: $round, total $(elapsed) s"
nvidia-smi --query-gpu=index,clocks.sm,temperature.gpu --format=csv > "$OUT/gpus_after.csv" 2>&1
$PY - "$RES" <<'PY' | tee "$OUT/loop_overhead_table.txt"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
by = {}
for a, k, v in rows:
    by.setdefault((a, int(k)), []).append(float(v))
print(f"{'arm':17}{'k':3}{'runs':6}{'samples/s median (each run)':38}vs bare")
for k in (1, 2):
    bare = statistics.median(by[("bare", k)]) if ("bare", k) in by else None
    for a, label in (("bare", "bare d2l"), ("ddptop", "ddptop instr."), ("ddptop10", "instr. 1 in 10"), ("noinst", "--no-instrument")):
        v = by.get((a, k))
        if not v:
            print(f"{label:17}{k:<3}{0:<6}-")
            continue
        m = statistics.median(v)
        ratio = f"{100 * m / bare:6.2f}%" if bare else "   n/a"
        cell = f"{m:9.1f} (" + ", ".join(f"{x:.0f}" for x in v) + ")"
        print(f"{label:17}{k:<3}{len(v):<6}{cell:38}{ratio}")
PY
