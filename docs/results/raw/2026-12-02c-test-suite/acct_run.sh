#!/bin/bash
cd /work/main
set -a; . scripts/test_env.sh; set +a
export CI=1 LD_LIBRARY_PATH="$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for b in $(cat /tmp/acct_bins); do
  name=${b%-*}
  export PYACCT_LOG=/tmp/acct2_$name.log; rm -f $PYACCT_LOG
  s=$(date +%s)
  /usr/bin/time -f "$name wall %e user %U sys %S" /work/target-ci/debug/deps/$b -q > /tmp/acct2_$name.out 2>&1
  echo "$name rc=$? $(( $(date +%s) - s ))s" >> /tmp/acct2_summary
  tail -1 /tmp/acct2_$name.out >> /tmp/acct2_summary
done
echo done >> /tmp/acct2_summary
