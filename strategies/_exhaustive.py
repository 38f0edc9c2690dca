"""Bounded-exhaustive enumeration: what the contracts' enumerators share.

Random generation guarantees nothing for small inputs, where batch-layout
bugs live. So every contract's strategies module also names *scopes*: small,
documented sets of inputs, each enumerated completely by its
``scope_cases(scope)``, **smallest first in the contract's order** (its
``size(case)``, a tuple compared lexicographically, the order the catalogue
and the structural reductions use). A run over a scope that stops at the
first failing case has therefore found a smallest counterexample of the
scope by construction, and a run that finds none is a bounded guarantee:
every input of the scope holds. ``batchfuzz.exhaustive`` runs them; each
module's ``SCOPES`` says what a scope holds, in which domain, and how many
cases it has (``tests/test_exhaustive.py`` checks the count, the order and
the domain by enumerating).

Every scope named ``small`` is a contract's default (``batchfuzz check
--exhaustive``); ``ci`` is a smaller one where ``small`` is too slow for
the CI suite; other names are scopes of their own (``int16_edge``: the
integer-width boundary that no small scope reaches).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from batchfuzz.reference._args import check_choice


@dataclass(frozen=True)
class ScopeSpec:
    """A scope as a strategies module states it: what it enumerates and in
    which order (``description``), the domain every case lies in, and the
    number of cases."""

    description: str
    domain: str
    count: int


def check_scope(scope: object, scopes: Mapping[str, ScopeSpec]) -> str:
    """``scope`` if it names one of ``scopes``; a ValueError naming it otherwise."""
    return str(check_choice("scope", scope, tuple(scopes)))


def compositions(total: int, parts: int, low: int, high: int) -> Iterator[tuple[int, ...]]:
    """Every ``parts``-tuple of integers in ``[low, high]`` summing to
    ``total``, in lexicographic order."""
    if parts == 0:
        if total == 0:
            yield ()
        return
    for first in range(low, min(high, total - low * (parts - 1)) + 1):
        for rest in compositions(total - first, parts - 1, low, high):
            yield (first, *rest)


def binary_words(length: int, value: int) -> Iterator[tuple[int, ...]]:
    """Every word of ``length`` letters over ``{0, value}``, by the number of
    ``value`` letters first (so a sum of magnitudes never decreases), then
    lexicographically by their positions."""
    for k in range(length + 1):
        for places in itertools.combinations(range(length), k):
            word = [0] * length
            for i in places:
                word[i] = value
            yield tuple(word)


def restricted_growth(cells: int, max_ids: int) -> Iterator[tuple[int, ...]]:
    """Every filling of ``cells`` cells with the null id 0 and block ids
    ``1..max_ids`` *up to renaming*: ids appear in order of first appearance
    (a restricted growth string; 1 before 2 before 3 ...). Renaming non-null
    ids is a bijection that keeps every equality of ids, so every property of
    contract E holds on a filling if and only if it holds on its canonical
    form; the canonical form has the least sum of ids of its class."""

    def fill(k: int, used: int) -> Iterator[tuple[int, ...]]:
        if k == cells:
            yield ()
            return
        for value in range(0, min(used + 1, max_ids) + 1):
            for rest in fill(k + 1, max(used, value)):
                yield (value, *rest)

    return fill(0, 0)
