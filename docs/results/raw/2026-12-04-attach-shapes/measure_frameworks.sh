#!/bin/bash
# Issue 43, the three shapes added second: runs lightning_ddp, accelerate_accum (4 micro-batches)
# and fsdp2 R times each (interleaved) under `ddptop attach --k 2 --backend gloo`, as
# tests/attach_shapes.rs does, and appends one line per run to summary_frameworks.txt
# (cmp.py: status, instrument, steps, ddptop's figure, the script's, the difference).
cd /work/main; . scripts/test_env.sh >/dev/null
RAW=docs/results/raw/2026-12-04-attach-shapes
R=${R:-3}
B=${B:-target/debug/ddptop}
echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) binary $B ($(stat -c %y $B)) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $RAW/summary_frameworks.txt
for i in $(seq $R); do
for entry in "lightning_ddp|" "accelerate_accum|--accum 4" "fsdp2|"; do
  name=${entry%%|*}; read -r -a extra <<< "${entry#*|}"
  d=$(mktemp -d)
  DDPTOP_DATA_DIR=$d DDPTOP_CONFIG=$d/config.toml XDG_RUNTIME_DIR=$d DDPTOP_PYTHON=$DDPTOP_PYTHON $B attach --k 2 --backend gloo --json -- workers/scripts/shapes/$name.py --steps 40 --hidden 1024 --batch 64 "${extra[@]}" > $d/out.json 2>$d/err
  cp $d/out.json $RAW/$name-$i.json
  python3 -c "import json;print(json.load(open('$d/out.json'))['runs'][0]['output_log'])" | xargs cat > $RAW/$name-$i.output.log
  rid=$(python3 -c "import json;print(json.load(open('$d/out.json'))['runs'][0]['run_id'])")
  DDPTOP_DATA_DIR=$d DDPTOP_CONFIG=$d/config.toml XDG_RUNTIME_DIR=$d $B show "$rid" > $RAW/$name-$i.show.txt 2>&1
  echo "$name $i $(python3 $RAW/cmp.py $d) load $(cut -d' ' -f1 /proc/loadavg)" | tee -a $RAW/summary_frameworks.txt
  rm -rf $d
done; done
