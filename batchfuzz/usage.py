"""What every layer may say about a command-line run: a usage error, the exit
codes, and the checks of option values that code below ``commands/`` needs too
(a fuzz job's output folders, a duration). A leaf module: it imports nothing of
batchfuzz, so the fuzz job, the benches and the engines raise usage errors
without importing ``batchfuzz.cli`` or ``batchfuzz.commands``."""

from __future__ import annotations

import argparse
import enum
import math
import os


class ExitCode(enum.IntEnum):
    """The exit codes of every command (a signal ends ``fuzz`` with 128+N, outside this enum)."""

    OK = 0  # everything ran and held
    COUNTEREXAMPLE = 1  # a counterexample (wrong result, crash, timeout), a failing entry, or a harness error
    USAGE = 2  # bad usage or bad input, found before any example runs
    INCOMPLETE = 3  # the budget (or a missing shard) left work that did not run
    UNCHECKED = 4  # nothing failed, but something could not be checked: a release matrix's cell (unbindable, or an
    # error binding or running it), or replay's entries (none found, or every one skipped)


# SIGINT/SIGTERM that arrived while the commands were being imported, kept by
# ``batchfuzz.cli`` for a command that owns signals from its first line
# (``fuzz``: a partial report).
PENDING_SIGNALS: list[int] = []


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


def positive_int(text: str) -> int:
    """An option value that must be a positive integer (argparse errors name the value)."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return v


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


# The folders an output folder (--report, --corpus, --database, --write-test)
# may not be: batchfuzz would scatter its files over the operating system's own
# (as root, `--report /` wrote the report into /). A folder inside them is fine.
SYSTEM_DIRS = frozenset({"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc",
                         "/root", "/run", "/sbin", "/srv", "/sys", "/usr", "/var"})


def refuse_system_dir(path: str, what: str) -> None:
    """A usage error for an output folder that is a filesystem root, a system
    folder (:data:`SYSTEM_DIRS`, or inside /proc, /sys, /dev) or a home folder itself."""
    p = os.path.realpath(path)
    home = os.path.realpath(os.path.expanduser("~"))
    if (os.path.dirname(p) == p or p in SYSTEM_DIRS or p == home
            or any(p.startswith(f"{d}{os.sep}") for d in ("/proc", "/sys", "/dev"))):
        raise UsageError(f"{what} {path}: refusing to write batchfuzz's files into {p} (a filesystem root, a system "
                         "folder or a home folder); give a folder of its own, e.g. reports/fuzz")


def writable_dir(path: str, what: str) -> None:
    """Like :func:`writable_file`, for an output folder (created if missing);
    never a system folder (:func:`refuse_system_dir`)."""
    refuse_system_dir(path, what)
    p = os.path.abspath(path)
    if os.path.exists(p) and not os.path.isdir(p):
        raise UsageError(f"{what} {path}: exists and is not a directory")
    try:
        os.makedirs(p, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot be created ({exc.strerror or exc})") from None
    if not os.access(p, os.W_OK):
        raise UsageError(f"{what} {path}: not writable")
