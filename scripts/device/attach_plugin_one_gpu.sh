#!/usr/bin/env bash
# Issue 25 on ONE GPU: attach on NCCL with ddptop's profiler plugin no longer installs ddptop's
# comm hook (the script's own DDP all-reduce runs), and with --no-nccl-profiler it does. At k=1
# NCCL fires no collective, so no bucket timeline comes from either; what is checked is the real
# NCCL path of the bootstrap: the run completes, the instrument and comm_timing recorded, what
# `show` says, and the throughput of both arms (interleaved, REPEATS each).
# Needs .carry/ddptop and .carry/libnccl_profiler_ddptop.so. Output: $OUT/attach_plugin/.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
export DDPTOP_DATA_DIR=${DDPTOP_DATA_DIR:-/tmp/ddptop-attach-plugin}
OUT=${OUT:-/tmp/out}/attach_plugin; mkdir -p "$OUT"
B=${DDPTOP_BIN:-.carry/ddptop}
REPEATS=${REPEATS:-2}
EX=(examples/train_ddp.py --samples 40000 --epochs 2)
for i in $(seq "$REPEATS"); do
  for arm in plugin hook; do
    flag=(); [ "$arm" = hook ] && flag=(--no-nccl-profiler)
    timeout -k 5 300 "$B" "${flag[@]}" attach --k 1 --backend nccl --json -- "${EX[@]}" \
      > "$OUT/$arm-$i.json" 2> "$OUT/$arm-$i.stderr"
    echo "$arm-$i rc=$?" >> "$OUT/rc.txt"
    id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["run_id"])' "$OUT/$arm-$i.json" 2>/dev/null)
    [ -n "$id" ] && "$B" show "$id" > "$OUT/$arm-$i.show.txt" 2>&1
  done
done
python3 - "$OUT" "$REPEATS" <<'PY' | tee "$OUT/summary.txt"
import json, sys, pathlib
out, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])
print(f"{'arm':<10} {'status':<10} {'samples/s':>10} {'instrument':<12} {'comm_timing':<14} show says")
for i in range(1, n + 1):
    for arm in ("plugin", "hook"):
        try:
            r = json.load(open(out / f"{arm}-{i}.json"))["runs"][0]
        except Exception as e:
            print(f"{arm}-{i:<8} unreadable: {e}"); continue
        c = r.get("collectives") or {}
        show = (out / f"{arm}-{i}.show.txt").read_text() if (out / f"{arm}-{i}.show.txt").exists() else ""
        said = next((l.strip() for l in show.splitlines() if "measured" in l), "")
        sps = r.get("samples_per_s")
        print(f"{arm}-{i:<8} {r['status']:<10} {sps if sps is None else round(sps):>10} "
              f"{str(r.get('instrument')):<12} {str(c.get('comm_timing')):<14} {said[:90]}")
PY
