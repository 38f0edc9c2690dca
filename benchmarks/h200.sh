#!/usr/bin/env bash
# The GPU run recorded in docs/gpu-results.md: every GPU test, the sweep of
# contract A (the large and the production domain), the CUDA bench of contract
# E, a CUDA fuzz job, from a checkout (nothing installed, nothing downloaded).
# Usage: OUT=dir benchmarks/h200.sh   (the device tool sets OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 BATCHFUZZ_CACHE=/tmp/bfcache
# The checkout installed as the README says for a machine without network.
python3 -m pip install -q --no-deps --no-build-isolation -e . || exit 2
r=$OUT/r
mkdir -p "$r"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import sys, torch, numpy, hypothesis, pytest; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda); print('numpy', numpy.__version__, 'hypothesis', hypothesis.__version__, 'pytest', pytest.__version__)"
  nproc
} > "$r/env.txt" 2>&1
step() {
  local name=$1; shift
  local t=$(date +%s%N)
  "$@" > "$r/$name.log" 2>&1
  local rc=$?
  printf '%-12s rc=%-3s %7d ms  %s\n' "$name" "$rc" $(( ($(date +%s%N) - t) / 1000000 )) "$*" | tee -a "$r/steps.txt"
}
step sweep-large python3 -m batchfuzz sweep --device cuda --max-reqs 4096 --max-tokens 65536 --json "$r/sweep-large.json"
step sweep-prod python3 -m batchfuzz sweep --device cuda --json "$r/sweep-prod.json"
step variants timeout 120 python3 -m batchfuzz bench --variants --devices cuda --steps 1 --repeat 7 --json "$r/bench.json"
step drop-in timeout 240 python3 -m batchfuzz bench --devices cuda --repeat 15 --oracle-steps 1 --markdown "$r/drop-in.md" --json "$r/drop-in.json"
step fuzz timeout 120 python3 -m batchfuzz fuzz --device cuda --budget 60s --workers 4 --profile nightly --seed 7 --no-database --report "$r/fuzz"
step gpu-tests timeout 240 python3 -m pytest -n 8 --device cuda -q -rs -p no:cacheprovider --junitxml="$r/junit-gpu.xml"
cp "$r/fuzz/summary.md" "$r/fuzz-summary.md" 2>/dev/null
rm -rf "$r/fuzz"
tar -czf "$OUT/h200.tar.gz" -C "$OUT" r
cat "$r/steps.txt"
tail -5 "$r/gpu-tests.log"
