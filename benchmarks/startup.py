"""How fast batchfuzz answers what a new user types first (docs/bench.md,
"A light start"): ``batchfuzz --help``, ``batchfuzz list``, a mistyped
contract name (``check split_dumy_tokens mymod:f``), each a fresh process,
beside the floor under them: a Python that imports numpy and Hypothesis
(the registry's strategies need both) and one that imports torch (what
``list`` paid before it stopped importing it).

Each command runs ``--repeat`` times, interleaved (one of each per round, so
a busy machine slows them alike); the table gives the median and the
fastest, in seconds, and each median as a ratio to the numpy+Hypothesis floor.
Not a test: a measurement, for docs/bench.md.

    python benchmarks/startup.py [--repeat 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "batchfuzz --help": ["-m", "batchfuzz", "--help"],
    "batchfuzz list": ["-m", "batchfuzz", "list"],
    "batchfuzz check split_dumy_tokens mymod:f": ["-m", "batchfuzz", "check", "split_dumy_tokens", "mymod:f"],
    "floor: import numpy, hypothesis": ["-c", "import numpy, hypothesis"],
    "import torch": ["-c", "import torch"],
}
FLOOR = "floor: import numpy, hypothesis"


def _time(argv: list[str], cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *argv], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   timeout=300)
    return time.perf_counter() - start


def measure(repeat: int) -> dict[str, list[float]]:
    """Seconds of each command, ``repeat`` fresh processes each, interleaved, from an empty directory."""
    cwd = tempfile.mkdtemp(prefix="batchfuzz-startup-")
    try:
        for argv in COMMANDS.values():  # one unmeasured round: the OS's file cache warm for every command alike
            _time(argv, cwd)
        times: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(repeat):
            for name, argv in COMMANDS.items():
                times[name].append(_time(argv, cwd))
        return times
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def table(times: dict[str, list[float]]) -> str:
    floor = statistics.median(times[FLOOR])
    lines = [f"{'command':45} {'median s':>9} {'fastest s':>9} {'x floor':>8}"]
    for name, ts in times.items():
        med = statistics.median(ts)
        lines.append(f"{name:45} {med:9.2f} {min(ts):9.2f} {med / floor:8.2f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7, help="fresh processes per command (default 7)")
    parser.add_argument("--json", metavar="PATH", help="also write the seconds as JSON")
    args = parser.parse_args()
    times = measure(args.repeat)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}, "
          f"{args.repeat} runs each")
    print(table(times))
    if args.json:
        Path(args.json).write_text(json.dumps(times, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
