"""The block-level exact microbatching check (impl/allow_microbatching_numpy.py,
impl/allow_microbatching_torch.py) and its benchmark (batchfuzz/microbench.py).

Properties, each with the buggy variant it is shown to catch (``_caught``
searches for a counterexample and fails when there is none):

- the decision and the conflict set equal the oracles on every step
  (well-formed, ill-formed, realizable), through the canonical functions, the
  engine-path class and the forced general path; caught: the fast path
  without its precondition check, a partial-read blind general path;
- one checker reused over a sequence of engine-shaped steps (persistent
  width, stale rows past ``num_reqs``, int32) stays exact and leaves its mark
  array clean; caught: a checker that does not clear its marks;
- precondition U (one write record per block) holds on every realizable step
  and the fast path is taken there; it fails on random tables, where the
  general path takes over (a literal step shows ``last_paths``);
- the torch decision equals the oracle without reading a tensor value on the
  host (a TorchFunctionMode that raises on host reads and boolean-mask
  indexing); caught: a decision that calls ``.item()``;
- the benchmark's copy of the shipped check decides as the registered
  variant; caught: a copy that counts decodes as readers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample
from torch.overrides import TorchFunctionMode

from batchfuzz import microbench
from batchfuzz.contracts._microbatch import shipped_allow_microbatching
from batchfuzz.impl import allow_microbatching_numpy as exact
from batchfuzz.impl import allow_microbatching_torch as exact_torch
from batchfuzz.impl import find_conflicts_numpy, find_conflicts_torch
from batchfuzz.reference import _step as ref_step
from batchfuzz.reference import allow_microbatching as ref_decision
from batchfuzz.reference import find_conflicts as ref_conflicts
from batchfuzz.reference._step import Step
from batchfuzz.scheduler_model import sample_realizable_step
from batchfuzz.strategies._steps import general_steps, realizable_steps_for_ci

ANY_STEP = st.one_of(general_steps(), general_steps(well_formed=False), realizable_steps_for_ci().map(lambda si: si[0]))
SEARCH = settings(max_examples=3000, deadline=None, database=None, derandomize=True)  # deterministic searches


def _args(step: Step) -> tuple[Any, Any, list[Any], list[int]]:
    return step.num_computed_tokens, step.num_scheduled_tokens, list(step.block_tables), list(step.block_sizes)


def _rows(found: Any) -> set[tuple[int, int, int, int]]:
    return {(int(g), int(r), int(w), int(b)) for g, r, w, b in np.asarray(found).tolist()}


def _caught(prop: Callable[[Any], None], strategy: st.SearchStrategy[Any] = ANY_STEP) -> Any:
    """An example on which ``prop`` fails (an assertion, or the variant crashing)."""

    def fails(example: Any) -> bool:
        try:
            prop(example)
        except Exception:
            return True
        return False

    try:
        return find(strategy, fails, settings=SEARCH)
    except NoSuchExample:
        pytest.fail("the property never failed on the buggy variant")


def _checker(step: Step, cls: type[exact.ExactMicrobatchCheck] = exact.ExactMicrobatchCheck) -> exact.ExactMicrobatchCheck:
    top = max((int(t.max(initial=0)) for t in step.block_tables), default=0)
    return cls(step.num_reqs, [int(t.shape[1]) for t in step.block_tables], list(step.block_sizes), top + 1)


class GeneralOnly(exact.ExactMicrobatchCheck):
    """Always takes the general path."""

    def _one_writer_per_block(self, grp: Any, values: np.ndarray) -> bool:
        return False


class Unchecked(exact.ExactMicrobatchCheck):
    """Buggy: takes the fast path without checking precondition U."""

    def _one_writer_per_block(self, grp: Any, values: np.ndarray) -> bool:
        self._mark[grp.rec_block] = values
        return True


class NoPartialReads(exact.ExactMicrobatchCheck):
    """Buggy: the general path ignores the partly computed block."""

    def _one_writer_per_block(self, grp: Any, values: np.ndarray) -> bool:
        return False

    def _general_unsafe(self, req: Any, grp: Any) -> bool:
        keys, earliest = exact._earliest_writes(req, grp)
        if keys.size == 0:
            return False
        block = keys // grp.size
        starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
        self._mark[block[starts]] = np.maximum.reduceat(earliest, starts) + 1
        return self._unsafe_whole_reads(req, grp, block[starts])


def decision_is_exact(cls: type[exact.ExactMicrobatchCheck]) -> Callable[[Step], None]:
    def prop(step: Step) -> None:
        s = ref_step.check_step(*_args(step))
        got = _checker(s, cls)(s.num_reqs, s.num_computed_tokens, s.num_scheduled_tokens, s.block_tables)
        assert got is ref_decision.allow_microbatching(*_args(step))

    return prop


def conflicts_are_exact(cls: type[exact.ExactMicrobatchCheck]) -> Callable[[Step], None]:
    def prop(step: Step) -> None:
        s = ref_step.check_step(*_args(step))
        got = _checker(s, cls).find_conflicts(s.num_reqs, s.num_computed_tokens, s.num_scheduled_tokens, s.block_tables)
        assert _rows(got) == ref_conflicts.find_conflicts(*_args(step))
        assert got.dtype == np.int64 and got.shape[1] == 4
        assert [tuple(r) for r in got.tolist()] == sorted(set(map(tuple, got.tolist())))  # sorted, unique

    return prop


# ---------------------------------------------------------------- numpy: exact on every step


@given(step=ANY_STEP)
def test_canonical_functions_equal_the_oracles(step: Step) -> None:
    assert exact.allow_microbatching(*_args(step)) is ref_decision.allow_microbatching(*_args(step))
    assert _rows(find_conflicts_numpy.find_conflicts(*_args(step))) == ref_conflicts.find_conflicts(*_args(step))


@pytest.mark.parametrize("cls", [exact.ExactMicrobatchCheck, GeneralOnly], ids=["engine path", "general path"])
def test_checker_equals_the_oracles(cls: type[exact.ExactMicrobatchCheck]) -> None:
    given(step=ANY_STEP)(decision_is_exact(cls))()
    given(step=ANY_STEP)(conflicts_are_exact(cls))()


def test_exactness_catches_the_fast_path_without_its_check() -> None:
    step = _caught(decision_is_exact(Unchecked))
    s = ref_step.check_step(*_args(step))
    check = _checker(s)
    expected = ref_decision.allow_microbatching(*_args(step))
    assert check(s.num_reqs, s.num_computed_tokens, s.num_scheduled_tokens, s.block_tables) is expected
    assert "general" in check.last_paths  # the real checker leaves the fast path on that step
    _caught(conflicts_are_exact(Unchecked))


def test_exactness_catches_a_general_path_blind_to_partial_reads() -> None:
    _caught(decision_is_exact(NoPartialReads))


# ---------------------------------------------------------------- precondition U and the two paths


def _records_per_block(step: Step) -> list[dict[int, int]]:
    """Plain loops: per group, block id -> number of write records (row, column) holding it."""
    out = []
    for table, size in zip(step.block_tables, step.block_sizes, strict=True):
        count: dict[int, int] = {}
        for r, (c, q) in enumerate(zip(step.num_computed_tokens.tolist(), step.num_scheduled_tokens.tolist(), strict=True)):
            if q == 0:
                continue
            for col in range(c // size, -(-(c + q) // size)):
                b = int(table[r][col])
                if b != 0:
                    count[b] = count.get(b, 0) + 1
        out.append(count)
    return out


def _u_holds(step: Step) -> None:
    assert all(n == 1 for count in _records_per_block(step) for n in count.values())


@given(si=realizable_steps_for_ci())
def test_u_holds_on_realizable_steps(si: tuple[Step, dict[str, Any]]) -> None:
    """Precondition U holds on what a prefix-caching scheduler produces, so
    the engine path stays on the fast path there."""
    step = si[0]
    _u_holds(step)
    s = ref_step.check_step(*_args(step))
    check = _checker(s)
    check(s.num_reqs, s.num_computed_tokens, s.num_scheduled_tokens, s.block_tables)
    check.find_conflicts(s.num_reqs, s.num_computed_tokens, s.num_scheduled_tokens, s.block_tables)
    assert "general" not in check.path_counts


def test_u_holds_on_large_realizable_steps() -> None:
    for profile in microbench.PROFILES:
        step, _ = sample_realizable_step(np.random.default_rng(3), num_reqs=24, max_blocks_per_req=96, profile=profile,
                                         num_groups=3)
        _u_holds(step)


def test_u_is_a_real_precondition_random_tables_break_it() -> None:
    """The U property can fail: random tables break it."""
    _caught(_u_holds, general_steps(well_formed=False))


def test_general_path_takes_over_on_a_step_breaking_u() -> None:
    """Block 1 of request 0 (c=1, q=1, B=2: it writes offset 1) is also
    written by request 1 (offset 0), which comes later: request 0 reads
    offset 0 before it is written. Two records on one block break U; the
    general path runs and vetoes, as the oracle does; the fast formula
    alone would allow."""
    c, q, tables, sizes = np.array([1, 0]), np.array([1, 1]), [np.array([[1], [1]])], [2]
    check = exact.ExactMicrobatchCheck(2, [1], [2], 2)
    assert check(2, c, q, tables) is False is ref_decision.allow_microbatching(c, q, tables, sizes)
    assert check.last_paths == ("general",)
    assert Unchecked(2, [1], [2], 2)(2, c, q, tables) is True
    check.find_conflicts(2, c, q, tables)
    assert check.last_paths == ("general",) and check.path_counts == {"general": 2}
    fine = exact.ExactMicrobatchCheck(2, [1], [2], 2)
    assert fine(2, np.array([2, 0]), np.array([0, 1]), [np.array([[1], [0]])]) is True
    assert fine.last_paths == ("fast",)


def test_last_paths_marks_groups_after_a_veto_skipped() -> None:
    c, q = np.array([2, 0]), np.array([1, 2])
    tables = [np.array([[1, 0], [1, 0]]), np.array([[3, 4], [5, 0]])]
    check = exact.ExactMicrobatchCheck(2, [2, 2], [2, 2], 6)
    assert check(2, c, q, tables) is False is ref_decision.allow_microbatching(c, q, tables, [2, 2])
    assert check.last_paths == ("fast", "skipped")


# ---------------------------------------------------------------- engine arrays, reused scratch


@st.composite
def engine_sequences(draw: st.DrawFn) -> tuple[list[int], list[int], int, list[tuple[int, np.ndarray, np.ndarray, list[np.ndarray]]]]:
    """Steps as an engine hands them over: one configuration (groups, block
    sizes, persistent widths, ``max_num_reqs``), int32 arrays with
    ``max_num_reqs`` entries/rows, stale values past ``num_reqs``, random
    block ids from a small pool (ill-formed steps included)."""
    groups = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.sampled_from((1, 2, 3, 4, 8)), min_size=groups, max_size=groups))
    widths = draw(st.lists(st.integers(1, 5), min_size=groups, max_size=groups))
    max_reqs = draw(st.integers(1, 5))
    pool = draw(st.integers(1, 6))
    steps = []
    for _ in range(draw(st.integers(2, 4))):
        n = draw(st.integers(0, max_reqs))
        room = min(w * b for w, b in zip(widths, sizes, strict=True))
        c = np.array(draw(st.lists(st.integers(0, room), min_size=max_reqs, max_size=max_reqs)), dtype=np.int32)
        q = np.array([draw(st.integers(0, room - int(x))) for x in c], dtype=np.int32)
        tables = [np.array(draw(st.lists(st.lists(st.integers(0, pool), min_size=w, max_size=w), min_size=max_reqs,
                                         max_size=max_reqs)), dtype=np.int32).reshape(max_reqs, w) for w in widths]
        steps.append((n, c, q, tables))
    return sizes, widths, max_reqs, steps


def reused_checker_is_exact(cls: type[exact.ExactMicrobatchCheck]) -> Callable[[Any], None]:
    def prop(seq: Any) -> None:
        sizes, widths, max_reqs, steps = seq
        check = cls(max_reqs, widths, sizes, 7)
        for n, c, q, tables in steps:
            args = (c[:n], q[:n], [t[:n] for t in tables], sizes)
            assert check(n, c, q, tables) is ref_decision.allow_microbatching(*args)
            assert _rows(check.find_conflicts(n, c, q, tables)) == ref_conflicts.find_conflicts(*args)
            assert not check._mark.any()  # scratch left clean for the next step

    return prop


@given(seq=engine_sequences())
def test_one_checker_over_engine_shaped_steps(seq: Any) -> None:
    reused_checker_is_exact(exact.ExactMicrobatchCheck)(seq)


class Dirty(exact.ExactMicrobatchCheck):
    """Buggy: leaves the fast path's marks in the scratch array."""

    def _unsafe_whole_reads(self, req: Any, grp: Any, marked: np.ndarray) -> bool:
        return super()._unsafe_whole_reads(req, grp, marked[:0])


def test_reuse_catches_a_checker_that_leaves_marks() -> None:
    _caught(reused_checker_is_exact(Dirty), engine_sequences())


# ---------------------------------------------------------------- input errors


def test_canonical_functions_validate_like_the_oracle() -> None:
    with pytest.raises(ValueError, match=r"num_computed_tokens\[1\] must be >= 0"):
        exact.allow_microbatching(np.array([0, -1]), np.array([1, 1]), [np.zeros((2, 1), np.int32)], [4])
    with pytest.raises(TypeError, match="block_sizes"):
        find_conflicts_numpy.find_conflicts(np.array([0]), np.array([1]), [np.zeros((1, 1), np.int32)], 4)
    with pytest.raises(ValueError, match=r"block_tables\[0\] has 1 columns"):
        exact.allow_microbatching(np.array([0]), np.array([5]), [np.zeros((1, 1), np.int32)], [4])


def test_checker_rejects_bad_shapes_and_ids() -> None:
    check = exact.ExactMicrobatchCheck(2, [3], [4], 10)
    c, q, t = np.zeros(2, np.int32), np.ones(2, np.int32), [np.zeros((2, 3), np.int32)]
    with pytest.raises(ValueError, match=r"num_reqs must be <= max_num_reqs \(2\), got 3"):
        check(3, c, q, t)
    with pytest.raises(TypeError, match="num_scheduled_tokens must be a 1-D numpy int array"):
        check(2, c, q.astype(float), t)
    with pytest.raises(ValueError, match=r"block_tables\[0\] must have shape \(>= 2, 3\), got \(2, 4\)"):
        check(2, c, q, [np.zeros((2, 4), np.int32)])
    with pytest.raises(ValueError, match="C-contiguous"):
        check(2, c, q, [np.zeros((3, 2), np.int32).T[:, :3].copy(order="F")])
    with pytest.raises(ValueError, match="block id 12, but num_blocks is 10"):
        check(2, c, q, [np.array([[12, 0, 0], [0, 0, 0]], np.int32)])
    assert not check._mark.any()
    with pytest.raises(ValueError, match="num_blocks must be >= 1"):
        exact.ExactMicrobatchCheck(2, [3], [4], 0)
    with pytest.raises(ValueError, match="widths and block_sizes must name the same groups"):
        exact.ExactMicrobatchCheck(2, [3, 3], [4], 5)


# ---------------------------------------------------------------- torch: exact, no host reads


class ForbidHostReads(TorchFunctionMode):
    """Fails on every torch call that reads a tensor value on the host, and on
    indexing with a boolean tensor (a hidden ``nonzero``: a data-dependent shape)."""

    FORBIDDEN = frozenset({
        "item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__", "nonzero", "argwhere",
        "masked_select", "unique", "unique_consecutive", "bincount", "equal", "allclose", "repeat_interleave",
        "_local_scalar_dense",
    })

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", str(func))
        if name in self.FORBIDDEN:
            raise AssertionError(f"host read of a tensor value: {name}")
        if name in ("__getitem__", "__setitem__") and _has_bool_index(args[1] if len(args) > 1 else None):
            raise AssertionError(f"boolean-mask indexing (data-dependent shape) in {name}")
        return func(*args, **(kwargs or {}))


def _has_bool_index(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def test_guard_catches_host_reads_and_mask_indexing() -> None:
    x = torch.arange(4)
    with ForbidHostReads(), pytest.raises(AssertionError, match="host read"):
        x.sum().item()
    with ForbidHostReads(), pytest.raises(AssertionError, match="boolean-mask"):
        x[x > 1]


def torch_decision_is_exact_and_sync_free(check_cls: type[exact_torch.ExactMicrobatchCheckTorch]) -> Callable[[Step], None]:
    def prop(step: Step) -> None:
        s = ref_step.check_step(*_args(step))
        top = max((int(t.max(initial=0)) for t in s.block_tables), default=0)
        check = check_cls(s.num_reqs, [int(t.shape[1]) for t in s.block_tables], list(s.block_sizes), top + 1,
                          int(s.num_scheduled_tokens.sum()) + 3)  # spare token capacity, as an engine has
        c, q = torch.from_numpy(s.num_computed_tokens.astype(np.int32)), torch.from_numpy(s.num_scheduled_tokens)
        tables = [torch.from_numpy(t.astype(np.int32)) for t in s.block_tables]
        with ForbidHostReads():
            got = check(s.num_reqs, c, q, tables)
        assert got.shape == () and got.dtype == torch.bool
        assert bool(got) is ref_decision.allow_microbatching(*_args(step))

    return prop


class HostReading(exact_torch.ExactMicrobatchCheckTorch):
    """Buggy: returns early (a host read) when no request has a token."""

    def __call__(self, num_reqs: int, c: torch.Tensor, q: torch.Tensor, tables: Any, num_tokens: int | None = None) -> torch.Tensor:
        if int(q[:num_reqs].sum().item()) == 0:
            return torch.ones((), dtype=torch.bool)
        return super().__call__(num_reqs, c, q, tables, num_tokens)


@given(step=ANY_STEP)
def test_torch_decision_is_exact_without_host_reads(step: Step) -> None:
    torch_decision_is_exact_and_sync_free(exact_torch.ExactMicrobatchCheckTorch)(step)


def test_torch_property_catches_a_host_read() -> None:
    _caught(torch_decision_is_exact_and_sync_free(HostReading))


@given(step=ANY_STEP)
def test_torch_binders_equal_the_oracles(step: Step) -> None:
    assert exact_torch.bind("cpu")(*_args(step)) is ref_decision.allow_microbatching(*_args(step))
    found = find_conflicts_torch.bind("cpu")(*_args(step))
    assert _rows(found) == ref_conflicts.find_conflicts(*_args(step))


def torch_conflicts_are_exact_and_sync_free(cls: type[find_conflicts_torch.ExactConflictsTorch],
                                            max_pairs: int = 4096) -> Callable[[Step], None]:
    """The torch conflict set, inputs as the engine has them (int32), computed
    under ``ForbidHostReads``: sorted unique rows equal to the oracle's, ``-1``
    past ``count``, and ``overflow`` exactly when the pairs did not fit."""

    def prop(step: Step) -> None:
        s = ref_step.check_step(*_args(step))
        top = max((int(t.max(initial=0)) for t in s.block_tables), default=0)
        finder = cls(s.num_reqs, [int(t.shape[1]) for t in s.block_tables], list(s.block_sizes), top + 1,
                     int(s.num_scheduled_tokens.sum()) + 3, "cpu", max_pairs)
        c, q = torch.from_numpy(s.num_computed_tokens.astype(np.int32)), torch.from_numpy(s.num_scheduled_tokens)
        tables = [torch.from_numpy(t.astype(np.int32)) for t in s.block_tables]
        with ForbidHostReads():
            found = finder.find_conflicts(s.num_reqs, c, q, tables)
        assert found.rows.shape == (max_pairs, 4) and found.num_conflicts.shape == found.num_pairs.shape == ()
        expected = sorted(ref_conflicts.find_conflicts(*_args(step)))
        if bool(found.overflow):  # then room for the pairs it counted must be enough, and give the same count
            roomy = cls(s.num_reqs, [int(t.shape[1]) for t in s.block_tables], list(s.block_sizes), top + 1,
                        int(s.num_scheduled_tokens.sum()) + 3, "cpu", int(found.num_pairs))
            again = roomy.find_conflicts(s.num_reqs, c, q, tables)
            assert int(again.num_pairs) == int(found.num_pairs) > max_pairs and not bool(again.overflow)
            found = again
        count = int(found.num_conflicts)
        assert [tuple(r) for r in found.rows[:count].tolist()] == expected
        assert bool((found.rows[count:] == -1).all())

    return prop


class CapacityBlind(find_conflicts_torch.ExactConflictsTorch):
    """Buggy: reports the pairs it enumerated rather than the pairs there are,
    so an overflow goes unnoticed."""

    def find_conflicts(self, *args: Any, **kwargs: Any) -> Any:
        found = super().find_conflicts(*args, **kwargs)
        return found._replace(num_pairs=torch.clamp(found.num_pairs, max=self.max_pairs))


class OwnPairsKept(find_conflicts_torch.ExactConflictsTorch):
    """Buggy: forgets that a request is in no conflict with itself."""

    def find_conflicts(self, num_reqs: int, c: Any, q: Any, tables: Any, num_tokens: int | None = None) -> Any:
        found = super().find_conflicts(num_reqs, c, q, tables, num_tokens)
        own = torch.full((1, 4), 0, dtype=torch.int64)
        return found._replace(rows=torch.cat([own, found.rows[:-1]]), num_conflicts=found.num_conflicts + 1)


@given(step=ANY_STEP)
def test_torch_conflicts_are_exact_without_host_reads(step: Step) -> None:
    torch_conflicts_are_exact_and_sync_free(find_conflicts_torch.ExactConflictsTorch)(step)


@given(step=ANY_STEP)
def test_torch_conflicts_flag_an_overflow(step: Step) -> None:
    """With room for 2 pairs only, the result is exact or flagged as overflowing."""
    torch_conflicts_are_exact_and_sync_free(find_conflicts_torch.ExactConflictsTorch, max_pairs=2)(step)


def test_torch_conflict_properties_catch_buggy_variants() -> None:
    _caught(torch_conflicts_are_exact_and_sync_free(CapacityBlind, max_pairs=2))
    _caught(torch_conflicts_are_exact_and_sync_free(OwnPairsKept))


def test_torch_conflicts_to_numpy_refuses_an_incomplete_set() -> None:
    # request 1 reads block 1 (written by request 0) and offset 0 of block 3, which it writes itself: two pairs
    c, q, tables = torch.tensor([0, 3]), torch.tensor([3, 1]), [torch.tensor([[1, 2], [1, 3]])]
    finder = find_conflicts_torch.ExactConflictsTorch(2, [2], [2], 4, 5, "cpu", max_pairs=1)
    found = finder.find_conflicts(2, c, q, tables)
    assert bool(found.overflow)
    with pytest.raises(RuntimeError, match="over max_pairs"):
        found.to_numpy()
    roomy = find_conflicts_torch.ExactConflictsTorch(2, [2], [2], 4, 5, "cpu")
    assert roomy.find_conflicts(2, c, q, tables).to_numpy().tolist() == [[0, 1, 0, 1]]


@pytest.mark.gpu
def test_torch_conflicts_on_cuda_do_not_synchronise() -> None:
    step, _ = sample_realizable_step(np.random.default_rng(0), num_reqs=32, max_blocks_per_req=128, profile="prefill-heavy",
                                     num_groups=3)
    s = ref_step.check_step(*_args(step))
    finder = find_conflicts_torch.ExactConflictsTorch(s.num_reqs, [int(t.shape[1]) for t in s.block_tables],
                                                      list(s.block_sizes), 1 + max(int(t.max()) for t in s.block_tables),
                                                      1 << 14, "cuda")
    args = (s.num_reqs, torch.from_numpy(step.num_computed_tokens).cuda(), torch.from_numpy(step.num_scheduled_tokens).cuda(),
            [torch.from_numpy(t).cuda() for t in step.block_tables])
    tokens = int(s.num_scheduled_tokens.sum())
    finder.find_conflicts(*args, tokens)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        found = finder.find_conflicts(*args, tokens)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert _rows(found.to_numpy()) == ref_conflicts.find_conflicts(*_args(step))


@pytest.mark.gpu
def test_torch_decision_on_cuda_does_not_synchronise() -> None:
    step, _ = sample_realizable_step(np.random.default_rng(0), num_reqs=32, max_blocks_per_req=128, profile="mixed",
                                     num_groups=3)
    s = ref_step.check_step(*_args(step))
    check = exact_torch.ExactMicrobatchCheckTorch(s.num_reqs, [int(t.shape[1]) for t in s.block_tables], list(s.block_sizes),
                                                  1 + max(int(t.max()) for t in s.block_tables), 1 << 14, "cuda")
    args = (s.num_reqs, torch.from_numpy(step.num_computed_tokens).cuda(), torch.from_numpy(step.num_scheduled_tokens).cuda(),
            [torch.from_numpy(t).cuda() for t in step.block_tables])
    check(*args)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = check(*args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert bool(got) is ref_decision.allow_microbatching(*_args(step))


@pytest.mark.gpu
def test_cuda_graph_replays_are_exact_on_new_values_of_one_shape() -> None:
    """``CapturedStep`` captures once per shape and replays on the values
    copied in: a second step of the same shape (the block ids relabelled, the
    scheduled counts changed) gets its own answer, not the captured one."""
    from batchfuzz.impl._cuda_graph import CapturedStep

    step, _ = sample_realizable_step(np.random.default_rng(3), num_reqs=32, max_blocks_per_req=128, profile="prefill-heavy",
                                     num_groups=2)
    s = ref_step.check_step(*_args(step))
    top = max(int(t.max()) for t in s.block_tables)
    relabel = np.concatenate([[0], np.random.default_rng(4).permutation(np.arange(1, top + 1))]).astype(step.block_tables[0].dtype)
    other_c = step.num_computed_tokens.copy()
    other_c[::2] = 0  # every second request computed nothing: different reads, different conflicts
    other = (other_c, step.num_scheduled_tokens.copy(), [relabel[t] for t in step.block_tables], list(step.block_sizes))
    finder = find_conflicts_torch.ExactConflictsTorch(s.num_reqs, [int(t.shape[1]) for t in s.block_tables],
                                                      list(s.block_sizes), top + 1, 1 << 14, "cuda")
    graphed_find, graphed_decide = CapturedStep(finder.find_conflicts), CapturedStep(finder)
    tokens = int(s.num_scheduled_tokens.sum())
    results = []
    for c, q, tables, sizes in (_args(step), other, _args(step)):
        args = (s.num_reqs, torch.from_numpy(np.asarray(c)).cuda(), torch.from_numpy(np.asarray(q)).cuda(),
                [torch.from_numpy(np.ascontiguousarray(t)).cuda() for t in tables])
        got = _rows(graphed_find(*args, tokens).to_numpy())
        assert got == ref_conflicts.find_conflicts(c, q, tables, sizes)
        assert bool(graphed_decide(*args, tokens)) is ref_decision.allow_microbatching(c, q, tables, sizes)
        results.append(got)
    assert len(graphed_find._graphs) == 1 and results[0] != results[1]


# ---------------------------------------------------------------- the benchmark's shipped check


def shipped_copy_matches_variant(copy: Callable[..., bool]) -> Callable[[Any], None]:
    def prop(drawn: Any) -> None:
        step, thr = drawn
        s = ref_step.check_step(*_args(step))
        c, q = s.num_computed_tokens.astype(np.int32), s.num_scheduled_tokens.astype(np.int32)
        tables = [t.astype(np.int32) for t in s.block_tables]
        assert copy(s.num_reqs, c, q, tables, s.block_sizes, thr) is shipped_allow_microbatching(*_args(step), thr)

    return prop


SHIPPED_CASES = st.tuples(ANY_STEP, st.sampled_from((1, 1, 2, 4)))


@given(drawn=SHIPPED_CASES)
def test_benchmark_shipped_check_decides_as_the_registered_variant(drawn: Any) -> None:
    shipped_copy_matches_variant(microbench.shipped_check_as_engine)(drawn)


def test_shipped_copy_property_catches_decodes_counted_as_readers() -> None:
    def decodes_read(n: int, c: Any, q: Any, tables: Any, sizes: Any, thr: int) -> bool:
        return microbench.shipped_check_as_engine(n, c, q, tables, sizes, 0)

    _caught(shipped_copy_matches_variant(decodes_read), SHIPPED_CASES)


# ---------------------------------------------------------------- the benchmark


def test_microbench_runs_and_compares() -> None:
    def engine(step: Step, info: dict[str, Any]) -> Callable[[], bool]:
        args = (step.num_reqs, step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes,
                info["reorder_batch_threshold"])
        return lambda: microbench.shipped_check_as_engine(*args)

    report = microbench.run(["mixed/G2", "prefill-heavy/G1"], num_reqs=12, width=48, steps=2, repeat=2, oracle_steps=1,
                            engine=engine)
    assert report.mismatches == []
    assert report.columns == ["exact", "shipped", "find", "exact+validation", "engine"]
    for sc in report.scenarios:
        assert sc.samples == {col: 4 for col in report.columns}
        assert all(v > 0 for v in sc.medians.values())
        assert set(sc.ratios) == {"exact/shipped", "find/exact", "exact+validation/shipped", "engine/shipped", "exact/engine",
                                  "find/engine"}
        assert sc.steps[0]["decisions"]["oracle"] == sc.steps[0]["decisions"]["exact"]
        assert "oracle" not in sc.steps[1]["decisions"]
    text, md = report.to_text(), report.to_markdown()
    assert "mixed/G2" in text and "| mixed/G2 |" in md and "exact/shipped" in md
    assert report.to_dict()["scenarios"][0]["ratios"]["find/exact"] > 0


def test_microbench_reports_a_wrong_engine_function() -> None:
    def contrary(step: Step, info: dict[str, Any]) -> Callable[[], bool]:
        args = (step.num_reqs, step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes,
                info["reorder_batch_threshold"])
        return lambda: not microbench.shipped_check_as_engine(*args)

    report = microbench.run(["prefill-heavy/G1"], num_reqs=12, width=48, steps=1, repeat=1, oracle_steps=0,
                            validated=False, engine=contrary)
    assert len(report.mismatches) == 1 and "engine" in report.mismatches[0]
    assert "MISMATCH" in report.to_text() and "MISMATCH" in report.to_markdown()


def test_microbench_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="scenarios must be among"):
        microbench.run(["mixed/G4"])
    with pytest.raises(ValueError, match="repeat must be an int >= 1, got 0"):
        microbench.run(["mixed/G1"], repeat=0)


def test_bench_drop_in_cli_writes_json_and_markdown(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from batchfuzz.cli import main

    js, md = tmp_path / "r.json", tmp_path / "r.md"
    assert main(["bench", "--quick", "--scenarios", "mixed/G1", "--json", str(js), "--markdown", str(md)]) == 0
    assert "exact/shipped" in capsys.readouterr().out
    report = json.loads(js.read_text())
    assert report["mismatches"] == [] and report["scenarios"][0]["name"] == "mixed/G1"
    assert "| mixed/G1 |" in md.read_text()
