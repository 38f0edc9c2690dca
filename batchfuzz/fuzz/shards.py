"""Shards of a fuzz run: ``--shard K/N`` runs the K-th of N disjoint parts of the work items.

An item's shard is a function of its own key alone (:func:`item_key`), by
rendezvous hashing over SHA-256 (:func:`shard_of`): every item is in exactly
one shard, other items never move it, it is the same in every process, and
going from N to N+1 shards moves only what the new shard takes. Balance and
the measured split: docs/nightly.md ("Shards").
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
MAX_SHARDS = 1000  # more machines than work items; a merge reads N from each shard's summary and lists the missing


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(2, 4)``; raises ValueError unless it is K/N with 1 <= K <= N <= :data:`MAX_SHARDS`."""
    if not isinstance(text, str):
        raise TypeError(f"shard must be a string K/N, got {type(text).__name__} {text!r}")
    m = _SHARD.fullmatch(text)
    if not m:
        raise ValueError(f"shard must be K/N with 1 <= K <= N (e.g. 2/4), got {text!r}")
    k, n = int(m.group(1)), int(m.group(2))
    if not 1 <= k <= n:
        raise ValueError(f"shard must be K/N with 1 <= K <= N (e.g. 2/4), got {text!r}")
    if n > MAX_SHARDS:
        raise ValueError(f"shard must be K/N with N at most {MAX_SHARDS}, got {text!r}")
    return k, n


def _check_count(n: int, name: str = "n") -> None:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} must be an int number of shards, got {type(n).__name__} {n!r}")
    if n < 1:
        raise ValueError(f"{name} must be at least 1, got {n!r}")


def item_key(contract: str, target: str, device: str, prop: str | None = None) -> str:
    """The key a work item is sharded by (compact JSON of the parts): ``target`` is
    the item's target reference (``impl:numpy@cpu``, ``variant:NAME``, a user's
    ``MODULE:FUNCTION`` or ``FILE.py:FUNCTION`` as given); the fuzz job's items
    are per property, so it passes ``prop``."""
    for name, value in (("contract", contract), ("target", target), ("device", device)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"{name} must be a non-empty string, got {value!r}")
    if prop is not None and (not isinstance(prop, str) or not prop):
        raise TypeError(f"prop must be None or a non-empty string, got {prop!r}")
    parts = [contract, target, device] + ([prop] if prop is not None else [])
    return json.dumps(parts, separators=(",", ":"))


def _weight(shard: int, key: str) -> bytes:
    return hashlib.sha256(f"{shard}\0{key}".encode()).digest()


def shard_of(item_key: str, n: int) -> int:
    """The shard (1-based, 1..n) that runs the item with this key."""
    if not isinstance(item_key, str):
        raise TypeError(f"item_key must be a string, got {type(item_key).__name__} {item_key!r}")
    _check_count(n)
    return max(range(1, n + 1), key=lambda s: _weight(s, item_key))


def select(items: Iterable[T], key: Callable[[T], str], k: int, n: int) -> list[T]:
    """The items of shard ``k`` of ``n``, in their given order."""
    _check_count(n)
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int shard number, got {type(k).__name__} {k!r}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and n={n}, got {k!r}")
    return [item for item in items if shard_of(key(item), n) == k]


def plan_digest(keys: Iterable[str]) -> str:
    """A short digest of a run's whole item list (before sharding), for a shard's
    summary: shards of one run carry the same digest, so merging can tell runs apart."""
    unique = sorted(set(keys))
    return hashlib.sha256("\n".join(unique).encode()).hexdigest()[:16]
