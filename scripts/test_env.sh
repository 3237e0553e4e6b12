# Sourced by scripts/test and scripts/test-cpu (from the repository root): the venv the tests
# need (created on first use) and the environment they run in.
VENV=${DDPTOP_VENV:-.venv}
if ! "$VENV/bin/python" -c "import torch, pytest, numpy" 2>/dev/null; then
  echo "scripts/test: installing torch==2.11.0, torchvision==0.26.0, pytest, numpy into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check torch==2.11.0 torchvision==0.26.0 pytest numpy
fi
# `--data-path loader` is the book's torchvision pipeline (issue 48): torchvision 0.26.0 is the
# release that pairs with torch 2.11.0 (a venv made before it lacks it: added once, 8 MB).
if ! "$VENV/bin/python" -c "import torchvision" 2>/dev/null; then
  echo "scripts/test: installing torchvision==0.26.0 into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check torchvision==0.26.0
fi
# The optional dependencies, which no build step needs: in the background where the caller asks
# (scripts/test sets DDPTOP_EXTRAS_BACKGROUND=1 and waits with `extras_wait` before the tests:
# their ~1 min of download and unpacking overlaps clippy's CPU-bound minutes), else now.
install_extras() {
  # Test dependencies of tests/attach_shapes.rs only (issue 43: a Lightning
  # `Trainer(strategy="ddp")` script and an Accelerate loop under `ddptop attach`), not of the
  # tool. torch stays 2.11.0: the constraint keeps pip from replacing it with a newer release
  # their requirements would allow.
  if ! "$VENV/bin/python" -c "import lightning, accelerate" 2>/dev/null; then
    echo "scripts/test: installing lightning==2.6.6, accelerate==1.16.0 into $VENV (torch kept at 2.11.0)"
    "$VENV/bin/pip" install -q --disable-pip-version-check --constraint <(echo "torch==2.11.0") \
      lightning==2.6.6 accelerate==1.16.0 || return 1
  fi
  # The jax worker's optional dependencies (CPU wheels, about 750 MB); its tests and `ddptop run
  # jax` on the CPU use 4 fake XLA host devices.
  if ! "$VENV/bin/python" -c "import jax, flax, optax" 2>/dev/null; then
    echo "scripts/test: installing jax[cpu]==0.10.2, flax==0.12.8, optax==0.2.8 into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "jax[cpu]==0.10.2" flax==0.12.8 optax==0.2.8 || return 1
  fi
}
extras_log=""
if [[ ${DDPTOP_EXTRAS_BACKGROUND:-} == 1 ]]; then
  extras_log=$(mktemp)
  # Its exit status goes to a file, so that a subshell (scripts/test's pytest, started beside
  # the builds) can wait for it too: `wait` only knows the shell's own children.
  { install_extras >"$extras_log" 2>&1; echo $? >"$extras_log.rc"; } &
else
  install_extras
fi
# Waits for a background install of the extras, prints what it said, and fails as it did.
extras_wait() {
  [[ -n $extras_log ]] || return 0
  while [[ ! -s $extras_log.rc ]]; do sleep 1; done
  local rc
  rc=$(cat "$extras_log.rc")
  cat "$extras_log"
  rm -f "$extras_log" "$extras_log.rc"
  extras_log=""
  if ((rc != 0)); then
    echo "scripts/test: installing lightning/accelerate/jax into $VENV failed (above): check the network or disk, then run again" >&2
    return 1
  fi
}
export XLA_FLAGS="${XLA_FLAGS:---xla_force_host_platform_device_count=4}"
export DDPTOP_PYTHON="$PWD/$VENV/bin/python"
# The tch worker (workers/handrolled, not a default member) builds against the venv's torch
# (LIBTORCH_USE_PYTORCH=1 asks the python3 on PATH) and runs with torch/lib on LD_LIBRARY_PATH.
export LIBTORCH_USE_PYTORCH=1
TORCH_LIB="$("$DDPTOP_PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib"
build_path="$PWD/$VENV/bin:$PATH"
