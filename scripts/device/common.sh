# Sourced by the device scripts (scripts/device/*.sh): what every run on the GPU machine needs.
#   . "$(dirname "$0")/common.sh"
# - NVLink multicast off (NVLS) for NCCL, torch's symmetric memory and NVSHMEM: the lent
#   machines must never use it, in this shell or in any child ddptop starts.
# - $DDPTOP_PYTHON (default python3: the machine's torch), unbuffered, $OUT (default /tmp/out).
# - ddptop_bin: target/release/ddptop if built, else .carry/ddptop (the stripped release build
#   carried from the 2-core VM; the GPU machine has no Rust).
# - need_torchvision: the machine's python has torch but not torchvision; the wheels in
#   .carry/wheels-tv/ (torchvision 0.26.0, pillow, numpy for cp312) are installed once into
#   /tmp/ddptop-tv-site and put at the end of sys.path by a .pth file (the python's own packages
#   win; torchvision 0.26.0 pairs with torch 2.11.0).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 DDPTOP_PYTHON=${DDPTOP_PYTHON:-python3}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"

ddptop_bin() {
  local b=${DDPTOP_BIN:-target/release/ddptop}
  [ -x "$b" ] || b=./.carry/ddptop
  echo "$b"
}

need_torchvision() {
  local py=$DDPTOP_PYTHON site=/tmp/ddptop-tv-site pth
  $py -c "import torchvision" 2>/dev/null && return 0
  ls .carry/wheels-tv/*.whl > /dev/null 2>&1 || { echo "no torchvision and no .carry/wheels-tv/*.whl" >&2; return 1; }
  $py -m pip install -q --no-index --no-deps --target "$site" .carry/wheels-tv/*.whl > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log" >&2; return 1; }
  # A .pth file appends $site to sys.path for every process of this python, ddptop's workers
  # included (ddptop sets their PYTHONPATH to its workers/ folder, so PYTHONPATH cannot carry it).
  pth=$($py -c "import site;print(site.getusersitepackages() if site.ENABLE_USER_SITE else site.getsitepackages()[0])")
  mkdir -p "$pth" && echo "$site" > "$pth/ddptop-tv.pth"
  $py -c "import torchvision, PIL, numpy; print('torchvision', torchvision.__version__, 'from', torchvision.__file__)" | tee -a "$OUT/pip.log"
}
