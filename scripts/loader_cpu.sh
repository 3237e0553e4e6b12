#!/usr/bin/env bash
# Issue 48 on gloo/CPU: `ddptop run weak --k 1 --data-path loader` against the copy of the book's
# loader loop (workers/scripts/book_loader.py), and ddptop's fast-loader beside them, in
# interleaved rounds (book loader fast, then fast loader book, ...). Same model (tiny: ResNet-18
# is minutes per epoch on 2 cores), per-rank batch, samples, epochs (epoch 0 warm-up), synthetic
# FashionMNIST-shaped PIL images, one OpenMP thread (what ddptop gives every gloo rank).
# Figure per arm: its samples/s; per round: loader / book and fast-loader / book, so that a
# slower or faster moment of a shared machine moves both sides of a ratio; the median over
# rounds is the figure. Prints the table last; raw lines in $OUT.
#   ROUNDS=4 SAMPLES=2048 BATCH=64 EPOCHS=2 scripts/loader_cpu.sh
# ARMS may add loader10: the loader arm with steps timed 1 in 10 (DDPTOP_TIME_EVERY=10, as ddptop
# gives GPU runs; gloo runs time every step), to see what per-step timing costs on the CPU.
# PIN=2-5 runs every arm under `taskset -c 2-5` (the arm's process tree: ddptop, torchrun, the
# rank and its loader workers, or the book's script and its loader workers), so that both sides
# get the same cores every round (scripts/device/loader_cpu_pinned.sh). BUDGET_S stops starting
# rounds after that many seconds (a round is always finished), so the table still prints.
# Needs $DDPTOP_PYTHON with torch and torchvision (scripts/test_env.sh) and a built ddptop
# (DDPTOP_BIN, default target/release/ddptop, else target/debug/ddptop).
set -u
cd "$(dirname "$0")/.."
PY=${DDPTOP_PYTHON:-.venv/bin/python}
B=${DDPTOP_BIN:-target/release/ddptop}; [ -x "$B" ] || B=target/debug/ddptop
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-4}; SAMPLES=${SAMPLES:-2048}; BATCH=${BATCH:-64}; EPOCHS=${EPOCHS:-2}
ARMS=${ARMS:-book loader fast-loader}
BUDGET_S=${BUDGET_S:-0}; T0=$(date +%s)
PIN_CMD=(); [ -n "${PIN:-}" ] && PIN_CMD=(taskset -c "$PIN")
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-$OUT/ddptop-data}
RES="$OUT/loader_cpu.tsv"; : > "$RES"
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/loader_cpu.log"; }

arm() {  # arm NAME ROUND -> appends "round<TAB>arm<TAB>samples/s"
  local a=$1 r=$2 f="$OUT/${1}_r${2}.log" sps=""
  case $a in
    book)
      OMP_NUM_THREADS=1 timeout 900 "${PIN_CMD[@]}" "$PY" workers/scripts/book_loader.py --model tiny \
        --batch "$BATCH" --samples "$SAMPLES" --epochs "$EPOCHS" > "$f" 2>&1
      sps=$("$PY" -c "import json,sys;[print(json.loads(l.split(' ',1)[1])['samples_per_s']) for l in open(sys.argv[1]) if l.startswith('BOOK_RESULT')]" "$f" | tail -1) ;;
    loader|fast-loader|loader10)
      local path=$a every=1; [ "$a" = loader10 ] && path=loader every=10
      DDPTOP_PYTHON=$PY timeout 900 "${PIN_CMD[@]}" "$B" run weak --k 1 --backend gloo --model tiny \
        --env "DDPTOP_TIME_EVERY=$every" --data-path "$path" --batch "$BATCH" --samples "$SAMPLES" --epochs "$EPOCHS" --json > "$f" 2> "$f.stderr"
      sps=$("$PY" -c "import json,sys;r=json.load(open(sys.argv[1]))['runs'][0];print(r['samples_per_s'] if r['status']=='completed' and r['samples_per_s'] else '')" "$f" 2>/dev/null) ;;
  esac
  log "round $r $a: ${sps:-FAILED} samples/s (log $f)"
  [ -n "$sps" ] && printf '%s\t%s\t%s\n' "$r" "$a" "$sps" >> "$RES"
}

log "binary $B, python $PY; tiny model, batch $BATCH, samples $SAMPLES, epochs $EPOCHS (epoch 0 warm-up), $ROUNDS rounds of: $ARMS; $(nproc) cores, pinned to ${PIN:-none}, budget ${BUDGET_S}s, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  if (( BUDGET_S > 0 && $(date +%s) - T0 > BUDGET_S )); then log "budget of ${BUDGET_S}s spent: $((r - 1)) rounds"; break; fi
  order=$ARMS; [ $((r % 2)) -eq 0 ] && order=$(echo $ARMS | tr ' ' '\n' | tac | tr '\n' ' ')
  for a in $order; do arm "$a" "$r"; done
done
log "done; load $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$RES" <<'PY' | tee "$OUT/loader_cpu_table.txt"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
by: dict[str, dict[int, float]] = {}
for r, a, v in rows:
    by.setdefault(a, {})[int(r)] = float(v)
book = by.get("book", {})
print(f"{'arm':13}{'runs':6}{'samples/s median (each round)':44}{'vs book: median ratio of rounds (each)'}")
for a in ("book", "loader", "loader10", "fast-loader"):
    v = by.get(a)
    if not v:
        continue
    cell = f"{statistics.median(v.values()):8.1f} (" + ", ".join(f"{v[r]:.1f}" for r in sorted(v)) + ")"
    ratios = [v[r] / book[r] for r in sorted(v) if r in book and a != "book"]
    rc = (f"{100 * statistics.median(ratios):6.2f}% (" + ", ".join(f"{100 * x:.1f}" for x in ratios) + ")"
          if ratios else "")
    print(f"{a:13}{len(v):<6}{cell:44} {rc}")
PY
