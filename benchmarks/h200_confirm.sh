#!/usr/bin/env bash
# The confirm run recorded in docs/gpu-results.md (run 4): every catalogue
# variant that reaches attention replayed through vLLM's own Triton kernels,
# twice for 0.33.0 (the verdicts must repeat), once for 0.28.0, the decode
# kernel, then the GPU tests. The kernel folders are carried, not downloaded:
#   batchfuzz confirm --extract --release 0.33.0 --kernels .kernels/vllm-0.33.0
#   batchfuzz confirm --extract --release 0.28.0 --kernels .kernels/vllm-0.28.0
# Usage: OUT=dir bash benchmarks/h200_confirm.sh   (the device tool sets OUT)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 BATCHFUZZ_CACHE=/tmp/bfcache
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || exit 2
r=$OUT
step() {
  local name=$1; shift
  local t=$(date +%s%N)
  "$@" > "$r/$name.txt" 2>&1
  local rc=$?
  printf '%-22s rc=%-3s %7d ms  %s\n' "$name" "$rc" $(( ($(date +%s%N) - t) / 1000000 )) "$*" | tee -a "$r/steps.txt"
}
k33=.kernels/vllm-0.33.0 k28=.kernels/vllm-0.28.0
step confirm-0.33.0 timeout 300 python3 -m batchfuzz confirm --kernels $k33 --all-variants --json "$r/confirm-0.33.0.json"
step confirm-0.33.0-rerun timeout 300 python3 -m batchfuzz confirm --kernels $k33 --all-variants --json "$r/confirm-0.33.0-rerun.json"
step confirm-0.28.0 timeout 300 python3 -m batchfuzz confirm --kernels $k28 --all-variants --json "$r/confirm-0.28.0.json"
step confirm-decode timeout 300 python3 -m batchfuzz confirm --kernels $k33 --kernel decode --all-variants --json "$r/confirm-decode-0.33.0.json"
step gpu-tests timeout 300 python3 -m pytest -n 8 --device cuda -q -rs -p no:cacheprovider
python3 - "$r" <<'PY'
import json, sys
a = json.load(open(f"{sys.argv[1]}/confirm-0.33.0.json"))["verdicts"]
b = json.load(open(f"{sys.argv[1]}/confirm-0.33.0-rerun.json"))["verdicts"]
same = [(x["target"], x["consequence"], x["control_clean"]) for x in a] == [(x["target"], x["consequence"], x["control_clean"]) for x in b]
print("rerun gives the same verdicts:", same, f"({len(a)} cases)")
PY
cat "$r/steps.txt"; tail -3 "$r/gpu-tests.txt"
