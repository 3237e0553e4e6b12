#!/usr/bin/env bash
# Issue 17: ddptop's training loop against the independent bare d2l loop, on 2 GPUs.
# Arms, interleaved in one session (A B C at k=2, A B C at k=1, then C B A, C B A while the time
# budget lasts): bare = workers/scripts/bare_d2l.py under torchrun; ddptop = `ddptop run weak`
# (instrumented worker talking to ddptop over its socket); noinst = the worker's --no-instrument
# loop under torchrun. Same model (d2l ResNet-18), per-rank batch 256, samples, epochs (epoch 0
# warm-up). Figure: sum over ranks of each rank's mean samples/s over the timed epochs.
# ARMS (default "bare ddptop noinst") may add ddptop10: ddptop with steps timed 1 in 10
# (DDPTOP_TIME_EVERY=10), and auto: ddptop's default on GPUs since the cadence change
# (DDPTOP_TIME_EVERY=auto, one step timed every 0.2-0.45 s); KS (default "2 1") picks the k
# values, BATCH (default 256) the per-rank batch of every arm (a larger one: slower steps, where
# auto times more of them):
#   ARMS="bare ddptop10 auto" KS=1 BATCH=2048 BUDGET_S=240 scripts/device/loop_overhead.sh
# Issue 48, the data path: book_loader = workers/scripts/book_loader.py under torchrun (the
# book's loader loop: PIL images, torchvision Resize(64) + ToTensor, DataLoader num_workers=2,
# DistributedSampler); loader = `ddptop run weak --data-path loader` (the same pipeline, in
# ddptop's worker); fast_loader = `--data-path fast-loader`; device = ddptop's default
# (GPU-resident data). Their figures are compared with book_loader's, per round (ratios of runs
# next to each other) and as medians:
#   ARMS="book_loader loader fast_loader device" KS=1 BUDGET_S=540 scripts/device/loop_overhead.sh
# loader_alt = the loader arm with the workers package from $ALT_WORKERS (another workers/ tree,
# e.g. a previous commit's), to measure what one worker change does, interleaved:
#   ALT_WORKERS=/path/to/old/workers ARMS="book_loader loader loader_alt" KS=1 ...
# These arms need torchvision (common.sh's need_torchvision installs the carried wheels).
# Synthetic FashionMNIST-shaped images (the device has no dataset): the first line of each log
# says so.
# Run from the repo root; needs the release binary (target/release/ddptop or .carry/ddptop).
# Logs go to $OUT; the table is printed last. About 4 minutes.
set -u
. "$(dirname "$0")/common.sh"
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-overhead}
PY=${DDPTOP_PYTHON}
B=$(ddptop_bin)
SAMPLES=${SAMPLES:-30000}; EPOCHS=${EPOCHS:-3}; BUDGET_S=${BUDGET_S:-230}; BATCH=${BATCH:-256}
RES="$OUT/loop_overhead.tsv"; : > "$RES"
case " ${ARMS:-} " in *" book_loader "*|*" loader "*|*" loader_alt "*) need=1 ;; *) need=0 ;; esac
(( need == 0 )) || need_torchvision || { echo "loop_overhead: the loader arms need torchvision (see $OUT/pip.log)"; exit 1; }
T0=$(date +%s)
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/loop_overhead.log"; }
elapsed() { echo $(( $(date +%s) - T0 )); }

arm() {  # arm K -> appends "arm<TAB>k<TAB>samples/s" to $RES
  local a=$1 k=$2 f="$OUT/overhead_${1}_k${2}_$(date +%s%N).log" sps="" t=$(date +%s.%N)
  case $a in
    bare)
      timeout 150 $PY -m torch.distributed.run --standalone --nproc-per-node="$k" \
        workers/scripts/bare_d2l.py --batch "$BATCH" --samples "$SAMPLES" --epochs "$EPOCHS" > "$f" 2>&1
      sps=$($PY -c "import json,sys;[print(json.loads(l.split(' ',1)[1])['samples_per_s']) for l in open(sys.argv[1]) if l.startswith('BARE_RESULT')]" "$f" | tail -1) ;;
    noinst)
      PYTHONPATH=workers timeout 150 $PY -m torch.distributed.run --standalone --nproc-per-node="$k" \
        -m ddptop_worker train --backend nccl --model resnet18 --batch "$BATCH" --samples "$SAMPLES" \
        --epochs "$EPOCHS" --no-instrument > "$f" 2>&1
      sps=$($PY -c "import re,sys;v=[float(m.group(1)) for m in re.finditer(r'rank \d+: ([0-9.]+) samples/s per rank', open(sys.argv[1]).read())];print(round(sum(v),1) if v else '')" "$f") ;;
    book_loader)
      timeout 300 $PY -m torch.distributed.run --standalone --nproc-per-node="$k" \
        workers/scripts/book_loader.py --batch "$BATCH" --samples "$SAMPLES" --epochs "$EPOCHS" > "$f" 2>&1
      sps=$($PY -c "import json,sys;[print(json.loads(l.split(' ',1)[1])['samples_per_s']) for l in open(sys.argv[1]) if l.startswith('BOOK_RESULT')]" "$f" | tail -1) ;;
    loader|fast_loader|device|loader_alt)
      local path=$a wd=${DDPTOP_WORKERS_DIR:-}; [ "$a" = fast_loader ] && path=fast-loader
      [ "$a" = loader_alt ] && { path=loader; wd=${ALT_WORKERS:?loader_alt needs ALT_WORKERS}; }
      DDPTOP_WORKERS_DIR=$wd timeout 300 "$B" run weak --k "$k" --backend nccl --model resnet18 --batch "$BATCH" \
        --samples "$SAMPLES" --epochs "$EPOCHS" --data-path "$path" --json > "$f" 2> "$f.stderr"
      sps=$($PY -c "import json,sys;r=json.load(open(sys.argv[1]))['runs'][0];print(r['samples_per_s'] if r['status']=='completed' and r['samples_per_s'] else '')" "$f" 2>/dev/null) ;;
    ddptop|ddptop10|auto)
      local every=1; [ "$a" = ddptop10 ] && every=10; [ "$a" = auto ] && every=auto
      timeout 150 "$B" run weak --k "$k" --backend nccl --model resnet18 --batch "$BATCH" \
        --samples "$SAMPLES" --epochs "$EPOCHS" --env "DDPTOP_TIME_EVERY=$every" --json > "$f" 2> "$f.stderr"
      sps=$($PY -c "import json,sys;r=json.load(open(sys.argv[1]))['runs'][0];print(r['samples_per_s'] if r['status']=='completed' and r['samples_per_s'] else '')" "$f" 2>/dev/null) ;;
  esac
  log "$a k=$k: ${sps:-FAILED} samples/s ($(awk -v a="$(date +%s.%N)" -v b="$t" "BEGIN {printf \"%.1f\", a - b}") s, log $f)"
  [ -n "$sps" ] && printf '%s\t%s\t%s\t%s\n' "$a" "$k" "$sps" "$round" >> "$RES"
}

nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv > "$OUT/gpus_before.csv" 2>&1
log "binary $B; samples $SAMPLES, batch $BATCH, epochs $EPOCHS (epoch 0 warm-up), budget ${BUDGET_S} s"
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
by: dict[tuple[str, int], dict[int, float]] = {}
for a, k, v, rnd in rows:
    by.setdefault((a, int(k)), {})[int(rnd)] = float(v)
# Each arm against its reference: the bare d2l loop for ddptop's loop, the book's loader loop
# for the data paths. "median" compares the medians; "rounds" is the median of the per-round
# ratios (the two runs of a round were next to each other in time).
ARMS = (("bare", "bare d2l", None), ("ddptop", "ddptop instr.", "bare"),
        ("ddptop10", "instr. 1 in 10", "bare"), ("auto", "instr. auto", "bare"),
        ("noinst", "--no-instrument", "bare"),
        ("book_loader", "book's loader", None), ("loader", "--data-path loader", "book_loader"),
        ("fast_loader", "fast-loader", "book_loader"), ("device", "device data", "book_loader"),
        ("loader_alt", "loader, ALT_WORKERS", "book_loader"))
print(f"{'arm':20}{'k':3}{'runs':6}{'samples/s median (each run)':44}{'vs ref (median)':18}vs ref (rounds: median, each)")
for k in (1, 2):
    for a, label, ref in ARMS:
        v = by.get((a, k))
        if not v:
            continue
        m = statistics.median(v.values())
        cell = f"{m:9.1f} (" + ", ".join(f"{v[r]:.0f}" for r in sorted(v)) + ")"
        rv = by.get((ref, k)) if ref else None
        vs = f"{100 * m / statistics.median(rv.values()):7.2f}% of {ref}" if rv else ""
        ratios = [v[r] / rv[r] for r in sorted(v) if rv and r in rv]
        per = (f"{100 * statistics.median(ratios):7.2f}% (" + ", ".join(f"{100 * x:.1f}" for x in ratios) + ")") if ratios else ""
        print(f"{label:20}{k:<3}{len(v):<6}{cell:44}{vs:18}{per}")
PY
