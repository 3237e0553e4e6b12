#!/bin/bash
# runs each shape R times under ddptop attach --k 2 --backend gloo, as tests/attach_shapes.rs does
cd /work/main; . scripts/test_env.sh >/dev/null
RAW=docs/results/raw/2026-12-04-attach-shapes
R=${R:-3}
for i in $(seq $R); do
for entry in "accum|" "accum_fp16_hook|" "compiled_ddp|--compile-backend aot_eager --odd-step 20" "ddp_compiled|--compile-backend aot_eager" "static_graph|" "find_unused|"; do
  name=${entry%%|*}; read -r -a extra <<< "${entry#*|}"
  d=$(mktemp -d)
  DDPTOP_DATA_DIR=$d DDPTOP_CONFIG=$d/config.toml XDG_RUNTIME_DIR=$d DDPTOP_PYTHON=$DDPTOP_PYTHON target/debug/ddptop attach --k 2 --backend gloo --json -- workers/scripts/shapes/$name.py --steps 40 --hidden 1024 --batch 64 "${extra[@]}" > $d/out.json 2>$d/err
  cp $d/out.json $RAW/$name-$i.json
  python3 -c "import json;print(json.load(open('$d/out.json'))['runs'][0]['output_log'])" | xargs cat > $RAW/$name-$i.output.log
  echo "$name $i $(python3 docs/results/raw/2026-12-04-attach-shapes/cmp.py $d)" | tee -a $RAW/summary.txt
  rm -rf $d
done; done
