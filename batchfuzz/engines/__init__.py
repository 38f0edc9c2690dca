"""Engines' own functions as batchfuzz targets, read from a release's source.

A module per engine (``batchfuzz.engines.vllm``, ``batchfuzz.engines.sglang``;
others through the ``batchfuzz.engines`` entry-point group or
``$BATCHFUZZ_ENGINES``, in the shape ``batchfuzz.plugins.EngineModule``
declares) binds the contracts to that engine's functions with
``batchfuzz.bind``. The plug-in point itself (``ReleaseSource``, ``Bound``,
``engines()``, ``engine(name)``, ``resolve(ref)``) is
``batchfuzz.engine_registry``, re-exported here; this package adds what the
engine modules share:

- ``fetch_wheel``: a release wheel downloaded with pip into a cache outside
  the repository (``$BATCHFUZZ_CACHE/wheels``, default
  ``~/.cache/batchfuzz/wheels``), checked against the index's SHA-256.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from batchfuzz.engine_registry import (
    ENGINES_ENV_VAR,
    ENTRY_POINT_GROUP,
    STATUSES,
    Bound,
    ReleaseSource,
    SourceError,
    UnknownEngine,
    engine,
    engine_modules,
    engines,
    resolve,
)

__all__ = ["ENGINES_ENV_VAR", "ENTRY_POINT_GROUP", "STATUSES", "Bound", "ReleaseSource", "SourceError", "UnknownEngine",
           "cache_dir", "engine", "engine_modules", "engines", "fetch_wheel", "pip_said", "resolve"]

# ---------------------------------------------------------------- downloading releases


def cache_dir() -> Path:
    """``$BATCHFUZZ_CACHE`` or ``~/.cache/batchfuzz``: outside any repository."""
    return Path(os.environ.get("BATCHFUZZ_CACHE") or Path.home() / ".cache" / "batchfuzz")


def fetch_wheel(distribution: str, version: str, dest: str | os.PathLike[str] | None = None, timeout_s: float = 300,
                say: Callable[[str], None] | None = None) -> Path:
    """The wheel of ``distribution==version`` in ``dest`` (default
    ``cache_dir()/wheels``), downloaded with ``pip download --no-deps`` unless
    it is already there, and checked against the SHA-256 the index publishes
    for it, whether downloaded or reused (``batchfuzz.engines._wheels``).
    ``say`` receives a line before a download (it may take minutes,
    silently), one after it with the wheel's size, and one for a cached
    wheel. Raises SourceError with pip's last words when the registry cannot
    be reached or has no such release, or naming the wheel that is not the release."""
    from batchfuzz.engines import _wheels

    if not re.fullmatch(r"[A-Za-z0-9_.-]+", distribution):
        raise ValueError(f"distribution must be a package name, got {distribution!r}")
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version):
        raise ValueError(f"version must be a release version like '0.33.0', got {version!r}")
    folder = Path(dest) if dest is not None else cache_dir() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)

    def present() -> Path | None:
        stem = distribution.replace("-", "_")
        hits = sorted(p for p in folder.glob(f"{stem}-{version}-*.whl"))
        return hits[0] if hits else None

    found = present()
    if found is not None:
        if say is not None:
            say(f"{distribution}=={version}: the cached wheel {found} ({_megabytes(found)})")
        return _wheels.verified(found, distribution, version, timeout_s)
    published = _wheels.index_hash(distribution, version, timeout_s)
    if say is not None:
        say(f"downloading {distribution}=={version}: its release wheel, with pip download into {folder} (once: later "
            f"runs use the cached file; at most {timeout_s:g}s)")
    started = time.monotonic()
    # Short socket timeouts and few retries: an unreachable registry should fail in seconds, not minutes.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", f"{distribution}=={version}",
           "-d", str(folder), "--quiet", "--timeout", "20", "--retries", "1"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SourceError(f"pip download {distribution}=={version} took more than {timeout_s:g} s") from None
    found = present()
    if proc.returncode != 0 or found is None:
        raise SourceError(f"pip download {distribution}=={version} failed (exit {proc.returncode}): {pip_said(proc)}")
    try:
        verified = _wheels.verified(found, distribution, version, timeout_s, published)
    except SourceError:
        found.unlink()  # not the release: never left in the cache
        raise
    if say is not None:
        say(f"downloaded {found.name} ({_megabytes(found)}) in {time.monotonic() - started:.0f}s")
    return verified


def _megabytes(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


def pip_said(proc: subprocess.CompletedProcess[str]) -> str:
    """A failed pip command's last two ERROR lines, each cut to 200 characters."""
    errors = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.startswith("ERROR")] or ["(no message)"]
    return " | ".join(ln if len(ln) <= 200 else ln[:200] + "..." for ln in errors[-2:])
