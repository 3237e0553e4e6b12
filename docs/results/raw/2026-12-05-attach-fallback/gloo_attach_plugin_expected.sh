#!/usr/bin/env bash
# A real attach over gloo (k=2, examples/train_ddp.py) where each rank expects ddptop's NCCL
# profiler plugin (DDPTOP_NCCL_PLUGIN=1, NCCL_PROFILER_PLUGIN=<the built .so>, inherited from
# ddptop's environment: ddptop sets neither on gloo) and NCCL never loads it (gloo: no NCCL
# communicator). Writes attach.json, show.txt, show.json into $1.
set -u
out=$1; D=$(mktemp -d)
bin=target/debug/ddptop
DDPTOP_NCCL_PLUGIN=1 NCCL_PROFILER_PLUGIN=$PWD/target/debug/libnccl_profiler_ddptop.so \
  DDPTOP_DATA_DIR=$D XDG_RUNTIME_DIR=$D "$bin" attach --k 2 --backend gloo --json -- \
  examples/train_ddp.py --samples 1024 > "$out/attach.json" 2> "$out/attach.stderr"
id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["run_id"])' "$out/attach.json")
DDPTOP_DATA_DIR=$D "$bin" show "$id" > "$out/show.txt"
DDPTOP_DATA_DIR=$D "$bin" show "$id" --json > "$out/show.json"
