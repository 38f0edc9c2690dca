"""Data-parallel microbatching decision (docs/contracts.md, contract E, "Data parallel").

Every rank splits the same padded token count ``Np`` at the same points; the
step is split only if every rank allows it and the last ubatch holds a real
token on the rank with the fewest tokens. ``dp_allow`` below is the
decision; the properties pin it down, and each is shown to catch a
plausible wrong decision (``MUTANTS``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from batchfuzz.reference import _step as ref_step
from batchfuzz.reference import allow_microbatching as ref_decision
from batchfuzz.reference._args import check_int
from batchfuzz.reference._step import Step
from batchfuzz.reference.split_ubatches import split_ubatches
from batchfuzz.strategies import general_steps
from batchfuzz.strategies._engine import pad_to_capture_size
from batchfuzz.strategies._steps import CAPTURE_SIZES, NUM_UBATCHES

Decide = Callable[[Sequence[bool], Sequence[int], int, int], bool]


# ---------------------------------------------------------------- the data-parallel decision (the rule under test)


def dp_allow(
    rank_allows: Sequence[bool], rank_num_tokens: Sequence[int], num_tokens_padded: int, num_ubatches: int = 2
) -> bool:
    """Data-parallel decision (docs/contracts.md): split only if every rank allows it and
    the last ubatch is non-empty on the rank with the fewest tokens.

    Every rank splits the same padded token count ``num_tokens_padded`` at the
    same points, so the rank with the fewest real tokens decides refusal.
    """
    if not isinstance(rank_allows, (list, tuple)) or not isinstance(rank_num_tokens, (list, tuple)):
        raise TypeError("rank_allows and rank_num_tokens must be lists (one entry per rank)")
    if len(rank_allows) == 0 or len(rank_allows) != len(rank_num_tokens):
        raise ValueError(
            f"rank_allows and rank_num_tokens must have one entry per rank (at least one), "
            f"got lengths {len(rank_allows)} and {len(rank_num_tokens)}"
        )
    for i, a in enumerate(rank_allows):
        if not isinstance(a, (bool, np.bool_)):
            raise TypeError(f"rank_allows[{i}] must be a bool, got {type(a).__name__} {a!r}")
    tokens = [check_int(f"rank_num_tokens[{i}]", n, minimum=0) for i, n in enumerate(rank_num_tokens)]
    padded = check_int("num_tokens_padded", num_tokens_padded, minimum=1)
    n = check_int("num_ubatches", num_ubatches, minimum=2)
    if padded < max(tokens):
        raise ValueError(f"num_tokens_padded must be >= every rank's token count, got {padded} < {max(tokens)}")
    every_rank_allows = True
    for a in rank_allows:
        if not a:
            every_rank_allows = False  # one veto and no rank splits
    fewest = min(tokens)
    last_ubatch_has_a_token = (padded // n) * (n - 1) < fewest
    return every_rank_allows and last_ubatch_has_a_token


def dp_decide(rank_steps: Sequence[Any], num_tokens_padded: int, num_ubatches: int = 2) -> bool:
    """``dp_allow`` with each rank's allowance from the exact ``allow_microbatching``."""
    steps = [ref_step.as_step(st) for st in rank_steps]
    allows = [
        ref_decision.allow_microbatching(st.num_computed_tokens, st.num_scheduled_tokens, st.block_tables, st.block_sizes)
        for st in steps
    ]
    tokens = [int(st.num_scheduled_tokens.sum()) for st in steps]
    return dp_allow(allows, tokens, num_tokens_padded, num_ubatches)


@dataclass
class Ranks:
    steps: list[Step]
    num_tokens_padded: int
    num_ubatches: int
    extra_padded_reqs: list[int]

    @property
    def tokens(self) -> list[int]:
        return [int(s.num_scheduled_tokens.sum()) for s in self.steps]

    @property
    def allows(self) -> list[bool]:
        return [ref_decision.allow_microbatching(s.num_computed_tokens, s.num_scheduled_tokens, s.block_tables, s.block_sizes)
                for s in self.steps]


@st.composite
def dp_ranks(draw: st.DrawFn) -> Ranks:
    """1 to 4 ranks, each with its own step; ``Np`` padded from the largest
    rank's tokens (a capture size, a little, or none). Shrinks towards one
    rank, two ubatches, no padding."""
    steps = draw(st.lists(general_steps(), min_size=1, max_size=4))
    most = max(int(s.num_scheduled_tokens.sum()) for s in steps)
    n = draw(st.sampled_from(NUM_UBATCHES))
    padding = draw(st.sampled_from(["none", "capture size", "a little"]))
    padded = most if padding == "none" else (pad_to_capture_size(most, CAPTURE_SIZES) or most) \
        if padding == "capture size" else most + draw(st.integers(1, 8))
    extra = draw(st.lists(st.integers(0, 2), min_size=len(steps), max_size=len(steps)))
    return Ranks(steps, max(padded, n, 1), n, extra)


def _vetoed_by_one(decide: Decide, ranks: Ranks) -> None:
    allows = ranks.allows
    if not all(allows):
        assert decide(allows, ranks.tokens, ranks.num_tokens_padded, ranks.num_ubatches) is False, \
            f"ranks {allows}: one veto and no rank splits"


def _refused_on_fewest(decide: Decide, ranks: Ranks) -> None:
    n, padded = ranks.num_ubatches, ranks.num_tokens_padded
    if (padded // n) * (n - 1) >= min(ranks.tokens):
        assert decide([True] * len(ranks.steps), ranks.tokens, padded, n) is False, \
            f"tokens {ranks.tokens}, Np {padded}, n {n}: the last ubatch is empty on the rank with the fewest tokens"


def _splits_when_it_may(decide: Decide, ranks: Ranks) -> None:
    n, padded = ranks.num_ubatches, ranks.num_tokens_padded
    if all(ranks.allows) and (padded // n) * (n - 1) < min(ranks.tokens):
        assert decide(ranks.allows, ranks.tokens, padded, n) is True, "every rank allows and no last ubatch is empty"


def _every_rank_safe(decide: Decide, ranks: Ranks) -> None:
    """End to end: a split decided for all ranks is the engine's split on
    each rank, never refused, and breaks no rank's step."""
    n, padded = ranks.num_ubatches, ranks.num_tokens_padded
    if not decide(ranks.allows, ranks.tokens, padded, n):
        return
    for k, step in enumerate(ranks.steps):
        nst = [int(x) for x in step.num_scheduled_tokens.tolist() if x > 0]
        assert nst, f"rank {k} has no token but the step is split"
        split = split_ubatches(nst, padded, len(nst) + ranks.extra_padded_reqs[k], n)
        assert split is not None, f"rank {k} ({sum(nst)} tokens) refuses the split (Np {padded}, n {n})"
        violations = ref_decision.simulate(step, split)
        assert not violations, f"rank {k}: {violations[0]}"


def _rank_order_irrelevant(decide: Decide, ranks: Ranks) -> None:
    a, t = ranks.allows, ranks.tokens
    args = (ranks.num_tokens_padded, ranks.num_ubatches)
    assert decide(a[::-1], t[::-1], *args) == decide(a, t, *args)


PROPERTIES = {
    "vetoed_by_one": _vetoed_by_one,
    "refused_on_fewest": _refused_on_fewest,
    "splits_when_it_may": _splits_when_it_may,
    "every_rank_safe": _every_rank_safe,
    "rank_order_irrelevant": _rank_order_irrelevant,
}


def _any_allows(allows: Sequence[bool], tokens: Sequence[int], padded: int, n: int) -> bool:
    return any(allows) and (padded // n) * (n - 1) < min(tokens)


def _refusal_on_most(allows: Sequence[bool], tokens: Sequence[int], padded: int, n: int) -> bool:
    return all(allows) and (padded // n) * (n - 1) < max(tokens)


def _no_refusal(allows: Sequence[bool], tokens: Sequence[int], padded: int, n: int) -> bool:
    return all(allows)


def _first_rank_decides(allows: Sequence[bool], tokens: Sequence[int], padded: int, n: int) -> bool:
    return allows[0] and (padded // n) * (n - 1) < tokens[0]


def _never(allows: Sequence[bool], tokens: Sequence[int], padded: int, n: int) -> bool:
    return False


MUTANTS: dict[str, tuple[Decide, str]] = {
    "any_allows": (_any_allows, "vetoed_by_one"),
    "refusal_on_most": (_refusal_on_most, "refused_on_fewest"),
    "no_refusal": (_no_refusal, "refused_on_fewest"),
    "first_rank_decides": (_first_rank_decides, "rank_order_irrelevant"),
    "never": (_never, "splits_when_it_may"),
}


@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_dp_allow_satisfies(name: str) -> None:
    @given(ranks=dp_ranks())
    def run(ranks: Ranks) -> None:
        PROPERTIES[name](dp_allow, ranks)

    run()


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_dp_property_catches(mutant: str) -> None:
    decide, prop = MUTANTS[mutant]

    @settings(max_examples=200, phases=[Phase.generate])  # finding is enough: no shrinking
    @given(ranks=dp_ranks())
    def run(ranks: Ranks) -> None:
        PROPERTIES[prop](decide, ranks)

    with pytest.raises(AssertionError):
        run()


def test_every_rank_safe_catches_an_unsound_rank_check() -> None:
    """With a rank that always allows, the end-to-end property finds a broken rank."""

    @settings(max_examples=200, phases=[Phase.generate])  # finding is enough: no shrinking
    @given(ranks=dp_ranks())
    def run(ranks: Ranks) -> None:
        def decide(allows: Sequence[bool], tokens: Sequence[int], padded: int, n: int) -> bool:
            return dp_allow([True] * len(allows), tokens, padded, n)

        _every_rank_safe(decide, ranks)

    with pytest.raises(AssertionError):
        run()


def test_dp_decide_uses_the_exact_rule() -> None:
    import numpy as np

    safe = ref_step.check_step(np.array([0, 2]), np.array([3, 2]), [np.array([[1, 2], [1, 3]])], [2])
    unsafe = ref_step.check_step(np.array([2, 0]), np.array([1, 3]), [np.array([[1, 3], [1, 2]])], [2])
    assert dp_decide([safe, safe], 5, 2) is True
    assert dp_decide([safe, unsafe], 5, 2) is False
    assert dp_decide([safe], 12, 4) is False  # (12 // 4) * 3 = 9 >= 5 tokens: the last ubatch is empty


@pytest.mark.parametrize(("args", "error", "match"), [
    (([], [], 4, 2), ValueError, r"one entry per rank \(at least one\), got lengths 0 and 0"),
    (([True], [3, 4], 4, 2), ValueError, r"got lengths 1 and 2"),
    (([1], [3], 4, 2), TypeError, r"rank_allows\[0\] must be a bool, got int 1"),
    (([True], [-1], 4, 2), ValueError, r"rank_num_tokens\[0\] must be >= 0, got -1"),
    (([True], [5], 4, 2), ValueError, r"num_tokens_padded must be >= every rank's token count, got 4 < 5"),
    (([True], [3], 4, 1), ValueError, r"num_ubatches must be >= 2, got 1"),
])
def test_dp_allow_rejects_bad_input(args: tuple[object, ...], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        dp_allow(*args)  # type: ignore[arg-type]
