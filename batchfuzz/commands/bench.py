"""``batchfuzz bench``: cost of the microbatch-conflict checks on realistic steps
(:mod:`batchfuzz.bench.microbench`, the default; ``--variants``:
:mod:`batchfuzz.bench.variants`), or the speed of the fuzz loop (``--loop``:
:mod:`batchfuzz.bench.loopbench`).

``--engine-steps`` times steps from the installed vLLM's own scheduler
(:mod:`batchfuzz.bench.enginebench`).

Exit codes: 0 measured, every check agreed; 1 two checks disagreed (or a
target failed in ``--loop``); 2 a usage error.
"""

from __future__ import annotations

import argparse
from typing import Any

from batchfuzz.commands import _options
from batchfuzz.usage import ExitCode


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="time the exact conflict detector vs the shipped check vs the oracle",
                       description="Time contract E's checks on realistic steps from the prefix-caching scheduler model.")
    p.add_argument("--quick", action="store_true", help="small steps (16 requests, 64 columns), few repetitions: seconds")
    p.add_argument("--repeat", type=int, default=None, help="timed repetitions per step and variant (default 7; quick 3)")
    p.add_argument("--oracle-repeat", type=int, default=1, help="repetitions for the oracle (default 1)")
    p.add_argument("--steps", type=int, default=None, help="steps per scenario, from different seeds (default 2; quick 1)")
    p.add_argument("--num-reqs", type=int, default=None, help="max_num_seqs of the modelled engine (default 256; quick 16)")
    p.add_argument("--width", type=int, default=None,
                   help="block-table columns of group 0, i.e. max_model_len / B_0 (default 2048; quick 64)")
    p.add_argument("--scenarios", default="*",
                   help="comma-separated scenario names or globs, e.g. 'mixed/G1,decode-heavy/*' (default: all 9)")
    p.add_argument("--devices", default="auto",
                   help="torch devices, comma-separated: cpu, cuda, none, or auto (default: cuda when present; with "
                        "--quick also cpu). The torch version builds a dense (R, W*B) grid per group: at full size "
                        "on CPU it costs tens of seconds per step, so cpu is opt-in there (--variants). By default: devices for the "
                        "sync-free torch decision and conflict set, inputs resident (auto: cuda when present). With --loop: the "
                        "targets' devices, cpu (auto: the first CPU implementation) and/or cuda (every CUDA implementation, "
                        "the work items of fuzz --device cuda)")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op CPU threads (default 1, like numpy; 0 keeps torch's default)")
    p.add_argument("--slow", type=float, default=0.5,
                   help="a variant whose first call takes more seconds than this is timed on --slow-repeat repetitions")
    p.add_argument("--slow-repeat", type=int, default=3, help="repetitions for slow variants (default 3)")
    p.add_argument("--no-oracle", action="store_true", help="skip the oracle")
    _options.seed(p, default=0, help="seed of the first step of each scenario (default 0)")
    _options.json_output(p, help="write the measurements as JSON here")
    p.add_argument("--variants", action="store_true",
                   help="instead of the drop-in comparison (the default: batchfuzz.bench.microbench, docs/exact-microbatching.md): "
                        "every exact implementation through its canonical binder, validation included, beside both copies "
                        "of the shipped check and the oracle")
    p.add_argument("--oracle-steps", type=int, default=1,
                   help="steps per scenario checked against the oracle (default 1; 0 with --no-oracle)")
    p.add_argument("--markdown", dest="markdown_path", metavar="PATH", help="write the table as Markdown here (not with --variants)")
    p.add_argument("--vllm-wheel", metavar="FILE",
                   help="also time the release's own GPUModelRunner._allow_microbatching (vLLM >= 0.28), "
                        "cut out of this wheel through batchfuzz.engines.vllm, and check that our copy of the shipped "
                        "check decides as it does on every step (exit 1 otherwise)")
    _loop_arguments(p)  # --loop: the fuzz loop's speed and the cost of isolation
    from batchfuzz.bench import enginebench

    enginebench.add_arguments(p)  # --engine-steps: steps from vLLM's own scheduler
    p.set_defaults(func=run)


def _loop_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--loop`` options of ``batchfuzz bench`` (``--quick``, ``--repeat``,
    ``--seed``, ``--json`` and ``--markdown`` are bench's own)."""
    p.add_argument("--loop", action="store_true",
                   help="instead: examples per second of every property's fuzz loop (in-process, with labels, isolated) "
                        "against Hypothesis's ceiling for the same strategy (batchfuzz.bench.loopbench)")
    p.add_argument("--loop-contracts", default="", metavar="NAMES",
                   help="with --loop: comma-separated contracts (default: all)")
    p.add_argument("--loop-examples", type=int, default=None, metavar="N",
                   help="with --loop: examples per loop (default 100; quick 20)")
    p.add_argument("--loop-target", choices=("impl", "oracle"), default="impl",
                   help="with --loop: the contract's first CPU implementation (default) or its oracle")


def run(args: argparse.Namespace) -> int:
    from batchfuzz import bench

    return ExitCode.COUNTEREXAMPLE if bench.run(args) else ExitCode.OK
