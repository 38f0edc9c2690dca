"""Reading a JSON file batchfuzz cannot trust: a corpus entry, a shard's report, an earlier night's summary.

One reader, :func:`load_json`, with the limits every such file gets: a
regular file only (a symbolic link, a FIFO or a device is refused without
being read: a link to ``/dev/zero`` would read forever, a FIFO would block),
at most ``limit`` bytes, UTF-8, nested at most ``max_depth`` deep (checked
before parsing), integers within Python's int-string limit; with
``report=True`` (reports, whose numbers are counts, seconds and rates) also
integers of at most :data:`MAX_INT_DIGITS` digits and finite numbers only
(``NaN``, ``Infinity`` and ``1e999`` are refused, never written back into a
merged report). Every refusal is an :class:`UntrustedFileError` naming the
file; callers turn it into their own error (``CorpusError``, ``MergeError``,
a usage error).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

MAX_INT_DIGITS = 19  # a report's integers fit 64 bits: counts, seeds, indices
# A report (summary.json, junit.xml): a nightly's summary with every item's timeline is a few MB; a failure's
# case is nested as deep as a corpus file allows (64) under the summary's own levels.
MAX_REPORT_BYTES = 64 << 20
MAX_REPORT_DEPTH = 96


class UntrustedFileError(ValueError):
    """A file refused by :func:`load_json` (the message names it and why)."""


class _NumberRefused(ValueError):
    pass


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (``what`` names the kind of file in errors)."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UntrustedFileError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UntrustedFileError(f"{path}: a symbolic link (to {os.readlink(path)!r}); a {what} must be a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise UntrustedFileError(f"{path}: not a regular file ({_file_kind(st.st_mode)}); a {what} must be a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UntrustedFileError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the lstat and the open
            raise UntrustedFileError(f"{path}: not a regular file; a {what} must be a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise UntrustedFileError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise UntrustedFileError(f"{path}: more than {limit} bytes, larger than a {what} may be")
    return b"".join(chunks)


def _file_kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a regular file"


def json_depth(text: str, limit: int) -> int:
    """How deep ``[`` and ``{`` nest in JSON text (outside strings), without
    parsing it; counting stops once past ``limit``."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def _report_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _NumberRefused(f"an integer of {len(text.lstrip('-'))} digits (a report's integers have at most {MAX_INT_DIGITS})")
    return int(text)


def _report_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NumberRefused(f"a number out of range ({text[:40]})")
    return value


def _no_constant(name: str) -> Any:
    raise _NumberRefused(f"{name} is not a number a report holds (numbers must be finite)")


def load_json(path: Path | str, *, limit: int, max_depth: int, what: str, report: bool = False) -> Any:
    """The JSON document in ``path`` within the module docstring's limits; raises UntrustedFileError naming the file."""
    path = Path(path)
    raw = read_bounded(path, limit, what)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UntrustedFileError(f"{path}: not a text file (not UTF-8 at byte {exc.start})") from None
    if json_depth(text, max_depth) > max_depth:
        raise UntrustedFileError(f"{path}: JSON nested deeper than {max_depth} levels")
    hooks: dict[str, Any] = {"parse_int": _report_int, "parse_float": _report_float, "parse_constant": _no_constant} if report else {}
    try:
        return json.loads(text, **hooks)
    except json.JSONDecodeError as exc:
        raise UntrustedFileError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise UntrustedFileError(f"{path}: JSON nested too deep") from None
    except _NumberRefused as exc:
        raise UntrustedFileError(f"{path}: not valid JSON for a {what}: {exc}") from None
    except ValueError as exc:  # an integer past Python's int-string limit (4300 digits)
        raise UntrustedFileError(f"{path}: not valid JSON for a {what}: {exc}") from None


def load_report(path: Path | str) -> Any:
    """A report's JSON (``summary.json`` of a shard or an earlier night): :func:`load_json` with the report limits."""
    return load_json(path, limit=MAX_REPORT_BYTES, max_depth=MAX_REPORT_DEPTH, what="report file", report=True)
