#!/usr/bin/env bash
# Issues 22 and 29 on one GPU, beside fidelity.sh: the verdicts on real CUDA/NCCL paths, and what
# the book's two settings are worth on ddptop's own run.
#   jax        `run jax --k 1` (XLA compiles for ~9 s before its first step): must complete
#   slowstart  `run weak --k 1 --inject slowstart:25` (25 s of CPU before step 1): must complete
#   stall      `attach --k 1 --hang-floor 5 -- examples/train_ddp_stalls.py --stall-s 20` on NCCL:
#              reported as stalled (idle, nothing pending), not stopped, completed
#   book/off   `run weak --k 1` with and without the book's settings, interleaved (ROUNDS pairs)
# ONLY (default "jax slowstart stall book") picks parts. Needs .carry/ddptop (or target/release/ddptop). Raw --json of every run in $OUT/raw.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-watchdog}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
B=${DDPTOP_BIN:-.carry/ddptop}; [ -x "$B" ] || B=target/release/ddptop
ROUNDS=${ROUNDS:-2}; SAMPLES=${SAMPLES:-20000}
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/watchdog.log"; }
field() { python3 -c "import json,sys;r=json.load(open(sys.argv[1]))['runs'][0];v=r.get(sys.argv[2]);print('' if v is None else v)" "$1" "$2" 2>/dev/null; }
run() {  # run NAME CAP ARGS... (ARGS include --json, before any `--`)
  local name=$1 cap=$2; shift 2; local f="$OUT/raw/$name" t0; t0=$(date +%s)
  timeout -k 5 "$cap" "$B" "$@" > "$f.json" 2> "$f.stderr"
  local rc=$?
  log "$name rc=$rc wall=$(( $(date +%s) - t0 )) s status=$(field "$f.json" status) samples/s=$(field "$f.json" samples_per_s) reason=$(field "$f.json" reason)"
  printf '%s\t%s\t%s\t%s\n' "$name" "$(field "$f.json" status)" "$(field "$f.json" samples_per_s)" "$rc" >> "$OUT/watchdog.tsv"
}
: > "$OUT/watchdog.tsv"
ONLY=${ONLY:-jax slowstart stall book}
case " $ONLY " in *" jax "*) run jax 200 run jax --k 1 --backend nccl --samples 30000 --json;; esac
case " $ONLY " in *" slowstart "*) run slowstart 200 run weak --k 1 --backend nccl --samples "$SAMPLES" \
  --epochs 3 --inject slowstart:25 --json;; esac
case " $ONLY " in *" stall "*)
run stall 200 attach --k 1 --backend nccl --hang-floor 5 --json -- examples/train_ddp_stalls.py \
  --stall-s 20 --backend nccl --epochs 2 --samples 65536 --batch-size 256 --hidden 4096
python3 -c "import json,sys;print('\n'.join(json.load(open(sys.argv[1]))['runs'][0]['hang_report']))" \
  "$OUT/raw/stall.json" 2>&1 | tee -a "$OUT/watchdog.log";;
esac
case " $ONLY " in *" book "*) ;; *) ROUNDS=0;; esac
for i in $(seq 1 "$ROUNDS"); do
  if [ $((i % 2)) -eq 1 ]; then order="book off"; else order="off book"; fi
  for a in $order; do
    extra=""; [ "$a" = off ] && extra="--no-book-settings"
    run "${a}_$i" 200 run weak --k 1 --backend nccl --samples "$SAMPLES" --epochs 3 $extra --json
  done
done
log "GPU compute processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
python3 - "$OUT/watchdog.tsv" <<'PY'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines() if l]
print(f"{'run':12}{'status':12}{'samples/s':>12}")
for name, status, sps, rc in rows:
    print(f"{name:12}{status:12}{sps[:10]:>12}")
for arm in ("book", "off"):
    v = [float(s) for n, st, s, _ in rows if n.startswith(arm + "_") and st == "completed" and s]
    if v:
        print(f"{arm}: median {statistics.median(v):.1f} over {len(v)} ({', '.join(f'{x:.0f}' for x in v)})")
PY
