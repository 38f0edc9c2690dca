"""The options several commands share, each declared once here: its flag,
destination, type and metavar. A command passes the help text that says what
the option means for it (``--seed`` seeds a check, a fuzz job's slices, or a
bench's steps); the spelling and parsing cannot drift between commands.

Not a command (the underscore keeps ``cli.build_parser`` from loading it as one).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from batchfuzz.usage import parse_duration, positive_int, writable_file

TARGET_METAVAR = "CONTRACT=MODULE:FUNCTION"


def contract_target(text: str) -> tuple[str, str]:
    """``CONTRACT=MODULE:FUNCTION`` (or ``CONTRACT=FILE.py:FUNCTION``) -> (contract, spec)."""
    contract, sep, spec = text.partition("=")
    if not sep or not contract or not spec:
        raise argparse.ArgumentTypeError(f"--target must be CONTRACT=MODULE:FUNCTION or CONTRACT=FILE.py:FUNCTION, got {text!r}")
    return contract, spec


def json_output(p: argparse.ArgumentParser, help: str | None) -> None:
    """``--json PATH`` (``args.json_path``): where a command writes its report as JSON."""
    p.add_argument("--json", dest="json_path", metavar="PATH", help=help)


def no_isolation(p: argparse.ArgumentParser, help: str) -> None:
    """``--no-isolation``: run the code under test in this process, not in worker processes."""
    p.add_argument("--no-isolation", action="store_true", help=help)


def seed(p: argparse.ArgumentParser, help: str, default: int | None = None) -> None:
    """``--seed N``."""
    p.add_argument("--seed", type=int, default=default, help=help)


def budget(p: argparse.ArgumentParser, help: str, default: float | None) -> None:
    """``--budget DURATION`` (90, 90s, 15m, 2h) in seconds."""
    p.add_argument("--budget", type=parse_duration, default=default, help=help)


def timeout(p: argparse.ArgumentParser, help: str, default: float | None) -> None:
    """``--timeout SECONDS``: the per-example timeout."""
    p.add_argument("--timeout", type=parse_duration, default=default, metavar="SECONDS", help=help)


def device(p: argparse.ArgumentParser, help: str | None = None, default: str = "cpu") -> None:
    """``--device cpu|cuda`` (default cpu)."""
    p.add_argument("--device", choices=("cpu", "cuda"), default=default, help=help)


def markdown_output(p: argparse.ArgumentParser, help: str) -> None:
    """``--markdown PATH`` (``args.markdown``): where a command writes its table as Markdown."""
    p.add_argument("--markdown", metavar="PATH", help=help)


def max_examples(p: argparse.ArgumentParser, help: str, default: int | None) -> None:
    """``--max-examples N``, a positive integer (argparse's usage error names the value)."""
    p.add_argument("--max-examples", type=positive_int, default=default, metavar="N", help=help)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the system has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def jobs(p: argparse.ArgumentParser, help: str) -> None:
    """``--jobs N``, a positive integer: how many units of work run side by side (default: :func:`usable_cpus`)."""
    p.add_argument("--jobs", type=positive_int, default=usable_cpus(), metavar="N", help=help)


def release(p: argparse.ArgumentParser, help: str, repeatable: bool = False) -> None:
    """``--release VERSION``: an engine release by version (its wheel downloaded into the cache); a list when ``repeatable``."""
    if repeatable:
        p.add_argument("--release", action="append", default=[], metavar="VERSION", help=help)
    else:
        p.add_argument("--release", metavar="VERSION", help=help)


def contracts(p: argparse.ArgumentParser, help: str) -> None:
    """``--contract NAME`` (repeatable; ``args.contract`` is None when not given)."""
    p.add_argument("--contract", action="append", default=None, metavar="NAME", help=help)


def domain(p: argparse.ArgumentParser, help: str) -> None:
    """``--domain NAME``: the input domain (default: the target's declared one, else spec)."""
    p.add_argument("--domain", default=None, metavar="NAME", help=help)


def steps(p: argparse.ArgumentParser, help: str) -> None:
    """``--steps model|engine`` (``args.steps``, None when not given): where the
    scheduled steps of contracts D and E come from; ``batchfuzz.engine_steps.steps_domain`` maps it to a contract's domain."""
    p.add_argument("--steps", default=None, choices=("model", "engine"), metavar="SOURCE", help=help)


def targets(p: argparse.ArgumentParser, help: str, type: Callable[[str], Any] = contract_target) -> None:
    """``--target CONTRACT=MODULE:FUNCTION`` (repeatable; ``args.target`` a list of (contract, spec))."""
    p.add_argument("--target", action="append", default=[], type=type, metavar=TARGET_METAVAR, help=help)


def check_outputs(*pairs: tuple[str | None, str]) -> None:
    """A usage error before any work for each given output path (path, flag) that cannot be written."""
    for path, flag in pairs:
        if path:
            writable_file(path, flag)


class _Observe(argparse.Action):
    """Switches Hypothesis's observability on as the command line is read:
    before the fork server the command's processes come from starts, so that
    they inherit it (``batchfuzz.observability.switch_on``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from batchfuzz import observability

        observability.switch_on()
        setattr(namespace, self.dest, True)


def observe(p: argparse.ArgumentParser) -> None:
    """``--observe``: write Hypothesis's observability records (what
    ``HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1`` does, without line coverage)."""
    p.add_argument("--observe", action=_Observe, nargs=0, default=False,
                   help="write Hypothesis observability records (one JSON line per example, property CONTRACT.PROPERTY, "
                        "the target in its metadata) to .hypothesis/observed/, for Tyche; as "
                        "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY=1 does, without line coverage")
