#!/bin/bash
# Issue 51's flake loop: the attach_gloo and reliability test binaries at once, N repetitions.
cd /tmp/flk/tree && . /work/main/scripts/test_env.sh >/dev/null 2>&1
export CI=1 LD_LIBRARY_PATH="$TORCH_LIB" PATH="$build_path"
D=/work/main/target/flake-tests/debug/deps
A=$(ls -t $D/attach_gloo-* | grep -v '\.d$' | head -1); R=$(ls -t $D/reliability-* | grep -v '\.d$' | head -1)
mkdir -p /tmp/flk/reps
for i in $(seq 1 $1); do
  t0=$(date +%s)
  $A > /tmp/flk/reps/a$i.txt 2>&1 & pa=$!
  $R > /tmp/flk/reps/r$i.txt 2>&1 & pr=$!
  wait $pa; ra=$?; wait $pr; rr=$?
  f=$(grep -h "FAILED\|panicked" /tmp/flk/reps/a$i.txt /tmp/flk/reps/r$i.txt | head -3 | tr '\n' ' ')
  echo "rep $i $(date +%T) wall=$(( $(date +%s)-t0 ))s attach rc=$ra rel rc=$rr load=$(cut -d' ' -f1 /proc/loadavg) $f" >> /tmp/flk/reps/summary.txt
  [ $ra = 0 ] && [ $rr = 0 ] && rm -f /tmp/flk/reps/a$i.txt /tmp/flk/reps/r$i.txt
done
