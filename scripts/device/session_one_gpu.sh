#!/usr/bin/env bash
# One H200, after the 2026-12-01 evening merges: what this session's changes do on CUDA/NCCL.
#   nvml     bench-gpu: the new NVML reads (SM clock, enforced power limit) answer, and their cost
#   knobs    `run weak --k 1 --env DDPTOP_DDP_BUCKET_CAP_MB=5` vs the default: DDP cut the
#            gradients differently (the bucket count of each run's timeline)
#   attach   `attach --k 1 --env DDPTOP_DDP_BUCKET_CAP_MB=5` on examples/train_ddp.py: the
#            bootstrap's log line and the bucket count, the script unchanged
#   fidelity `run weak --k 1` with the NCCL profiler plugin on (default) and off, interleaved
#            A B A B: samples/s stays at the chapter's figure (5,565 before this session)
# Needs .carry/ddptop and .carry/libnccl_profiler_ddptop.so. Raw output in $OUT/raw, a table last.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-session}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
B=${DDPTOP_BIN:-.carry/ddptop}; [ -x "$B" ] || B=target/release/ddptop
SAMPLES=${SAMPLES:-60000}
T="$OUT/table.tsv"; : > "$T"
row() { printf '%s\t%s\n' "$1" "$2" | tee -a "$T"; }
j() { python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(eval(sys.argv[2]))" "$@" 2>&1; }
buckets() {  # buckets RUN_ID: the number of buckets in the run's stored timeline
  "$B" show "$1" --json 2>/dev/null | python3 -c "import json,sys;d=json.load(sys.stdin);t=d.get('timelines') or [{}];print(len(t[0].get('buckets',[])))"
}
ONLY=${ONLY:-"nvml knobs attach fidelity"}
case " $ONLY " in *" nvml "*)
  "$B" bench-gpu --samples 20 --period-ms 100 --frames 50 > "$OUT/raw/bench_gpu.txt" 2>&1
  grep -i "clock\|power" "$OUT/raw/bench_gpu.txt" | head -8
  row "nvml SM clock read" "$(grep -c 'SM clock' "$OUT/raw/bench_gpu.txt") lines"
  nvidia-smi --query-gpu=clocks.sm,power.draw,power.limit --format=csv > "$OUT/raw/smi.csv" 2>&1;;
esac
case " $ONLY " in *" knobs "*)
  for arm in default cap5; do
    extra=(); [ $arm = cap5 ] && extra=(--env DDPTOP_DDP_BUCKET_CAP_MB=5)
    timeout -k 5 300 "$B" run weak --k 1 --backend nccl --samples 20000 "${extra[@]}" --json \
      > "$OUT/raw/knobs_$arm.json" 2> "$OUT/raw/knobs_$arm.stderr"
    id=$(j "$OUT/raw/knobs_$arm.json" "d['runs'][0]['run_id']")
    row "knobs $arm: status / buckets" "$(j "$OUT/raw/knobs_$arm.json" "d['runs'][0]['status']") / $(buckets "$id")"
    grep -h "DDP settings" "$DDPTOP_DATA_DIR/runs/$id/output.log" 2>/dev/null | head -2
  done;;
esac
case " $ONLY " in *" attach "*)
  timeout -k 5 300 "$B" attach --k 1 --env DDPTOP_DDP_BUCKET_CAP_MB=5 --json -- \
    examples/train_ddp.py --samples 20000 > "$OUT/raw/attach_cap5.json" 2> "$OUT/raw/attach_cap5.stderr"
  id=$(j "$OUT/raw/attach_cap5.json" "d['runs'][0]['run_id']")
  row "attach cap5: status / buckets" "$(j "$OUT/raw/attach_cap5.json" "d['runs'][0]['status']") / $(buckets "$id")"
  row "attach cap5: bootstrap said" "$(grep -h 'DDP settings' "$DDPTOP_DATA_DIR/runs/$id/output.log" "$OUT/raw/attach_cap5.json" 2>/dev/null | head -1 | cut -c1-120)";;
esac
case " $ONLY " in *" fidelity "*)
  for arm in on off on off; do
    g=(); [ $arm = off ] && g=(--no-nccl-profiler)
    timeout -k 5 300 "$B" "${g[@]}" run weak --k 1 --backend nccl --samples "$SAMPLES" --json \
      > "$OUT/raw/fid_$arm.$RANDOM.json" 2>/dev/null
  done
  for f in "$OUT"/raw/fid_*.json; do
    row "fidelity $(basename "$f" .json)" "$(j "$f" "round(d['runs'][0]['samples_per_s'] or 0, 1)")"
  done;;
esac
echo; echo "== table"; cat "$T"
