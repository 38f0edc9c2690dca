"""Following an engine's releases: the newest ones on the package index, and
the record of the releases a following run has seen (docs/where-it-lives.md,
"Following releases").

The index is pip's configured one, asked with ``pip index versions`` (the
same index ``fetch_wheel`` downloads from). The record is a JSON file per
engine under ``cache_dir()/seen`` (``$BATCHFUZZ_CACHE``, default
``~/.cache/batchfuzz``); the releases of an engine's published matrix (its
``RELEASES``) count as seen without it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from batchfuzz.engines import SourceError, cache_dir, pip_said
from batchfuzz.output import write_json_atomic

_FINAL = re.compile(r"(\d+(?:\.\d+)*)(?:\.post(\d+))?")


def version_key(version: str) -> tuple[tuple[int, ...], int] | None:
    """The sort key of a final release (``0.34.0``, ``0.8.5.post1``); None for
    anything else (a pre-release, a development build, ``unknown``)."""
    match = _FINAL.fullmatch(version.strip()) if isinstance(version, str) else None
    if match is None:
        return None
    return tuple(int(x) for x in match.group(1).split(".")), int(match.group(2) or -1)


def index_versions(distribution: str, timeout_s: float = 60) -> list[str]:
    """Every version of ``distribution`` on pip's configured index, as pip
    lists them. SourceError with pip's last words when the index cannot be
    reached or has no such package."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", distribution):
        raise ValueError(f"distribution must be a package name, got {distribution!r}")
    cmd = [sys.executable, "-m", "pip", "index", "versions", distribution, "--timeout", "20", "--retries", "1",
           "--disable-pip-version-check"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SourceError(f"pip index versions {distribution} took more than {timeout_s:g} s") from None
    listed = next((ln.split(":", 1)[1] for ln in proc.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if proc.returncode != 0 or listed is None:
        raise SourceError(f"pip index versions {distribution} failed (exit {proc.returncode}): {pip_said(proc)}")
    return [v.strip() for v in listed.split(",") if v.strip()]


def newest(versions: Iterable[str], n: int) -> list[str]:
    """The ``n`` newest final releases of ``versions``, oldest first."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    finals = sorted({v for v in versions if version_key(v) is not None}, key=lambda v: version_key(v) or ((), 0))
    return finals[-n:]


def baseline(version: str, seen: Iterable[str]) -> str | None:
    """The newest release of ``seen`` older than ``version``; for a version
    that is not a final release (a source checkout's), the newest of ``seen``
    other than itself. None when there is none."""
    key = version_key(version)
    ordered = sorted((v for v in seen if version_key(v) is not None and v != version), key=lambda v: version_key(v) or ((), 0))
    older = [v for v in ordered if key is None or (version_key(v) or ((), 0)) < key]
    return older[-1] if older else None


def seen_file(engine: str) -> Path:
    """Where the releases a following run of ``engine`` has seen are recorded."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", engine):
        raise ValueError(f"engine must be a name, got {engine!r}")
    return cache_dir() / "seen" / f"{engine}.json"


def seen(engine: str, published: Iterable[str] = ()) -> set[str]:
    """The releases recorded as seen for ``engine``, with its ``published`` ones.
    A record that cannot be read counts as empty (it is rewritten by the next record)."""
    out = set(published)
    try:
        data = json.loads(seen_file(engine).read_text(encoding="utf-8"))
        out |= {v for v in data.get("releases", []) if isinstance(v, str)}
    except (OSError, ValueError, AttributeError):
        pass
    return out


def record(engine: str, versions: Iterable[str]) -> Path:
    """Add the final releases of ``versions`` to ``engine``'s record; its path."""
    path = seen_file(engine)
    known = seen(engine) | {v for v in versions if version_key(v) is not None}
    write_json_atomic(path, {"engine": engine, "releases": sorted(known, key=lambda v: version_key(v) or ((), 0))})
    return path
