#!/usr/bin/env bash
# Issue 49: ZeRO-1 on one GPU (NCCL, k=1): each rank's state against 8P + 8·P_owned (at k=1 the
# rank owns every parameter: 16P with Adam, = the paper's 4P + 12P), DDP beside it, and the CUDA
# peak; `ddptop run zero1` (the zero1 family) and fsdp's two strategies. Run from the repo root with the release binary in .carry/ (or target/release). ~1 minute.
set -u
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-zero1}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/zero1"
B=${DDPTOP_BIN:-./.carry/ddptop}; [ -x "$B" ] || B=target/release/ddptop
# `ddptop run zero1` (the family of its own, issue 49's proof) first, then fsdp's ZeRO-1 and DDP
# strategies: the same trainer, so the three states should agree where they should.
timeout -k 5 200 "$B" run zero1 --k 1 --backend nccl --samples 20480 --json \
  > "$OUT/zero1/h200_family_k1.json" 2> "$OUT/zero1/h200_family_k1.stderr"
echo "family rc=$?"
for s in zero1 ddp; do
  timeout -k 5 200 "$B" run fsdp --k 1 --strategy "$s" --backend nccl --samples 20480 --json \
    > "$OUT/zero1/h200_${s}_k1.json" 2> "$OUT/zero1/h200_${s}_k1.stderr"
  echo "$s rc=$?"
done
$DDPTOP_PYTHON - "$OUT/zero1" <<'PY'
import json, sys
P = 11_175_818
for s in ("family", "zero1", "ddp"):
    try:
        r = json.load(open(f"{sys.argv[1]}/h200_{s}_k1.json"))["runs"][0]
    except Exception as e:  # noqa: BLE001
        print(f"{s}: no run document ({e})"); continue
    m = [x for x in r.get("memory") or [] if x["rank"] == 0][-1:]
    if not m:
        print(f"{s}: {r['status']}, no memory report"); continue
    m = m[0]
    st, pr = m["state_bytes"], m["predicted_bytes"]
    print(f"{s} k=1 {r['status']}: state {st} predicted {pr} ({100 * (st - pr) / pr:+.4f}%), "
          f"16P {16 * P} ({100 * (st - 16 * P) / (16 * P):+.4f}%), peak {m['peak_bytes']}, "
          f"{r['samples_per_s']} samples/s")
PY
