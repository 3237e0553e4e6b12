#!/usr/bin/env bash
# Fresh build of what scripts/test builds, timed per phase. $1 = target dir.
set -euo pipefail
cd "$2"
export CARGO_TARGET_DIR=$1 LIBTORCH_USE_PYTORCH=1
P="$PWD/.venv/bin:$PATH"
t0=$(date +%s)
PATH="$P" cargo clippy --workspace --all-targets -q -- -D warnings
t1=$(date +%s)
PATH="$P" cargo build -q -p ddptop-nccl-profiler
PATH="$P" cargo test --workspace --all-targets --no-run -q 2>/dev/null
t2=$(date +%s)
echo "clippy $((t1-t0)) s, test build $((t2-t1)) s, total $((t2-t0)) s, target $(du -sh $1 | cut -f1)"
