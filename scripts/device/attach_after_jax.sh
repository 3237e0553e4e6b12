#!/usr/bin/env bash
# Reproduce one_gpu.sh's order (a jax run, then attach at once) and print why attach ends, if it
# fails: ddptop's stderr and the run's output.log tail.
set -u
export NCCL_NVLS_ENABLE=0 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3} DDPTOP_DATA_DIR=/tmp/ddptop-attach-jax
B=./.carry/ddptop; [ -x "$B" ] || B=target/release/ddptop
timeout 120 "$B" run jax --k 1 --backend nccl --samples 30000 > /tmp/jax.txt 2>&1; echo "jax rc=$?"
for i in 1 2; do
  timeout 90 "$B" attach --k 1 --backend nccl --json -- examples/train_ddp.py --epochs 2 --samples 65536 \
    --batch-size 256 --hidden 8192 --workers 4 > /tmp/attach$i.json 2> /tmp/attach$i.stderr
  echo "attach $i rc=$?"; grep -v '^\s*$' /tmp/attach$i.stderr | tail -3 | cut -c1-300
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["runs"][0]; print(r["status"], r.get("samples_per_s"), (r.get("reason") or "")[:700])' /tmp/attach$i.json 2>&1 | tail -2
done
for f in "$DDPTOP_DATA_DIR"/runs/*/output.log; do echo "--- $f"; grep -v "^\s*$" "$f" | grep -iv "warning" | tail -12 | cut -c1-250; done
