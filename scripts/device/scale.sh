#!/usr/bin/env bash
# Issue 30 on a GPU machine: the first frame with real NVML and torch present, and the scale
# bench on a quiet 16-core host (the 2-core development VM is shared with builds and tests).
#  1. First frame on a pseudo-terminal (scripts/first_frame.sh, the method of scripts/bench),
#     backend auto (ddptop asks Python for torch and CUDA and starts NVML), sim and gloo; and the
#     `--script` first screen with backend auto, which waits for detection (best of 2).
#  2. `scale` bench binaries of several commits, interleaved ($ARMS, then the same in reverse;
#     default "base new") at $RANKS ranks x 20 steps/s, 10 s each, JSON lines.
# Carried: .carry/ddptop (release, stripped), .carry/scale-ARM for each arm (the `scale` bench
# binaries, stripped). FIRST_FRAME=0 skips part 1. Output under $OUT: first_frame.txt,
# scale.jsonl, table.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
bin=$PWD/.carry/ddptop
RANKS=${RANKS:-256,1024}
tmp=$(mktemp -d)
py=${DDPTOP_PYTHON:-$(command -v python3 || true)}
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
. scripts/first_frame.sh

[ "${FIRST_FRAME:-1}" = 1 ] && {
  echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(nvidia-smi -L 2>&1 | head -2 | tr '\n' ' ')"
  echo "python: $py ($("$py" -c 'import torch; print(torch.__version__)' 2>&1))"
  for mode in auto sim gloo; do
    arg=""; [ "$mode" != auto ] && arg="--backend $mode"
    echo "first frame on a terminal, $mode: $(tty_frame "$mode" "$arg") ms (best of 3)"
  done
  best=$(script_frame auto 2)
  echo "--script first screen, backend auto: $best ms (best of 2)"
} > "$OUT/first_frame.txt" 2>&1

: > "$OUT/scale.jsonl"
ARMS=${ARMS:-base new}
order="$ARMS $(echo $ARMS | tr ' ' '\n' | tac | tr '\n' ' ')"
for arm in $order; do
  b=$PWD/.carry/scale-$arm
  [ -x "$b" ] || continue
  "$b" --bench --ranks "$RANKS" --rate 20 --seconds 10 --json 2>>"$OUT/scale.err" |
    sed "s/^/{\"arm\":\"$arm\",\"row\":/; s/\$/}/" >> "$OUT/scale.jsonl"
done
python3 - "$OUT/scale.jsonl" > "$OUT/table.txt" <<'PY'
import json, sys
print("%-6s %6s %10s %9s %9s %9s %8s %8s" % ("arm", "ranks", "lines/s", "dropped", "CPU%", "us/line", "RSS MiB", "p99 ms"))
for line in open(sys.argv[1]):
    d = json.loads(line); a, r = d["arm"], d["row"]
    s = r["sent"]; sent = s["steps"] + s["buckets"] + s["heartbeats"]
    rate = sent / max(s["seconds"], 1e-9)
    # CPU seconds of the window over the lines sent (the window can be longer than the load).
    us = r["cpu_pct"] / 100 * r["wall_s"] / sent * 1e6
    print("%-6s %6d %10.0f %9d %9.1f %9.2f %8.1f %8.2f" % (a, r["ranks"], rate, sent - r["received"],
          r["cpu_pct"], us, r["rss_bytes"] / 2**20, r["frame_p99_ms"]))
PY
cat "$OUT/first_frame.txt" 2>/dev/null; cat "$OUT/table.txt"
