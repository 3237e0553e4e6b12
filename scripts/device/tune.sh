#!/usr/bin/env bash
# Issue 27 on two GPUs: `ddptop tune` at k=2 over NCCL (tuning needs k >= 2; one GPU cannot).
# The honest answer on 2xH200 over NVLink may be "the default is within spread"; report it.
# Needs .carry/ddptop (or target/release/ddptop). Raw JSON and stderr in $OUT/raw, table in
# $OUT/tune.log. BUDGET (default 15m) and REPEATS (default 3) as for `ddptop tune`. ATTACH=1 also
# tunes examples/train_ddp.py through `ddptop tune --attach` (the same budget again).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-data-tune}
export DDPTOP_CONFIG=${DDPTOP_CONFIG:-/tmp/ddptop-tune-config.toml}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/raw"
B=${DDPTOP_BIN:-.carry/ddptop}; [ -x "$B" ] || B=target/release/ddptop
BUDGET=${BUDGET:-15m}; REPEATS=${REPEATS:-3}
echo "== $(date -u +%T) ddptop tune --k 2 --backend nccl --budget $BUDGET --repeats $REPEATS" | tee "$OUT/tune.log"
timeout -k 10 3600 "$B" tune --k 2 --backend nccl --budget "$BUDGET" --repeats "$REPEATS" --json \
  > "$OUT/raw/tune-k2.json" 2> "$OUT/raw/tune-k2.stderr"
echo "rc=$?" | tee -a "$OUT/tune.log"
python3 - "$OUT/raw/tune-k2.json" <<'PY' 2>&1 | tee -a "$OUT/tune.log"
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{'candidate':<44} {'predicted':>10} {'median':>10} {'min':>10} {'max':>10}")
for c in d["candidates"]:
    m = c["measured"] or {}
    f = lambda x: f"{x:,.0f}" if isinstance(x, (int, float)) else "—"
    print(f"{c['name']:<44} {f(c['predicted_samples_per_s']):>10} {f(m.get('median')):>10} "
          f"{f(m.get('min')):>10} {f(m.get('max')):>10}")
print("verdict:", d["verdict"])
PY
[ -f "$DDPTOP_CONFIG" ] && grep -A6 "ddptop tune" "$DDPTOP_CONFIG" | tee -a "$OUT/tune.log"
# ATTACH=1: the same at k=2 over the unmodified tutorial script, through attach's bootstrap
# (bucket_cap_mb into its DDP constructor, NCCL knobs through its environment).
if [ "${ATTACH:-0}" = 1 ]; then
  echo "== $(date -u +%T) ddptop tune --attach --k 2 --backend nccl -- examples/train_ddp.py" | tee -a "$OUT/tune.log"
  timeout -k 10 3600 "$B" tune --attach --k 2 --backend nccl --budget "$BUDGET" --repeats "$REPEATS" \
    --json -- examples/train_ddp.py --samples 60000 --batch-size 256 \
    > "$OUT/raw/tune-attach-k2.json" 2> "$OUT/raw/tune-attach-k2.stderr"
  echo "rc=$?" | tee -a "$OUT/tune.log"
  python3 - "$OUT/raw/tune-attach-k2.json" <<'PY' 2>&1 | tee -a "$OUT/tune.log"
import json, sys
d = json.load(open(sys.argv[1]))
print("DDP settings tuned:", d["attach"]["ddp_settings_tuned"], d["attach"]["ddp_settings_note"] or "")
for c in d["candidates"]:
    m = c["measured"] or {}
    f = lambda x: f"{x:,.0f}" if isinstance(x, (int, float)) else "—"
    print(f"{c['name']:<44} {f(c['predicted_samples_per_s']):>10} {f(m.get('median')):>10} {c['state']}")
print("verdict:", d["verdict"])
PY
fi
