#!/usr/bin/env bash
# The CUDA fuzz job against the CPU ceilings of its strategies, in one run on one
# machine (docs/gpu-results.md, runs 7, 9, 10 and 11; issue 23, item 5): every GPU test, then
# `bench --loop --devices cuda` over contract E's two contracts (the CPU ceiling
# of each strategy and the loops of every CUDA item), then the fuzz job itself
# (`fuzz --device cuda --workers 4`), then each item's examples per second of
# the time it ran against its contract's ceiling from the same run (items.md);
# the fuzz report folder comes back packed, fuzz-report.tar.gz.
# Usage: OUT=dir bash benchmarks/h200_fuzz_items.sh [BUDGET]   (the device tool sets OUT)
# CONTRACTS (comma-separated; default contract E's two, "all": every contract with a CUDA implementation)
# and STEPS (default "gpu-tests loop fuzz") choose the work; a run of the fuzz step without the loop step
# reads the ceilings from LOOP_JSON (another call's loop-cuda.json, on the same machine kind).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 BATCHFUZZ_CACHE=/tmp/bfcache
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || exit 2
budget=${1:-90s}
r=$OUT
contracts=${CONTRACTS:-allow_microbatching,find_conflicts}
steps=${STEPS:-gpu-tests loop fuzz}
loop_json=${LOOP_JSON:-$r/loop-cuda.json}
if [ "$contracts" = all ]; then loop_contracts=(); fuzz_contracts=(); else
  loop_contracts=(--loop-contracts "$contracts"); fuzz_contracts=(); IFS=, read -ra cs <<< "$contracts"
  for c in "${cs[@]}"; do fuzz_contracts+=(--contract "$c"); done; fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import sys, torch, numpy, hypothesis; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda); print('numpy', numpy.__version__, 'hypothesis', hypothesis.__version__)"
  nproc
} > "$r/env.txt" 2>&1
step() {
  local name=$1; shift
  local t=$(date +%s%N)
  "$@" > "$r/$name.txt" 2>&1
  local rc=$?
  printf '%-10s rc=%-3s %7d ms  %s\n' "$name" "$rc" $(( ($(date +%s%N) - t) / 1000000 )) "$*" | tee -a "$r/steps.txt"
}
case " $steps " in *" gpu-tests "*)
  step gpu-tests timeout 200 python3 -m pytest -n 8 --device cuda -q -rs -p no:cacheprovider -m gpu --junitxml="$r/junit-gpu.xml";; esac
case " $steps " in *" loop "*)
  step loop timeout 580 python3 -m batchfuzz bench --loop --devices cuda "${loop_contracts[@]}" \
    --loop-examples 100 --repeat 2 --json "$r/loop-cuda.json" --markdown "$r/loop-cuda.md";; esac
case " $steps " in *" fuzz "*) ;; *) exit 0;; esac
step fuzz timeout 400 python3 -m batchfuzz fuzz --device cuda --budget "$budget" --workers 4 "${fuzz_contracts[@]}" \
  --seed 7 --no-database --report "$r/fuzz"
python3 - "$r" "$loop_json" <<'PY' | tee "$r/items.md"
import json, sys
r = sys.argv[1]
ceilings = json.load(open(sys.argv[2]))["ceilings"]
summary = json.load(open(f"{r}/fuzz/summary.json"))
print("| contract | target | property | examples | seconds | per second | of the CPU ceiling |")
print("|---|---|---|---:|---:|---:|---:|")
for contract, c in summary["contracts"].items():
    for target, t in c["implementations"].items():
        for prop, p in t["properties"].items():
            rate = p["examples"] / p["seconds"] if p["seconds"] else 0.0
            print(f"| {contract} | `{target}` | {prop} | {p['examples']} | {p['seconds']:.1f} | {rate:.0f} | "
                  f"{rate / ceilings[contract]:.0%} |")
PY
tail -n 8 "$r/fuzz.txt"
# The fuzz report folder is many small files (one per item): one archive comes back from the machine whole.
tar -czf "$r/fuzz-report.tar.gz" -C "$r" fuzz && rm -rf "$r/fuzz"
