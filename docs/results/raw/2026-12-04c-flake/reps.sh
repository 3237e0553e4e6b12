#!/bin/bash
# Issue 51's flake loop, third hunt: the attach, fault, straggler and reliability test binaries,
# three lanes at once per repetition (attach_gloo | reliability then fault_matrix | gloo_runs slow),
# N repetitions, beside whatever else runs on the machine. Failures' output kept.
cd /tmp/flk/tree && . /work/main/scripts/test_env.sh >/dev/null 2>&1
export CI=1 LD_LIBRARY_PATH="$TORCH_LIB" PATH="$build_path"
D=/work/main/target/flake-tests/debug/deps
bin() { ls -t $D/$1-* | grep -v '\.d$' | head -1; }
A=$(bin attach_gloo); R=$(bin reliability); F=$(bin fault_matrix); G=$(bin gloo_runs)
O=/tmp/flk/reps3
for i in $(seq 1 $1); do
  t0=$(date +%s); l0=$(cut -d' ' -f1 /proc/loadavg)
  $A > $O/a$i.txt 2>&1 & pa=$!
  ( $R > $O/r$i.txt 2>&1; echo "rel_rc=$?" > $O/rrc$i; $F > $O/f$i.txt 2>&1; echo "fm_rc=$?" > $O/frc$i ) & pb=$!
  $G slow > $O/g$i.txt 2>&1 & pg=$!
  wait $pa; ra=$?; wait $pb; wait $pg; rg=$?
  rr=$(cut -d= -f2 $O/rrc$i); rf=$(cut -d= -f2 $O/frc$i)
  f=$(grep -h "^test .* FAILED\|panicked at" $O/a$i.txt $O/r$i.txt $O/f$i.txt $O/g$i.txt | head -4 | tr '\n' ' ')
  echo "rep $i $(date +%T) wall=$(( $(date +%s)-t0 ))s attach_gloo=$ra reliability=$rr fault_matrix=$rf gloo_runs_slow=$rg load_start=$l0 load_end=$(cut -d' ' -f1 /proc/loadavg) $f" >> $O/summary.txt
  if [ $ra = 0 ] && [ $rr = 0 ] && [ $rf = 0 ] && [ $rg = 0 ]; then rm -f $O/a$i.txt $O/r$i.txt $O/f$i.txt $O/g$i.txt; fi
  rm -f $O/rrc$i $O/frc$i
done
