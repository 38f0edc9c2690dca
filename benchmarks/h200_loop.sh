#!/usr/bin/env bash
# The CUDA fuzz-loop run recorded in docs/gpu-results.md (run 5): the GPU tests
# of the staged and captured contract-E implementations, a profile of one
# CUDA item's in-process loop, then `bench --loop --devices cuda` over every
# CUDA implementation (the work items of `fuzz --device cuda`).
# Usage: OUT=dir [STEPS="tests profile loop"] bash benchmarks/h200_loop.sh [EXAMPLES [REPEAT]]
# (the device tool sets OUT; STEPS picks the steps, all three by default)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 BATCHFUZZ_CACHE=/tmp/bfcache
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || exit 2
examples=${1:-100} repeat=${2:-1} steps=${STEPS:-tests profile loop}
r=$OUT
step() {
  local name=$1; shift
  local t=$(date +%s%N)
  "$@" > "$r/$name.txt" 2>&1
  local rc=$?
  printf '%-14s rc=%-3s %7d ms  %s\n' "$name" "$rc" $(( ($(date +%s%N) - t) / 1000000 )) "$*" | tee -a "$r/steps.txt"
}
nvidia-smi -L > "$r/device.txt" 2>&1
want() { [[ " $steps " == *" $1 "* ]]; }
want tests && step gpu-tests timeout 200 python3 -m pytest --device cuda -q -rs -p no:cacheprovider -p no:xdist \
  tests/test_gpu_captured.py tests/test_contracts.py -k "cudagraph or captured or (torch-cuda and (allow_microbatching or find_conflicts))"
want profile && step profile timeout 120 python3 - <<'PY'
import cProfile, pstats
from batchfuzz import registry, runner, profiles
from batchfuzz.execution import InProcess
from batchfuzz.targets import parse
from hypothesis import settings
profiles.register_profiles()
rs = settings(settings.get_profile("dev"), database=None, max_examples=200)
for name, ref in (("allow_microbatching", "impl:torch@cuda"), ("allow_microbatching", "impl:torch.cudagraph@cuda"),
                  ("find_conflicts", "impl:torch@cuda")):
    c = registry.get(name)
    ex = InProcess(c, parse(ref).load(c), ref)
    runner.hunt(c, ex, c.properties[1], target_name=ref, run_settings=rs, seed=1, domain="spec", reduce=False, labels=True)
    prof = cProfile.Profile()
    prof.enable()
    res = runner.hunt(c, ex, c.properties[1], target_name=ref, run_settings=rs, seed=2, domain="spec", reduce=False, labels=True)
    prof.disable()
    print(f"== {name} {ref}: {res.examples} examples in {res.seconds:.2f}s = {res.examples / res.seconds:.0f}/s")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
PY
want loop && step loop timeout 560 python3 -m batchfuzz bench --loop --devices cuda --loop-examples "$examples" --repeat "$repeat" \
  --json "$r/loop-cuda.json" --markdown "$r/loop-cuda.md"
want loop && tail -n 40 "$r/loop.txt"
