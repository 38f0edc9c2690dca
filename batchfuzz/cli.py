"""The ``batchfuzz`` command. Subcommands are modules in ``batchfuzz/commands``:
each defines ``register(subparsers)`` that adds its parser with ``func=run``."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import pkgutil
import sys
import time

from batchfuzz import __version__


class UsageError(Exception):
    """Bad command-line usage (exit code 2)."""


# The durations a budget or a timeout may be: from 10 ms (less cannot run one
# example) to 30 days (more is a typo, and would overflow the clocks it is added to).
MIN_DURATION_S = 0.01
MAX_DURATION_S = 30 * 24 * 3600.0


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``0.5`` -> seconds: a finite positive
    duration within [``MIN_DURATION_S``, ``MAX_DURATION_S``]. Raises argparse
    errors naming the value (``nan``, ``inf`` and friends are not durations)."""
    t = str(text).strip().lower()
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a duration like 90, 90s, 15m or 2h, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite positive duration, got {text!r}")
    if value < MIN_DURATION_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_DURATION_S:g}s, got {text!r}")
    if value > MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_DURATION_S / 86400:g} days ({MAX_DURATION_S:g}s), got {text!r}")
    return value


def writable_file(path: str, what: str) -> None:
    """A usage error now, not after the budget is spent, for an output file
    that cannot be written (its folder missing or read-only, or a folder)."""
    p = os.path.abspath(path)
    if os.path.isdir(p):
        raise UsageError(f"{what} {path}: is a directory")
    folder = os.path.dirname(p)
    if not os.path.isdir(folder):
        raise UsageError(f"{what} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(p) and not os.access(p, os.W_OK)):
        raise UsageError(f"{what} {path}: not writable")


def writable_dir(path: str, what: str) -> None:
    """Like :func:`writable_file`, for an output folder (created if missing)."""
    p = os.path.abspath(path)
    if os.path.exists(p) and not os.path.isdir(p):
        raise UsageError(f"{what} {path}: exists and is not a directory")
    try:
        os.makedirs(p, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot be created ({exc.strerror or exc})") from None
    if not os.access(p, os.W_OK):
        raise UsageError(f"{what} {path}: not writable")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchfuzz", description="Property-based verification of LLM-serving batch layouts.")
    parser.add_argument("--version", action="version", version=f"batchfuzz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import batchfuzz.commands as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}").register(sub)
    return parser


# Commands that run code under test in worker processes: the fork server they
# come from starts before the commands are imported, so that its imports and
# ours overlap.
_RUNS_WORKERS = frozenset({"check", "fuzz", "replay", "catalogue", "sweep"})


# SIGINT/SIGTERM that arrived while the commands were being imported, for a
# command that owns signals from its first line (``fuzz``: a partial report).
PENDING_SIGNALS: list[int] = []
_OWNS_SIGNALS = frozenset({"fuzz"})


def main(argv: list[str] | None = None) -> int:
    started = time.time()  # budgets count from here, before the (slow) imports of the commands
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in _OWNS_SIGNALS and argv is None:
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: PENDING_SIGNALS.append(signum))
    if words and words[0] in _RUNS_WORKERS and "--help" not in words and "-h" not in words:
        from batchfuzz.execution import start_fork_server

        start_fork_server()
    parser = build_parser()
    args = parser.parse_args(argv)
    args.started = started
    args.imported = time.time()  # the commands' imports are done: what came before is start-up, not budget
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"batchfuzz: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
