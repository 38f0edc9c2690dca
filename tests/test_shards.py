"""Sharding work items (``batchfuzz.fuzz.shards``): parsing K/N, and a partition that is
complete, disjoint, stable under other items coming and going, the same in every
process, and moves little when N grows.

Each property is a checker returning its violations; the checkers run on the
real scheme and on buggy variants (position-based, ``hash()``-based, mod-N,
0-based), so each is shown to fail where it should.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchfuzz.fuzz.shards import item_key, parse_shard, plan_digest, select, shard_of

REPO = Path(__file__).resolve().parent.parent
Scheme = Callable[[list[str], int], list[int]]  # all keys of a list -> their shards (a scheme may look at the list)

keys_st = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=40, unique=True)


def real(keys: list[str], n: int) -> list[int]:
    return [shard_of(k, n) for k in keys]


def by_position(keys: list[str], n: int) -> list[int]:  # buggy: an item's shard depends on the items before it
    return [i % n + 1 for i in range(len(keys))]


def by_mod_n(keys: list[str], n: int) -> list[int]:  # stable under additions, but reshuffles when N changes
    return [int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "big") % n + 1 for k in keys]


def zero_based(keys: list[str], n: int) -> list[int]:  # buggy: 0..n-1
    return [s - 1 for s in real(keys, n)]


def partition_violations(scheme: Scheme, keys: list[str], n: int) -> list[str]:
    """Every item gets exactly one shard, and it is one of 1..n."""
    shards = scheme(keys, n)
    if len(shards) != len(keys):
        return [f"{len(keys)} items, {len(shards)} shards assigned"]
    return [f"{k!r} -> {s}" for k, s in zip(keys, shards, strict=True) if not 1 <= s <= n]


def stability_violations(scheme: Scheme, keys: list[str], others: list[str], n: int) -> list[str]:
    """An item's shard does not change when other items are added (in front or behind) or removed."""
    alone = dict(zip(keys, scheme(keys, n), strict=True))
    out = []
    for combined in (others + keys, keys + others):
        with_others = dict(zip(combined, scheme(combined, n), strict=True))
        out += [f"{k!r}: {alone[k]} alone, {with_others[k]} with others" for k in keys if alone[k] != with_others[k]]
    return out


def growth_violations(scheme: Scheme, keys: list[str], n: int) -> list[str]:
    """From n to n+1 shards an item either stays or moves to the new shard n+1."""
    before, after = scheme(keys, n), scheme(keys, n + 1)
    return [f"{k!r}: {b} -> {a}" for k, b, a in zip(keys, before, after, strict=True) if a not in (b, n + 1)]


# --------------------------------------------------------------------------- parse_shard


@pytest.mark.parametrize(("text", "expected"), [("1/1", (1, 1)), ("2/4", (2, 4)), (" 3 / 3 ", (3, 3)), ("10/12", (10, 12))])
def test_parse_shard(text: str, expected: tuple[int, int]) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "-1/3", "2", "2/", "/2", "a/b", "1/2/3", "1.5/3", ""])
def test_parse_shard_rejects_what_is_not_k_of_n(text: str) -> None:
    with pytest.raises(ValueError, match=r"shard must be K/N with 1 <= K <= N .*got " + re.escape(repr(text))):
        parse_shard(text)


def test_bad_argument_types() -> None:
    with pytest.raises(TypeError, match="shard must be a string"):
        parse_shard(2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="item_key must be a string"):
        shard_of(3, 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        shard_of("x", 0)
    with pytest.raises(TypeError, match="n must be an int"):
        shard_of("x", True)
    with pytest.raises(ValueError, match="k must be between 1 and n=3, got 4"):
        select(["x"], str, 4, 3)
    with pytest.raises(TypeError, match="contract must be a non-empty string"):
        item_key("", "numpy", "cpu")


# --------------------------------------------------------------------------- the partition


@settings(max_examples=60, deadline=None)
@given(keys=keys_st, n=st.integers(1, 9))
def test_select_partitions_the_items(keys: list[str], n: int) -> None:
    assert partition_violations(real, keys, n) == []
    parts = [select(keys, str, k, n) for k in range(1, n + 1)]
    assert sorted(x for p in parts for x in p) == sorted(keys)  # every item once
    for k, part in enumerate(parts, start=1):
        assert part == [x for x in keys if shard_of(x, n) == k]  # in the given order


@settings(max_examples=60, deadline=None)
@given(keys=keys_st, others=keys_st, n=st.integers(2, 9))
def test_an_items_shard_never_depends_on_the_other_items(keys: list[str], others: list[str], n: int) -> None:
    others = [o for o in others if o not in keys]
    assert stability_violations(real, keys, others, n) == []


@settings(max_examples=60, deadline=None)
@given(keys=keys_st, n=st.integers(1, 8))
def test_growing_n_moves_items_only_to_the_new_shard(keys: list[str], n: int) -> None:
    assert growth_violations(real, keys, n) == []


def test_the_checkers_catch_buggy_schemes() -> None:
    keys = [item_key("split_dummy_tokens", f"impl{i}", "cpu") for i in range(40)]
    others = [item_key("make_dummy", f"impl{i}", "cpu") for i in range(5)]
    assert partition_violations(zero_based, keys, 4)
    assert stability_violations(by_position, keys, others, 4)
    assert growth_violations(by_mod_n, keys, 4)
    assert not stability_violations(by_mod_n, keys, others, 4)  # mod-N is stable under additions, just not under N


def test_shards_are_roughly_even_for_many_items() -> None:
    """A hash that favoured some shard (or never picked one) shows here: 20000 keys over 5 shards, each within 4%."""
    counts = [0] * 5
    for i in range(20000):
        counts[shard_of(f"item-{i}", 5) - 1] += 1
    assert all(abs(c - 4000) < 160 for c in counts), counts


def test_the_scheme_is_rendezvous_over_sha256() -> None:
    """The plain definition, as the oracle: the shard with the largest SHA-256 of "<shard>\\0<key>".
    The scheme is part of the nightly's format: a change would reshuffle every shard."""
    for key in [item_key("split_dummy_tokens", "numpy", "cpu"), item_key("make_dummy", "torch", "cuda", "p"), "", "ü"]:
        for n in range(1, 9):
            weights = {s: hashlib.sha256(f"{s}\0{key}".encode()).hexdigest() for s in range(1, n + 1)}
            assert shard_of(key, n) == max(weights, key=weights.__getitem__)


_ASSIGN = """
import json, sys
from batchfuzz.fuzz.shards import shard_of
keys = [f"key-{i}" for i in range(300)]
print(json.dumps({"real": [shard_of(k, 7) for k in keys], "hash": [hash(k) % 7 + 1 for k in keys]}))
"""


def test_assignment_is_the_same_under_any_pythonhashseed() -> None:
    runs = []
    for hash_seed in ("1", "2"):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env.update(PYTHONHASHSEED=hash_seed, PYTHONPATH=str(REPO))
        r = subprocess.run([sys.executable, "-c", _ASSIGN], env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout))
    assert runs[0]["real"] == runs[1]["real"] == [shard_of(f"key-{i}", 7) for i in range(300)]
    assert runs[0]["hash"] != runs[1]["hash"]  # the buggy variant, Python's salted hash(), would differ


def test_item_keys_and_plan_digests() -> None:
    assert item_key("c", "numpy", "cpu") == '["c","numpy","cpu"]'
    assert item_key("c", "m.py:f", "cpu", "p") == '["c","m.py:f","cpu","p"]'
    assert item_key("c", "numpy", "cpu") != item_key("c", "numpy", "cuda")
    a, b = item_key("c", "numpy", "cpu"), item_key("c", "torch", "cpu")
    assert plan_digest([a, b]) == plan_digest([b, a, a]) != plan_digest([a])
