"""The benchmarks behind ``batchfuzz bench``, one package:

- :mod:`~batchfuzz.bench.microbench`: the drop-in exact microbatching check
  against the check the engine ships (the default);
- :mod:`~batchfuzz.bench.variants`: the wider comparison of every exact
  implementation and both forms of the shipped check (``--variants``);
- :mod:`~batchfuzz.bench.loopbench`: the fuzz loop's speed and the cost of
  isolation (``--loop``).

None imports a command; :func:`run` picks one from the parsed options.
"""

from __future__ import annotations

from typing import Any


def run(args: Any) -> bool:
    """Run the bench the options of ``batchfuzz bench`` name; True when its checks disagreed (or a loop's target failed)."""
    if args.loop:
        from batchfuzz.bench import loopbench

        return loopbench.run_command(args)
    if args.engine_steps:
        from batchfuzz.bench import enginebench

        return bool(enginebench.run_command(args))
    if args.variants:
        from batchfuzz.bench import variants

        return variants.run(args)
    from batchfuzz.bench import microbench

    return microbench.run_command(args)
