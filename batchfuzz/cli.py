"""The ``batchfuzz`` command. Subcommands are modules in ``batchfuzz/commands``:
each defines ``register(subparsers)`` that adds its parser with ``func=run``
(the shape ``batchfuzz.plugins.CommandModule``, checked as each registers).
Whether a command starts the worker pool early or owns SIGINT/SIGTERM is its
module's declaration (``batchfuzz.plugins.CommandTraits``)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
import sys
import time

from batchfuzz import __version__, plugins
from batchfuzz.redaction import printable_argv

# Re-exported for command modules written against the old home (batchfuzz.usage is the home).
from batchfuzz.usage import PENDING_SIGNALS, ExitCode, UsageError, parse_duration, writable_dir, writable_file  # noqa: F401


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchfuzz", description="Property-based verification of LLM-serving batch layouts.")
    parser.add_argument("--version", action="version", version=f"batchfuzz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    import batchfuzz.commands as pkg

    for mod in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if not mod.name.startswith("_"):
            plugins.register_command(importlib.import_module(f"{pkg.__name__}.{mod.name}"), sub)
    return parser


def declared_traits(command: str | None) -> plugins.CommandTraits:
    """What the command module of this name declares (``batchfuzz.plugins.CommandTraits``):
    none for a word that names no command. Imports that one module only, so
    that a command owning signals owns them before the others are imported."""
    import batchfuzz.commands as pkg

    name = plugins.command_module_name(command or "")
    if not name.isidentifier() or name.startswith("_") or importlib.util.find_spec(f"{pkg.__name__}.{name}") is None:
        return plugins.CommandTraits()
    return plugins.command_traits(importlib.import_module(f"{pkg.__name__}.{name}"))


def main(argv: list[str] | None = None) -> int:
    started = time.time()  # budgets count from here, before the (slow) imports of the commands
    words = sys.argv[1:] if argv is None else argv
    owns_signals = argv is None and declared_traits(words[0] if words else None).owns_signals
    if owns_signals:
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: PENDING_SIGNALS.append(signum))
    parser = build_parser()
    args = parser.parse_args(argv)
    if argv is None:  # what Hypothesis's records and every child process keep of the command line: no password
        sys.argv[:] = printable_argv(sys.argv)
    args.started = started
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.USAGE
    if declared_traits(args.command).runs_workers:
        from batchfuzz.execution import start_fork_server

        start_fork_server()
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"batchfuzz: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    finally:
        if owns_signals:
            _ignore_signals_until_exit()


def _ignore_signals_until_exit() -> None:
    """The command has written its reports and chosen its exit code: a signal
    from now on must not change it. Python puts a handler of its own back to
    the default as the interpreter finalizes (a SIGTERM then would end the
    process with 143 beside a complete report); an ignored signal stays ignored."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
