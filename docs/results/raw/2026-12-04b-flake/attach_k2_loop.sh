#!/bin/bash
# $1 = lane name, $2 = reps. Attach the tutorial script at k=2 on gloo, repeatedly.
lane=$1; reps=$2
for i in $(seq 1 $reps); do
  d=$(mktemp -d /tmp/flk/run.XXXX)
  DDPTOP_PYTHON=$PY /tmp/ddptop-flake --data-dir $d --workers-dir /tmp/flk/workers attach --k 2 --backend gloo --json -- /tmp/flk/examples/train_ddp.py --samples 1024 >$d/doc.json 2>$d/err.txt
  rc=$?
  v=$(python3 -c "
import json;d=json.load(open('$d/doc.json'));r=d['runs'][0]
bad=r['status']!='completed' or r['caveats'] or r['rank_tails']
print(r['status'], 'KEEP' if bad else 'ok')" 2>/dev/null || echo "nodoc KEEP")
  echo "$lane $i $(date +%T) rc=$rc $v load=$(cut -d' ' -f1 /proc/loadavg) dir=$d" >> /tmp/flk/summary.txt
  case "$v" in *KEEP*) ;; *) [ $rc = 0 ] && rm -rf $d ;; esac
done
