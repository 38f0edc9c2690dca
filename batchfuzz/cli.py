"""The ``batchfuzz`` command. Subcommands are modules in ``batchfuzz/commands``:
each defines ``register(subparsers)`` that adds its parser with ``func=run``."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from batchfuzz import __version__


class UsageError(Exception):
    """Bad command-line usage (exit code 2)."""


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h`` -> seconds. Raises argparse errors naming the value."""
    t = str(text).strip().lower()
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"budget must be a duration like 90, 90s, 15m or 2h, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"budget must be positive, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchfuzz", description="Property-based verification of LLM-serving batch layouts.")
    parser.add_argument("--version", action="version", version=f"batchfuzz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import batchfuzz.commands as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
