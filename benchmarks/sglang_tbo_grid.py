"""Every property of contract J (``tbo_split``) on every case of a small grid,
for each cached SGLang release: how many cases fail each property and the
smallest that does (docs/sglang.md, "Beyond the first failure").

The grid: every threshold of ``strategies.tbo_split.THRESHOLDS``; idle; decode
and target-verify (1, 2 or 3 tokens per request) with 1 to 4 requests; extend
with 1 to 4 requests of 1 to 5 tokens each (3985 cases, all in the engine
domain). Run: ``.venv/bin/python benchmarks/sglang_tbo_grid.py`` (the wheels
in ``$BATCHFUZZ_CACHE/wheels``, as ``batchfuzz engine sglang --all-releases``
leaves them).
"""

from __future__ import annotations

import itertools

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation
from batchfuzz.engines import cache_dir, sglang
from batchfuzz.strategies.tbo_split import THRESHOLDS, case_of


def grid() -> list[Case]:
    cases = [case_of("idle", [], t) for t in THRESHOLDS]
    for t in THRESHOLDS:
        for r in range(1, 5):
            cases += [case_of("decode", [1] * r, t)] + [case_of("target_verify", [k] * r, t) for k in (1, 2, 3)]
            cases += [case_of("extend", list(lens), t) for lens in itertools.product(range(1, 6), repeat=r)]
    return cases


def main() -> None:
    contract = registry.get("tbo_split")
    cases = grid()
    print(f"{len(cases)} cases")
    for version in sglang.RELEASES:
        wheels = sorted((cache_dir() / "wheels").glob(f"sglang-{version}-*.whl"))
        if not wheels:
            print(f"sglang {version}: no wheel in the cache")
            continue
        bound = next(b for b in sglang.bindings(sglang.ReleaseSource.from_wheel(wheels[0])) if b.status == "bound")
        for prop in contract.properties:
            failing = []
            for case in cases:
                try:
                    prop.check(bound.target, case)
                except PropertyViolation:
                    failing.append(case)
            smallest = min(failing, key=contract.size) if failing else None
            shown = "" if smallest is None else (f"  smallest {smallest.args['forward_mode']} {smallest.args['seq_lens'].tolist()} "
                                                 f"threshold {smallest.args['threshold']}")
            print(f"sglang {version}  {prop.name:26} {len(failing):5} failing{shown}")


if __name__ == "__main__":
    main()
