cd /work/main
source scripts/test_env.sh
export LD_LIBRARY_PATH="$TORCH_LIB" CI=1 RUSTC_BOOTSTRAP=1 PATH="$build_path"
for b in "$@"; do
  bin=$(ls -t /work/target-ci/debug/deps/${b}-* | grep -v '\.d$' | head -1)
  echo "== $b $bin"
  /usr/bin/time -f "$b total: %e s wall %U user %S sys" $bin --test-threads=1 -Z unstable-options --report-time 2>&1 | grep -E "^test |total:|test result"
done
