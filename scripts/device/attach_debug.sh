#!/usr/bin/env bash
# Why an `ddptop attach --k 1` of examples/train_ddp.py ended with exit 1: rerun it and print the
# tails of ddptop's stderr and the run's output.log.
set -u
export NCCL_NVLS_ENABLE=0 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3} DDPTOP_DATA_DIR=/tmp/ddptop-attach-debug
B=./.carry/ddptop; [ -x "$B" ] || B=target/release/ddptop
timeout 90 "$B" attach --k 1 --backend nccl --json -- examples/train_ddp.py --epochs 2 --samples 65536 \
  --batch-size 256 --hidden 8192 --workers 4 > /tmp/attach.json 2> /tmp/attach.stderr
echo "rc=$?"; tail -5 /tmp/attach.stderr
python3 -c 'import json; r=json.load(open("/tmp/attach.json"))["runs"][0]; print(r["status"], r.get("samples_per_s"), (r.get("reason") or "")[:600])' 2>&1
for f in "$DDPTOP_DATA_DIR"/runs/*/output.log; do echo "--- $f"; grep -v "^\s*$" "$f" | tail -25 | cut -c1-220; done
