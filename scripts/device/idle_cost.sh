#!/usr/bin/env bash
# Issue 17: what a dashboard costs on a live GPU box. ddptop and nvitop (from wheels carried in
# .carry/wheels: nvitop, nvidia-ml-py, psutil) each in its own tmux session at 160x50, defaults,
# at the same time; CPU from /proc/PID/stat (utime+stime) over WINDOW seconds, RSS at the end.
# Then the same while ddptop's own k=1 weak run streams (ddptop started with --script). Table last.
set -u
export NCCL_NVLS_ENABLE=0 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-idle}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
WINDOW=${WINDOW:-30}
B=$PWD/.carry/ddptop; [ -x "$B" ] || B=$PWD/target/release/ddptop
python3 -m pip install -q --no-index --target /tmp/nvitop-site .carry/wheels/*.whl > "$OUT/pip.log" 2>&1
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_mb() { awk '/VmRSS/ {printf "%.1f", $2/1024}' "/proc/$1/status" 2>/dev/null; }
pane_pid() {  # the tool's own pid: the pane's shell, or the child it forked
  local p; p=$(tmux list-panes -t "$1" -F '#{pane_pid}' | head -1)
  case "$(cat /proc/$p/comm 2>/dev/null)" in sh|bash|dash) p=$(ps -o pid= --ppid "$p" | head -1 | tr -d ' ');; esac
  echo "$p"; }
measure() {  # measure LABEL PID... -> one row per pid
  local label=$1; shift; local -a t0; local i=0
  for p in "$@"; do t0[$i]=$(ticks "$p"); i=$((i+1)); done
  sleep "$WINDOW"; i=0
  for p in "$@"; do
    local d=$(( $(ticks "$p") - ${t0[$i]} ))
    printf '%-34s %8s%% %8s MB\n' "$label[$p]" "$(awk -v d="$d" -v hz="$HZ" -v w="$WINDOW" 'BEGIN {printf "%.2f", 100 * d / hz / w}')" "$(rss_mb "$p")" >> "$OUT/idle.tsv"
    i=$((i+1))
  done
}
: > "$OUT/idle.tsv"
tmux new-session -d -s dd -x 160 -y 50 "$B --backend nccl 2> $OUT/ddptop.stderr"
tmux new-session -d -s nv -x 160 -y 50 "PYTHONPATH=/tmp/nvitop-site python3 -m nvitop 2> $OUT/nvitop.stderr"
sleep 12  # ddptop's start asks python whether torch sees CUDA (a few seconds)
DD=$(pane_pid dd); NV=$(pane_pid nv)
echo "ddptop pid $DD ($(cat /proc/$DD/comm)), nvitop pid $NV ($(cat /proc/$NV/comm))" >> "$OUT/idle.log"
tmux capture-pane -p -t dd > "$OUT/ddptop_screen.txt"; tmux capture-pane -p -t nv > "$OUT/nvitop_screen.txt"
threads() { for t in /proc/$1/task/*; do echo "$(basename "$t") $(cat "$t/comm" | tr ' ' _) $(awk '{print $14 + $15}' "$t/stat")"; done; }
threads "$DD" > "$OUT/threads_before.txt"
measure "idle ddptop" "$DD" &
measure "idle nvitop" "$NV" &
wait
threads "$DD" > "$OUT/threads_after.txt"
# CPU ticks per ddptop thread over the idle window: where an idle second goes.
join <(sort "$OUT/threads_before.txt") <(sort "$OUT/threads_after.txt") \
  | awk -v hz="$HZ" -v w="$WINDOW" '{printf "  ddptop thread %-18s %6.2f%%\n", $2, 100 * ($5 - $3) / hz / w}' >> "$OUT/idle.tsv"
tmux send-keys -t dd q; tmux send-keys -t nv q; sleep 2
tmux kill-session -t dd 2>/dev/null; tmux kill-session -t nv 2>/dev/null
# While a run streams: the dashboard launches k=1 itself (key 1) and is measured during it.
tmux new-session -d -s dd2 -x 160 -y 50 "$B --backend nccl 2> $OUT/ddptop2.stderr"
sleep 12; DD=$(pane_pid dd2); tmux send-keys -t dd2 1; sleep 8
WINDOW=20 measure "k=1 streaming ddptop (20 s)" "$DD"
tmux capture-pane -p -t dd2 > "$OUT/ddptop_streaming_screen.txt"
tmux send-keys -t dd2 q; sleep 8; tmux kill-session -t dd2 2>/dev/null
echo; printf '%-34s %9s %11s\n' "tool[pid]" "CPU" "RSS"; cat "$OUT/idle.tsv"
