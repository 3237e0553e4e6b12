#!/usr/bin/env bash
# Issue 51's flake hunt, the way CI runs these binaries (scripts/test, scripts/test-rust): per
# repetition, phase 1's lanes at once (attach_gloo without its timing tests, then gloo_runs
# without its straggler tests | fault_matrix), then phase 2's late lane one group after the other
# (sim_runs + reliability at once, attach_gloo's hang/stalled/slow_rank tests, gloo_runs' slow
# tests). No retries: every binary runs once per repetition and any failure is kept.
# Usage: scripts/flake_hunt.sh COMMIT REPS OUTDIR
# FIRST=14 numbers the repetitions from 14: a hunt continued in the same OUTDIR (the tree is
# extracted again with the commit's own mtimes, so its target/ is reused as built).
# The commit is archived to OUTDIR/tree and built there with its own target/, so that its test
# binaries find that tree's workers (not a working tree others are editing).
set -uo pipefail
commit=$1 reps=$2 out=$3
main=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/tree" "$out/fail"
git -C "$main" archive "$commit" | tar -x -C "$out/tree"
cd "$out/tree" || exit 1
ln -sfn "$main/.venv" .venv
. scripts/test_env.sh >/dev/null 2>&1
export CI=1 LD_LIBRARY_PATH="$TORCH_LIB" PATH="$build_path" CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
cargo build -q -p ddptop-nccl-profiler && cargo test -q --workspace --all-targets --no-run 2>&1 | tail -2
D=$out/tree/target/debug/deps
bin() { ls -t "$D/$1"-* | grep -v '\.d$' | head -1; }
A=$(bin attach_gloo) R=$(bin reliability) F=$(bin fault_matrix) G=$(bin gloo_runs) S=$(bin sim_runs)
first=${FIRST:-1}
echo "hunt of $commit: $reps repetitions from $first, $(nproc) cores, started $(date -u +%FT%TZ)" >>"$out/summary.txt"
for i in $(seq "$first" $((first + reps - 1))); do
  t0=$(date +%s) l0=$(cut -d' ' -f1 /proc/loadavg)
  # phase 1 (two lanes at once)
  ( "$A" --skip hang --skip stalled --skip slow_rank >"$out/a1_$i.txt" 2>&1; echo $? >"$out/rc_a1_$i"
    "$G" --skip slow >"$out/g1_$i.txt" 2>&1; echo $? >"$out/rc_g1_$i" ) &
  "$F" >"$out/f_$i.txt" 2>&1; echo $? >"$out/rc_f_$i"
  wait
  # phase 2 (one group after the other)
  "$S" >"$out/s_$i.txt" 2>&1 & ps=$!
  "$R" >"$out/r_$i.txt" 2>&1; echo $? >"$out/rc_r_$i"
  wait $ps; echo $? >"$out/rc_s_$i"
  "$A" hang stalled slow_rank >"$out/a2_$i.txt" 2>&1; echo $? >"$out/rc_a2_$i"
  "$G" slow --nocapture >"$out/g2_$i.txt" 2>&1; echo $? >"$out/rc_g2_$i"
  line="rep $i $(date -u +%T) wall=$(($(date +%s) - t0))s load_start=$l0 load_end=$(cut -d' ' -f1 /proc/loadavg)"
  bad=0
  for n in a1 g1 f s r a2 g2; do
    rc=$(cat "$out/rc_${n}_$i"); line="$line $n=$rc"
    if [ "$rc" != 0 ]; then bad=1; cp "$out/${n}_$i.txt" "$out/fail/"; fi
  done
  grep -h "^latency" "$out/g2_$i.txt" | sed "s/^/rep $i /" >>"$out/latency.txt"
  ((bad)) && line="$line FAILED: $(grep -h '^test .* FAILED' "$out"/*_"$i".txt | tr '\n' ' ')"
  echo "$line" >>"$out/summary.txt"
  rm -f "$out"/*_"$i".txt "$out"/rc_*_"$i"
done
echo "hunt of $commit ended $(date -u +%FT%TZ)" >>"$out/summary.txt"
