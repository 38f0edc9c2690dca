"""Measure how evenly ``batchfuzz.fuzz.shards`` spreads realistic work-item lists (not a test).

    PYTHONPATH=$PWD python3 tests/measure_shards.py

Keys are shaped like the project's work items: the real ones (contract x
implementation x device, cpu and cuda; and per-property items, x property),
plus, for lists larger than today's, per-property items of 20 imagined user
targets per contract. For each list size M and shard count N it samples 1000
lists of M distinct keys from that pool and reports, for
rendezvous hashing (``shards.shard_of``) and for SHA-256 mod N: the mean
and the 95th percentile of the largest shard, the mean smallest shard, and
how often a shard is empty, next to the even split ceil(M/N). It also
prints the exact split of the full real lists.
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections.abc import Callable

from batchfuzz import registry
from batchfuzz.fuzz.shards import item_key, shard_of


def mod_n(key: str, n: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % n + 1


def universe() -> tuple[list[str], list[str], list[str]]:
    """(real items, real per-property items, the sampling pool)."""
    items, per_property, pool = [], [], []
    for c in registry.contracts():
        for impl in c.implementations:
            for device in impl.devices:
                items.append(item_key(c.name, impl.name, device))
                per_property += [item_key(c.name, impl.name, device, p.name) for p in c.properties]
        for j in range(20):
            pool += [item_key(c.name, f"target:mypkg/impl_{j}.py:{c.name}", "cpu", p.name) for p in c.properties]
    return items, per_property, per_property + pool


def counts(keys: list[str], n: int, fn: Callable[[str, int], int]) -> list[int]:
    out = [0] * n
    for k in keys:
        out[fn(k, n) - 1] += 1
    return out


def main() -> None:
    items, per_property, pool = universe()
    print(f"real lists: {len(items)} work items (cpu+cuda), {len(per_property)} per-property items")
    for name, keys in (("cpu items", [k for k in items if '"cpu"' in k]), ("cpu+cuda items", items),
                       ("cpu per-property", [k for k in per_property if '"cpu"' in k])):
        for n in (2, 4, 8):
            print(f"  {name} ({len(keys)}) over {n}: rendezvous {counts(keys, n, shard_of)}, mod-N {counts(keys, n, mod_n)}")
    rng = random.Random(0)
    print(f"sampling pool: {len(pool)} keys")
    cols = "max mean / p95, min mean, P(empty)"
    print(f"\n| items M | shards N | even ceil(M/N) | rendezvous: {cols} | mod-N: {cols} |")
    print("|---:|---:|---:|---|---|")
    for m in (16, 24, 32, 50, 64, 100):
        for n in (2, 3, 4, 6, 8):
            cells = []
            samples = [rng.sample(pool, m) for _ in range(1000)]
            for fn in (shard_of, mod_n):
                c = [counts(s, n, fn) for s in samples]
                mx = sorted(max(x) for x in c)
                mn = [min(x) for x in c]
                empty = sum(1 for x in c if 0 in x) / len(c)
                cells.append(f"{statistics.mean(mx):.1f} / {mx[int(0.95 * len(mx))]}, {statistics.mean(mn):.1f}, {empty:.1%}")
            print(f"| {m} | {n} | {math.ceil(m / n)} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
