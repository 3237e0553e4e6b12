#!/usr/bin/env bash
# Issue 11 on 2 GPUs, through the release binary (target/release/ddptop or .carry/ddptop):
#  (a) the book's deadlock: NCCL_P2P_DISABLE=1 + NCCL_SHM_USE_CUDA_MEMCPY=1 blocks DDP's
#      constructor broadcast (phase ddp_init); how long until ddptop says "hung";
#  (b) a teardown hang injected on NCCL (DDPTOP_INJECT=teardown:0: every rank sends result and
#      bye, then blocks before destroy_process_group), how ddptop ends and records the run;
#  (c) two concurrent `ddptop run weak --k $K` on the same GPUs: what the second one does
#      (expected: refused, naming the first ddptop's pid and the GPU processes NVML lists);
#  (d) which NCCL toggles NCCL read: a weak run with NCCL_SHM_USE_CUDA_MEMCPY=1 and
#      NCCL_SOCKET_NTHREADS=2 besides the default NCCL_NVLS_ENABLE=0; the JSON's nccl_read.
# K (default 2) is the number of GPUs; with K=1 (one GPU lent) (a) is skipped: the deadlock
# needs two ranks.
# After each: the GPUs' compute processes (nvidia-smi) and any worker/launcher process left.
# The verdicts depend on the Rust side (watchdog phases, teardown deadline, GPU lock); this
# script records whichever outcome happens. Each scenario has a wall-clock cap (timeout); a
# process left behind by this script's own runs is listed and then killed by pid (the device
# machine runs nothing else). Logs in $OUT; the table is printed last. About 3 minutes when
# ddptop ends each run itself; the caps (60 + 80 + 30 + 50 + 35 s) bound it at about 4.5 minutes.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-reliability}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=${DDPTOP_PYTHON}
K=${K:-2}
B=${DDPTOP_BIN:-target/release/ddptop}; [ -x "$B" ] || B=./.carry/ddptop
TABLE="$OUT/reliability.tsv"; : > "$TABLE"
log() { echo "== $(date -u +%T) $*" | tee -a "$OUT/reliability.log"; }

# summary FILE.json -> "status | samples/s | reason (first 160 chars)"
summary() {
  $PY - "$1" <<'PY' 2>/dev/null || echo "no JSON document"
import json, re, sys
d = json.load(open(sys.argv[1]))
r = d["runs"][0]
reason = (r.get("reason") or "").replace("\n", " ")
m = re.search(r"for ([0-9.]+) s", reason)
hung_after = f"; stuck {m.group(1)} s when judged" if m and r["status"] == "hung" else ""
print(f"{r['status']} | sps {r.get('samples_per_s')} | {reason[:160]}{hung_after}")
for h in r.get("hang_report") or []:
    print("    " + h[:200], file=sys.stderr)
PY
}

# leftovers NAME -> records GPU compute processes and our processes still alive, then ends them
leftovers() {
  local apps procs
  apps=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null)
  procs=$(ps -eo pid=,etimes=,args= | grep -E "[d]dptop_worker|[t]orch\.distributed\.run|[t]orchrun|[b]are_d2l" )
  { echo "-- $1: nvidia-smi compute apps:"; echo "${apps:-none}"; echo "-- $1: processes:"; echo "${procs:-none}"; } >> "$OUT/reliability.log"
  local n_apps n_procs
  n_apps=$(printf '%s' "$apps" | grep -c . ); n_procs=$(printf '%s' "$procs" | grep -c . )
  if [ "$n_procs" -gt 0 ]; then
    printf '%s\n' "$procs" | awk '{print $1}' | while read -r pid; do kill -9 "$pid" 2>/dev/null; done
    sleep 2
  fi
  echo "$n_apps GPU procs, $n_procs left"
}

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$TABLE"; }

log "binary $B"
"$B" --version >> "$OUT/reliability.log" 2>&1

# (a) the book's deadlock ------------------------------------------------------------------
if [ "$K" -ge 2 ]; then
log "(a) deadlock: ddptop run weak --k $K --env NCCL_P2P_DISABLE=1 --env NCCL_SHM_USE_CUDA_MEMCPY=1"
t=$(date +%s.%N)
timeout -k 5 60 "$B" run weak --k $K --backend nccl --env NCCL_P2P_DISABLE=1 \
  --env NCCL_SHM_USE_CUDA_MEMCPY=1 --json > "$OUT/a_deadlock.json" 2> "$OUT/a_deadlock.stderr"
rc=$?; wall=$(awk -v a="$(date +%s.%N)" -v b="$t" "BEGIN {printf \"%.1f\", a - b}")
s=$(summary "$OUT/a_deadlock.json" 2>>"$OUT/reliability.log"); left=$(leftovers a)
log "(a) rc=$rc wall=${wall}s: $s; $left"
record "(a) book's deadlock" "rc=$rc, ${wall} s wall" "$s" "$left"
else
record "(a) book's deadlock" "skipped" "needs 2 GPUs, K=$K" "-"
fi

# (b) teardown hang on NCCL --------------------------------------------------------------
# Expected: completed, reason "teardown hung: ... results kept", ~teardown-timeout after the byes.
log "(b) teardown hang: ddptop run weak --k $K --samples 30000 --inject teardown:0 --teardown-timeout 15"
t=$(date +%s.%N)
timeout -k 5 80 "$B" run weak --k $K --backend nccl --samples 30000 \
  --inject teardown:0 --teardown-timeout 15 --json > "$OUT/b_teardown.json" 2> "$OUT/b_teardown.stderr"
rc=$?; wall=$(awk -v a="$(date +%s.%N)" -v b="$t" "BEGIN {printf \"%.1f\", a - b}")
[ "$rc" = 124 ] && log "(b) ddptop did not end by itself: stopped by timeout after 80 s"
s=$(summary "$OUT/b_teardown.json" 2>>"$OUT/reliability.log"); left=$(leftovers b)
log "(b) rc=$rc wall=${wall}s: $s; $left"
record "(b) teardown hang" "rc=$rc, ${wall} s wall" "$s" "$left"

# (c) two ddptops on the same GPUs -------------------------------------------------------
log "(c) two concurrent ddptop run weak --k $K"
"$B" run weak --k $K --backend nccl --json > "$OUT/c_first.json" 2> "$OUT/c_first.stderr" &
first=$!
for _ in $(seq 60); do  # until the first run's two ranks hold the GPUs (at most 30 s)
  [ "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c .)" -ge "$K" ] && break
  sleep 0.5
done
log "(c) first run holds $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .) GPU process(es); starting the second"
t=$(date +%s.%N)
timeout -k 5 50 "$B" run weak --k $K --backend nccl --json > "$OUT/c_second.json" 2> "$OUT/c_second.stderr"
rc2=$?; wall2=$(awk -v a="$(date +%s.%N)" -v b="$t" "BEGIN {printf \"%.1f\", a - b}")
( sleep 35; kill -INT "$first" 2>/dev/null ) & guard=$!
wait "$first"; rc1=$?; kill "$guard" 2>/dev/null
s1=$(summary "$OUT/c_first.json" 2>>"$OUT/reliability.log"); s2=$(summary "$OUT/c_second.json" 2>>"$OUT/reliability.log")
said=$(grep -v '^\s*$' "$OUT/c_second.stderr" | head -3 | tr '\n' ' ' | cut -c1-200)
left=$(leftovers c)
log "(c) second: rc=$rc2 wall=${wall2}s: $s2; stderr: ${said:-<empty>}"
log "(c) first: rc=$rc1: $s1; $left"
record "(c) second ddptop" "rc=$rc2, ${wall2} s wall" "$s2; stderr: ${said:-<empty>}" "-"
record "(c) first ddptop" "rc=$rc1" "$s1" "$left"

# (d) NCCL toggles taken or ignored ---------------------------------------------------------
log "(d) toggles: ddptop run weak --k $K --samples 20000 --env NCCL_SHM_USE_CUDA_MEMCPY=1 --env NCCL_SOCKET_NTHREADS=2"
timeout -k 5 60 "$B" run weak --k $K --backend nccl --samples 20000 --env NCCL_SHM_USE_CUDA_MEMCPY=1 \
  --env NCCL_SOCKET_NTHREADS=2 --json > "$OUT/d_toggles.json" 2> "$OUT/d_toggles.stderr"
rc=$?
read_=$($PY -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]; print(r["status"], json.dumps(r.get("nccl_read")))' "$OUT/d_toggles.json" 2>/dev/null || echo "no JSON document")
grep -h "set by environment" "$DDPTOP_DATA_DIR"/runs/*/nccl*.log 2>/dev/null | sed 's/^[^ ]* //' | sort -u | head -20 >> "$OUT/reliability.log"
left=$(leftovers d)
log "(d) rc=$rc: $read_; $left"
record "(d) NCCL toggles" "rc=$rc" "$read_" "$left"

echo
printf '%-20s | %-18s | %s | %s\n' scenario "exit, wall" "status | samples/s | reason" "after"
while IFS=$'\t' read -r a b c d; do printf '%-20s | %-18s | %s | %s\n' "$a" "$b" "$c" "$d"; done < "$TABLE"
