"""The block-level exact microbatching check (impl/allow_microbatching_numpy.py,
impl/allow_microbatching_torch.py) and its benchmark (batchfuzz/bench/microbench.py).

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
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from batchfuzz.bench import microbench
from batchfuzz.contracts._microbatch import shipped_allow_microbatching, shipped_vectorised
from batchfuzz.impl import allow_microbatching_numpy as exact
from batchfuzz.impl import find_conflicts_numpy
from batchfuzz.reference import _step as ref_step
from batchfuzz.reference import allow_microbatching as ref_decision
from batchfuzz.reference import find_conflicts as ref_conflicts
from batchfuzz.reference._step import Step
from batchfuzz.strategies._steps import general_steps, realizable_steps_for_ci
from batchfuzz.workloads import sample_realizable_step
from tests._lazy import LazyModule

torch = LazyModule("torch")
exact_torch = LazyModule("batchfuzz.impl.allow_microbatching_torch")
find_conflicts_torch = LazyModule("batchfuzz.impl.find_conflicts_torch")
_torch_helpers = LazyModule("tests._torch_helpers")  # the torch-mode guard and the buggy torch checkers

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


def _geometry(step: Step) -> tuple[list[int], list[int], int]:
    """A checker's ``widths, block_sizes, num_blocks`` for one validated step (ids up to its largest)."""
    top = max((int(t.max(initial=0)) for t in step.block_tables), default=0)
    return [int(t.shape[1]) for t in step.block_tables], list(step.block_sizes), top + 1


def _checker(step: Step, cls: type[exact.ExactMicrobatchCheck] = exact.ExactMicrobatchCheck) -> exact.ExactMicrobatchCheck:
    return cls(step.num_reqs, *_geometry(step))


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


@given(step=ANY_STEP)
def test_checker_for_keys_past_one_int64_equals_the_oracle(step: Step) -> None:
    """A checker built for 2**31 requests needs more than 63 bits per
    conflict key (``g | r | w | b``), so it sorts the conflicts as rows:
    the same set, sorted and unique, on both paths."""
    s = ref_step.check_step(*_args(step))
    for cls in (exact.ExactMicrobatchCheck, GeneralOnly):
        check = cls(1 << 31, *_geometry(s))
        got = check.find_conflicts(s.num_reqs, s.num_computed_tokens, s.num_scheduled_tokens, s.block_tables)
        assert _rows(got) == ref_conflicts.find_conflicts(*_args(step))
        assert got.dtype == np.int64 and got.shape[1] == 4
        assert [tuple(r) for r in got.tolist()] == sorted(set(map(tuple, got.tolist())))


@pytest.mark.parametrize("max_num_reqs, num_blocks, fits", [
    # a conflict's writer and block are packed into bits(max_num_reqs - 1) + bits(num_blocks - 1) bits (each at least
    # 1), at most 62
    (1 << 61, 2, True),  # 61 + 1
    (1 << 61, 3, False),  # 61 + 2
    ((1 << 61) + 1, 2, False),  # 62 + 1
    (1 << 62, 2, False),  # 62 + 1
])
def test_checker_refuses_exactly_the_keys_past_62_bits(max_num_reqs: int, num_blocks: int, fits: bool) -> None:
    if fits:
        exact.ExactMicrobatchCheck(max_num_reqs, [1], [1], num_blocks)
    else:
        _raises(ValueError, f"max_num_reqs ({max_num_reqs}) and num_blocks ({num_blocks}) need more than 62 bits together",
                exact.ExactMicrobatchCheck, max_num_reqs, [1], [1], num_blocks)


@pytest.mark.parametrize("max_num_reqs", [1 << 29, 1 << 30])
def test_checker_with_a_third_group_at_the_edge_of_one_int64(max_num_reqs: int) -> None:
    """Three groups, 4 blocks: a key ``g | r | w | b`` needs 2 + 2 * 29 + 2 = 62
    bits for 2**29 requests (one int64) and 64 for 2**30 (rows); group 2's
    conflict comes out right either way."""
    c, q, sizes = np.array([1, 0]), np.array([1, 1]), [1, 1, 1]
    tables = [np.array([[1, 2], [3, 0]]), np.array([[1, 2], [3, 0]]), np.array([[1, 2], [1, 0]])]
    check = exact.ExactMicrobatchCheck(max_num_reqs, [2, 2, 2], sizes, 4)
    assert ref_conflicts.find_conflicts(c, q, tables, sizes) == {(2, 0, 1, 1)}
    assert check.find_conflicts(2, c, q, tables).tolist() == [[2, 0, 1, 1]]


def test_checker_marks_past_31_bits() -> None:
    """2**16 blocks and a writer at row 40000: its mark ``w << 16 | b`` needs
    32 bits. Request 0 reads block 5 (block size 1) before request 40000
    writes it; every block has one writer, so the fast path answers."""
    n = 40001
    c, q = np.zeros(n, np.int64), np.zeros(n, np.int64)
    c[0], q[0], q[-1] = 1, 1, 1
    table = np.zeros((n, 2), np.int64)
    table[0], table[-1, 0] = [5, 6], 5
    check = exact.ExactMicrobatchCheck(1 << 16, [2], [1], 1 << 16)
    assert check.find_conflicts(n, c, q, [table]).tolist() == [[0, 0, n - 1, 5]]
    assert check.last_paths == ("fast",)  # one writer per block (U'): the marks hold it
    assert check(n, c, q, [table]) is False
    assert ref_conflicts.find_conflicts(c, q, [table], [1]) == {(0, 0, n - 1, 5)}


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
    assert fine.last_paths == () and fine.path_counts == {}  # no call yet
    assert fine(2, np.array([2, 0]), np.array([0, 1]), [np.array([[1], [0]])]) is True
    assert fine.last_paths == ("fast",)
    assert fine.find_conflicts(2, np.array([2, 0]), np.array([0, 1]), [np.array([[1], [0]])]).shape == (0, 4)
    assert fine.last_paths == ("fast",) and fine.path_counts == {"fast": 2}


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
            assert not check._mark.any()  # scratch left clean for the next call
            assert _rows(check.find_conflicts(n, c, q, tables)) == ref_conflicts.find_conflicts(*args)
            assert not check._mark.any()

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


def _raises(exc: type[Exception], message: str, call: Callable[..., Any], *args: Any) -> None:
    """``call(*args)`` raises ``exc`` with exactly ``message`` (bad input gets a clear error naming the argument and value)."""
    with pytest.raises(exc) as info:
        call(*args)
    assert str(info.value) == message


def test_checker_rejects_bad_shapes_and_ids() -> None:
    check = exact.ExactMicrobatchCheck(2, [3], [4], 10)
    c, q, t = np.zeros(2, np.int32), np.ones(2, np.int32), [np.zeros((2, 3), np.int32)]
    for method in (check, check.find_conflicts):
        _raises(ValueError, "num_reqs must be <= max_num_reqs (2), got 3", method, 3, c, q, t)
        _raises(ValueError, "num_reqs must be >= 0, got -1", method, -1, c, q, t)
        _raises(TypeError, "num_reqs must be an int, got float 2.0", method, 2.0, c, q, t)
        _raises(TypeError, "num_computed_tokens must be a 1-D int32/int64 numpy array, got list", method, 2, [0, 0], q, t)
        _raises(TypeError, "num_scheduled_tokens must have dtype int32 or int64, got float64",
                method, 2, c, q.astype(float), t)
        _raises(ValueError, "num_scheduled_tokens must be 1-D, got shape (2, 1)",
                method, 2, c, q[:, None], t)
        _raises(ValueError, "num_computed_tokens must have at least num_reqs (2) entries, got 1", method, 2, c[:1], q, t)
        _raises(ValueError, "num_scheduled_tokens must have at least num_reqs (2) entries, got 1", method, 2, c, q[:1], t)
        _raises(TypeError, "block_tables must be a list of 1 tables, got array of dtype int32 and shape (2, 3)",
                method, 2, c, q, t[0])
        _raises(TypeError, "block_tables must be a list of 1 tables, got list", method, 2, c, q, t + t)
        _raises(TypeError, "block_tables[0] must have dtype int32 or int64, got float64",
                method, 2, c, q, [t[0].astype(float)])
        _raises(TypeError, "block_tables[0] must be a 2-D int32/int64 numpy array, got list", method, 2, c, q, [[[0] * 3] * 2])
        _raises(ValueError, "block_tables[0] must be 2-D, got shape (3,)",
                method, 2, c, q, [np.zeros(3, np.int32)])
        _raises(ValueError, "block_tables[0] must have shape (>= 2, 3), got (2, 4)", method, 2, c, q, [np.zeros((2, 4), np.int32)])
        _raises(ValueError, "block_tables[0] must have shape (>= 2, 3), got (1, 3)", method, 2, c, q, [np.zeros((1, 3), np.int32)])
        _raises(ValueError, "block_tables[0] must be C-contiguous (the engine's tables are)",
                method, 2, c, q, [np.zeros((3, 2), np.int32).T[:, :3].copy(order="F")])
        # an id past num_blocks, written (request 0 writes column 0) or read (request 0 reads column 0 whole)
        _raises(ValueError, "block_tables hold block id 12, but num_blocks is 10",
                method, 2, c, q, [np.array([[12, 0, 0], [0, 0, 0]], np.int32)])
        _raises(ValueError, "block_tables hold block id 11, but num_blocks is 10",
                method, 2, np.array([4, 0]), q, [np.array([[11, 2, 0], [0, 0, 0]], np.int32)])
        assert not check._mark.any()
    _raises(ValueError, "num_blocks must be >= 1, got 0", exact.ExactMicrobatchCheck, 2, [3], [4], 0)
    _raises(ValueError, "max_num_reqs must be >= 0, got -1", exact.ExactMicrobatchCheck, -1, [3], [4], 5)
    _raises(ValueError, "widths[1] must be >= 0, got -1", exact.ExactMicrobatchCheck, 2, [3, -1], [4, 4], 5)
    _raises(ValueError, "block_sizes[1] must be >= 1, got 0", exact.ExactMicrobatchCheck, 2, [3, 3], [4, 0], 5)
    _raises(TypeError, "widths and block_sizes must be lists of ints, got int and list", exact.ExactMicrobatchCheck, 2, 3, [4], 5)
    _raises(TypeError, "widths and block_sizes must be lists of ints, got list and int", exact.ExactMicrobatchCheck, 2, [3], 4, 5)
    _raises(ValueError, "widths and block_sizes must name the same groups (at least one), got [3, 3] and [4]",
            exact.ExactMicrobatchCheck, 2, [3, 3], [4], 5)
    _raises(ValueError, "widths and block_sizes must name the same groups (at least one), got [] and []",
            exact.ExactMicrobatchCheck, 2, [], [], 5)
    _raises(ValueError, f"max_num_reqs ({1 << 40}) and num_blocks ({1 << 40}) need more than 62 bits together",
            exact.ExactMicrobatchCheck, 1 << 40, [3], [4], 1 << 40)


def test_torch_checkers_reject_bad_arguments() -> None:
    T = exact_torch.ExactMicrobatchCheckTorch
    finder = find_conflicts_torch.ExactConflictsTorch(2, [3], [4], 10, 5)
    c, q, t = torch.zeros(2, dtype=torch.int32), torch.ones(2, dtype=torch.int64), [torch.zeros((2, 3), dtype=torch.int32)]
    for method in (T(2, [3], [4], 10, 5), finder, finder.find_conflicts):
        _raises(ValueError, "num_reqs must be <= max_num_reqs (2), got 3", method, 3, c, q, t)
        _raises(ValueError, "num_reqs must be >= 0, got -1", method, -1, c, q, t)
        _raises(ValueError, "num_tokens must be <= max_num_tokens (5), got 6", method, 2, c, q, t, 6)
        _raises(ValueError, "num_tokens must be >= 0, got -1", method, 2, c, q, t, -1)
        _raises(TypeError, "num_tokens must be an int, got float 5.0", method, 2, c, q, t, 5.0)
        _raises(TypeError, "num_computed_tokens must be a 1-D int32/int64 torch tensor, got list",
                method, 2, [0, 0], q, t)
        _raises(TypeError, "num_scheduled_tokens must have dtype int32 or int64, got torch.float32", method, 2, c, q.float(), t)
        _raises(ValueError, "num_computed_tokens must have at least num_reqs (2) entries, got 1", method, 2, c[:1], q, t)
        _raises(ValueError, "num_scheduled_tokens must be 1-D, got shape (2, 1)", method, 2, c, q[:, None], t)
        _raises(ValueError, "num_computed_tokens must be on cpu, got meta", method, 2, c.to("meta"), q, t)
        _raises(ValueError, "num_scheduled_tokens must be on cpu, got meta", method, 2, c, q.to("meta"), t)
        _raises(TypeError, "block_tables must be a list of 1 tables, got tensor of dtype torch.int32 and shape (2, 3)",
                method, 2, c, q, t[0])
        _raises(TypeError, "block_tables must be a list of 1 tables, got list", method, 2, c, q, t + t)
        _raises(TypeError, "block_tables[0] must have dtype int32 or int64, got torch.float32",
                method, 2, c, q, [t[0].float()])
        _raises(TypeError, "block_tables[0] must be a 2-D int32/int64 torch tensor, got list", method, 2, c, q, [[[0] * 3] * 2])
        _raises(ValueError, "block_tables[0] must be 2-D, got shape (3,)",
                method, 2, c, q, [t[0][0]])
        _raises(ValueError, "block_tables[0] must have shape (>= 2, 3), got (1, 3)",
                method, 2, c, q, [torch.zeros((1, 3), dtype=torch.int32)])
        _raises(ValueError, "block_tables[0] must have shape (>= 2, 3), got (2, 4)",
                method, 2, c, q, [torch.zeros((2, 4), dtype=torch.int32)])
        _raises(ValueError, "block_tables[0] must be on cpu, got meta",
                method, 2, c, q, [t[0].to("meta")])
    for cls in (T, find_conflicts_torch.ExactConflictsTorch):
        _raises(ValueError, "max_num_reqs must be >= 0, got -1", cls, -1, [3], [4], 10, 5)
        _raises(TypeError, "widths and block_sizes must be lists of ints, got int and list", cls, 2, 3, [4], 10, 5)
        _raises(TypeError, "widths and block_sizes must be lists of ints, got list and int", cls, 2, [3], 4, 10, 5)
        _raises(ValueError, "widths and block_sizes must name the same groups (at least one), got [3, 3] and [4]",
                cls, 2, [3, 3], [4], 10, 5)
        _raises(ValueError, "widths and block_sizes must name the same groups (at least one), got [] and []",
                cls, 2, [], [], 10, 5)
        _raises(ValueError, "widths[1] must be >= 0, got -1", cls, 2, [3, -1], [4, 4], 10, 5)
        _raises(ValueError, "block_sizes[1] must be >= 1, got 0", cls, 2, [3, 3], [4, 0], 10, 5)
        _raises(ValueError, "num_blocks must be >= 1, got 0", cls, 2, [3], [4], 0, 5)
        _raises(ValueError, "max_num_tokens must be >= 0, got -1", cls, 2, [3], [4], 10, -1)
    _raises(ValueError, "max_pairs must be >= 1, got 0", find_conflicts_torch.ExactConflictsTorch, 2, [3], [4], 10, 5, "cpu", 0)
    _raises(TypeError, "max_pairs must be an int, got float 1.5",
            find_conflicts_torch.ExactConflictsTorch, 2, [3], [4], 10, 5, "cpu", 1.5)


# ---------------------------------------------------------------- torch: exact, no host reads


def test_guard_catches_host_reads_and_mask_indexing() -> None:
    x = torch.arange(4)
    with _torch_helpers.ForbidHostReadsOrMasks(), pytest.raises(AssertionError, match="host read"):
        x.sum().item()
    with _torch_helpers.ForbidHostReadsOrMasks(), pytest.raises(AssertionError, match="boolean-mask"):
        x[x > 1]


def torch_decision_is_exact_and_sync_free(check_cls: type[exact_torch.ExactMicrobatchCheckTorch]) -> Callable[[Step], None]:
    def prop(step: Step) -> None:
        s = ref_step.check_step(*_args(step))
        check = check_cls(s.num_reqs, *_geometry(s), int(s.num_scheduled_tokens.sum()) + 3)  # spare token capacity, as an engine has
        c, q = torch.from_numpy(s.num_computed_tokens.astype(np.int32)), torch.from_numpy(s.num_scheduled_tokens)
        tables = [torch.from_numpy(t.astype(np.int32)) for t in s.block_tables]
        with _torch_helpers.ForbidHostReadsOrMasks():
            got = check(s.num_reqs, c, q, tables)
        assert got.shape == () and got.dtype == torch.bool
        assert bool(got) is ref_decision.allow_microbatching(*_args(step))

    return prop


@given(step=ANY_STEP)
def test_torch_decision_is_exact_without_host_reads(step: Step) -> None:
    torch_decision_is_exact_and_sync_free(exact_torch.ExactMicrobatchCheckTorch)(step)


def test_torch_property_catches_a_host_read() -> None:
    _caught(torch_decision_is_exact_and_sync_free(_torch_helpers.HostReading))


@given(step=ANY_STEP)
def test_torch_binders_equal_the_oracles(step: Step) -> None:
    assert exact_torch.bind("cpu")(*_args(step)) is ref_decision.allow_microbatching(*_args(step))
    found = find_conflicts_torch.bind("cpu")(*_args(step))
    assert _rows(found) == ref_conflicts.find_conflicts(*_args(step))


def _candidate_pairs(step: Step) -> int:
    """Plain loops: the candidate pairs of the torch conflict set (``DeviceConflicts.num_pairs``): per
    reader (``q > 0``) and group, every non-null block it reads (its columns below ``c // B``, and column
    ``c // B`` when ``c % B > 0``), once per write record of that block, its own records included."""
    total = 0
    for table, size, records in zip(step.block_tables, step.block_sizes, _records_per_block(step), strict=True):
        for r, (c, q) in enumerate(zip(step.num_computed_tokens.tolist(), step.num_scheduled_tokens.tolist(), strict=True)):
            if q > 0:
                read = range(c // size + (1 if c % size else 0))
                total += sum(records.get(int(table[r][col]), 0) for col in read)
    return total


def torch_conflicts_are_exact_and_sync_free(cls: type[find_conflicts_torch.ExactConflictsTorch],
                                            max_pairs: int = 4096) -> Callable[[Step], None]:
    """The torch conflict set, inputs as the engine has them (int32), computed
    under ``ForbidHostReadsOrMasks`` (tests/_torch_helpers.py): sorted unique rows equal to the oracle's, ``-1``
    past ``count``, ``num_pairs`` the candidate pairs (``_candidate_pairs``), and
    ``overflow`` exactly when the pairs did not fit."""

    def prop(step: Step) -> None:
        s = ref_step.check_step(*_args(step))
        finder = cls(s.num_reqs, *_geometry(s), int(s.num_scheduled_tokens.sum()) + 3, "cpu", max_pairs)
        c, q = torch.from_numpy(s.num_computed_tokens.astype(np.int32)), torch.from_numpy(s.num_scheduled_tokens)
        tables = [torch.from_numpy(t.astype(np.int32)) for t in s.block_tables]
        with _torch_helpers.ForbidHostReadsOrMasks():
            found = finder.find_conflicts(s.num_reqs, c, q, tables)
        assert found.rows.shape == (max_pairs, 4) and found.num_conflicts.shape == found.num_pairs.shape == ()
        assert found.rows.dtype == found.num_conflicts.dtype == found.num_pairs.dtype == torch.int64
        assert int(found.num_pairs) == _candidate_pairs(s)
        expected = sorted(ref_conflicts.find_conflicts(*_args(step)))
        if bool(found.overflow):  # then room for the pairs it counted must be enough, and give the same count
            roomy = cls(s.num_reqs, *_geometry(s), int(s.num_scheduled_tokens.sum()) + 3, "cpu", int(found.num_pairs))
            again = roomy.find_conflicts(s.num_reqs, c, q, tables)
            assert int(again.num_pairs) == int(found.num_pairs) > max_pairs and not bool(again.overflow)
            found = again
        count = int(found.num_conflicts)
        assert [tuple(r) for r in found.rows[:count].tolist()] == expected
        assert bool((found.rows[count:] == -1).all())

    return prop


@given(step=ANY_STEP)
def test_torch_conflicts_are_exact_without_host_reads(step: Step) -> None:
    torch_conflicts_are_exact_and_sync_free(find_conflicts_torch.ExactConflictsTorch)(step)


@given(step=ANY_STEP)
def test_torch_conflicts_flag_an_overflow(step: Step) -> None:
    """With room for 2 pairs only, the result is exact or flagged as overflowing."""
    torch_conflicts_are_exact_and_sync_free(find_conflicts_torch.ExactConflictsTorch, max_pairs=2)(step)


def test_torch_conflict_properties_catch_buggy_variants() -> None:
    _caught(torch_conflicts_are_exact_and_sync_free(_torch_helpers.CapacityBlind, max_pairs=2))
    _caught(torch_conflicts_are_exact_and_sync_free(_torch_helpers.OwnPairsKept))


def test_torch_conflicts_to_numpy_refuses_an_incomplete_set() -> None:
    # request 1 reads block 1 (written by request 0) and offset 0 of block 3, which it writes itself: two pairs
    c, q, tables = torch.tensor([0, 3]), torch.tensor([3, 1]), [torch.tensor([[1, 2], [1, 3]])]
    finder = find_conflicts_torch.ExactConflictsTorch(2, [2], [2], 4, 5, "cpu", max_pairs=1)
    found = finder.find_conflicts(2, c, q, tables)
    assert bool(found.overflow)
    _raises(RuntimeError, "the step has 2 candidate pairs, over max_pairs (1): the conflict set is incomplete", found.to_numpy)
    roomy = find_conflicts_torch.ExactConflictsTorch(2, [2], [2], 4, 5, "cpu")
    assert roomy.find_conflicts(2, c, q, tables).to_numpy().tolist() == [[0, 1, 0, 1]]


def test_torch_checkers_with_no_requests() -> None:
    """``num_reqs == 0`` reads nothing: the decision is a 0-d bool True and the
    conflict set empty (``-1`` rows, int64 counts of 0), on the checker's device."""
    for device in ("cpu", "meta"):
        c, q = torch.ones(2, dtype=torch.int32, device=device), torch.ones(2, dtype=torch.int32, device=device)
        tables = [torch.ones((2, 2), dtype=torch.int32, device=device)]
        for check in (exact_torch.ExactMicrobatchCheckTorch(2, [2], [2], 4, 5, device),
                      find_conflicts_torch.ExactConflictsTorch(2, [2], [2], 4, 5, device, max_pairs=3)):
            got = check(0, c, q, tables)
            assert (got.shape, got.dtype, got.device) == ((), torch.bool, check.device)
            if device == "cpu":
                assert bool(got) is True
        found = check.find_conflicts(0, c, q, tables)
        for t, shape in ((found.rows, (3, 4)), (found.num_conflicts, ()), (found.num_pairs, ())):
            assert (t.shape, t.dtype, t.device) == (shape, torch.int64, check.device)
        if device == "cpu":
            assert found.rows.tolist() == [[-1] * 4] * 3 and int(found.num_conflicts) == int(found.num_pairs) == 0


def test_torch_checkers_compute_on_their_device() -> None:
    """The checkers compute on the device they are built for and ``checker_for``
    puts the step's arguments there; the binders compute on the device they
    name. Shown on "meta" (shapes without values): every result is a meta
    tensor, and a binder cannot read its answer back from there."""
    step = ref_step.check_step(np.array([2, 0]), np.array([1, 2]), [np.array([[1, 2], [3, 4]])], [2])
    for checker_for in (exact_torch.checker_for, find_conflicts_torch.checker_for):
        check, args = checker_for(step, "meta")
        assert check.device.type == "meta"
        assert all(a.device.type == "meta" for a in (args[1], args[2], *args[3]))
        assert check(*args).device.type == "meta"
    finder = find_conflicts_torch.ExactConflictsTorch(2, [2], [2], 5, 3, "meta", max_pairs=4)
    assert finder.device.type == "meta"
    assert all(t.device.type == "meta" for t in finder.find_conflicts(*args))
    for bind in (exact_torch.bind, find_conflicts_torch.bind):
        with pytest.raises(RuntimeError, match="meta tensors"):
            bind("meta")(*_args(step))
    assert find_conflicts_torch.ExactConflictsTorch(2, [2], [2], 5, 3).device == torch.device("cpu")  # the default


@pytest.mark.parametrize("max_num_reqs, groups, num_blocks, fits", [
    # the key of a conflict packs (g * n + r, w, b) into bits(G * R - 1) + bits(R - 1) + bits(num_blocks - 1)
    # bits (each at least 1), which must stay within 62: the sentinel int64 max is never a key. Built on "meta"
    # (no memory): sizes at the limit, each field the one that crosses it
    (1 << 20, 1, 1 << 22, True),  # 20 + 20 + 22 bits
    (1 << 20, 1, (1 << 22) + 1, False),  # one block more: 20 + 20 + 23
    ((1 << 20) + 1, 1, (1 << 20) + 1, False),  # 21 + 21 + 21 (G * R - 1 a power of two)
    (1 << 30, 2, 2, True),  # 31 + 30 + 1
    (1 << 30, 3, 2, False),  # one group more: 32 + 30 + 1
    (2, 1, (1 << 59) + 1, True),  # 1 + 1 + 60: two requests take one bit per field
])
def test_torch_conflict_keys_fit_exactly_at_the_limit(max_num_reqs: int, groups: int, num_blocks: int, fits: bool) -> None:
    def build() -> find_conflicts_torch.ExactConflictsTorch:
        return find_conflicts_torch.ExactConflictsTorch(max_num_reqs, [0] * groups, [1] * groups, num_blocks, 0, "meta", max_pairs=1)

    if fits:
        build()
    else:
        _raises(ValueError, f"max_num_reqs ({max_num_reqs}), num_blocks ({num_blocks}) and {groups} groups do not fit one int64 key "
                "per conflict", build)


def test_torch_conflict_finder_for_a_step_at_the_key_limit() -> None:
    """``checker_for`` sizes the finder to the step: 2**20 requests and block
    ids up to 2**22 - 1 need exactly 62 key bits and get a finder; one id more
    does not fit (on "meta": no memory)."""
    n = 1 << 20
    table = np.zeros((n, 1), np.int64)
    table[0, 0] = (1 << 22) - 1
    step = ref_step.check_step(np.zeros(n, np.int64), np.zeros(n, np.int64), [table], [1])
    find_conflicts_torch.checker_for(step, "meta")
    step.block_tables[0][0, 0] = 1 << 22
    _raises(ValueError, f"max_num_reqs ({n}), num_blocks ({(1 << 22) + 1}) and 1 groups do not fit one int64 key per conflict",
            find_conflicts_torch.checker_for, step, "meta")


def test_torch_conflict_binder_makes_room_for_every_pair() -> None:
    """Two requests each reading 160 positions of block 1 (block size 1) and
    writing 160 more into it: 320 read cells x 320 write records = 102400
    candidate pairs, more than a finder's default capacity; the binder still
    returns the whole set (its retry has room for all the pairs)."""
    c, q, tables = np.array([160, 160]), np.array([160, 160]), [np.ones((2, 320), np.int64)]
    step = ref_step.check_step(c, q, tables, [1])
    assert _candidate_pairs(step) == 102400 > find_conflicts_torch.DEFAULT_MAX_PAIRS
    assert _rows(find_conflicts_torch.bind("cpu")(c, q, tables, [1])) == ref_conflicts.find_conflicts(c, q, tables, [1]) == {
        (0, 0, 1, 1), (0, 1, 0, 1)}


# ---------------------------------------------------------------- hand-made steps, every exact implementation


def every_exact_implementation_agrees(step: Step) -> None:
    """The decision and the conflict set of every exact implementation equal
    the oracles': the canonical numpy functions, the numpy checker (engine
    path and forced general path), the torch checkers with spare token
    capacity, and the torch binders."""
    decision, conflicts = ref_decision.allow_microbatching(*_args(step)), ref_conflicts.find_conflicts(*_args(step))
    assert exact.allow_microbatching(*_args(step)) is decision
    assert _rows(find_conflicts_numpy.find_conflicts(*_args(step))) == conflicts
    for cls in (exact.ExactMicrobatchCheck, GeneralOnly):
        decision_is_exact(cls)(step)
        conflicts_are_exact(cls)(step)
    torch_decision_is_exact_and_sync_free(exact_torch.ExactMicrobatchCheckTorch)(step)
    torch_decision_is_exact_and_sync_free(find_conflicts_torch.ExactConflictsTorch)(step)  # the inherited decision
    torch_conflicts_are_exact_and_sync_free(find_conflicts_torch.ExactConflictsTorch)(step)
    assert exact_torch.bind("cpu")(*_args(step)) is decision
    assert _rows(find_conflicts_torch.bind("cpu")(*_args(step))) == conflicts


HAND_MADE_STEPS = [
    # (c, q, block_tables, block_sizes), each guarding against one bug
    # one request re-writing block 5, which it reads (a self-overlap): a single request is not trivially safe
    ([2], [2], [[[5, 5]]], [2]),
    # writes to the null block are discarded: they must not land in a real slot (here the last one, block 5's offset 1)
    ([0, 2, 1], [1, 1, 1], [[[0, 0], [5, 0], [5, 0]]], [2]),
    # a request with q == 0 reads nothing, not even its partly computed block (block 1, written later by request 3)
    ([0, 2, 0, 1], [1, 0, 1, 1], [[[7], [1], [8], [1]]], [4]),
    # the checker's spare token capacity (tokens past sum(q)) writes nothing
    ([2, 1], [1, 1], [[[1, 2], [3, 1]]], [2]),
    # one request, no column, no token, and only the spare token capacity: nothing to read or write
    ([0], [0], [[[]]], [1]),
    # two groups (block sizes 2 and 1, widths 2 and 3): only group 1 has a conflict (request 0 reads block 5, which
    # request 1 writes later); each group's columns, blocks and slots stay apart in a combined table
    ([2, 0], [1, 2], [[[1, 2], [3, 0]], [[4, 5, 6], [5, 7, 0]]], [2, 1]),
    # the same block id in two groups names two different blocks: block 2 of group 0, written first (token 0), is not
    # block 2 of group 1, which request 0 reads before request 1 writes it
    ([1, 0], [1, 1], [[[1, 2], [5, 0]], [[2, 4], [2, 0]]], [1, 1]),
    # a second group without columns (nothing scheduled), spare token capacity only
    ([0], [0], [[[5]], [[]]], [1, 1]),
]


@pytest.mark.parametrize("c, q, tables, sizes", HAND_MADE_STEPS)
def test_every_exact_implementation_on_hand_made_steps(c: list[int], q: list[int], tables: list[Any], sizes: list[int]) -> None:
    every_exact_implementation_agrees(ref_step.check_step(np.array(c), np.array(q), [np.array(t, np.int64) for t in tables], sizes))


@pytest.mark.gpu
def test_torch_conflicts_on_cuda_do_not_synchronise() -> None:
    step, _ = sample_realizable_step(np.random.default_rng(0), num_reqs=32, max_blocks_per_req=128, profile="prefill-heavy",
                                     num_groups=3)
    s = ref_step.check_step(*_args(step))
    finder = find_conflicts_torch.ExactConflictsTorch(s.num_reqs, *_geometry(s), 1 << 14, "cuda")
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
    check = exact_torch.ExactMicrobatchCheckTorch(s.num_reqs, *_geometry(s), 1 << 14, "cuda")
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
    shipped_copy_matches_variant(shipped_vectorised)(drawn)


def test_shipped_copy_property_catches_decodes_counted_as_readers() -> None:
    def decodes_read(n: int, c: Any, q: Any, tables: Any, sizes: Any, thr: int) -> bool:
        return shipped_vectorised(n, c, q, tables, sizes, 0)

    _caught(shipped_copy_matches_variant(decodes_read), SHIPPED_CASES)


# ---------------------------------------------------------------- the benchmark


def test_microbench_runs_and_compares() -> None:
    def engine(step: Step, info: dict[str, Any]) -> Callable[[], bool]:
        args = (step.num_reqs, step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes,
                info["reorder_batch_threshold"])
        return lambda: shipped_vectorised(*args)

    options = microbench.MicrobenchOptions(num_reqs=12, width=48, steps=2, repeat=2, oracle_steps=1)
    report = microbench.run(["mixed/G2", "prefill-heavy/G1"], options, engine=engine)
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
        return lambda: not shipped_vectorised(*args)

    options = microbench.MicrobenchOptions(num_reqs=12, width=48, steps=1, repeat=1, oracle_steps=0, validated=False)
    report = microbench.run(["prefill-heavy/G1"], options, engine=contrary)
    assert len(report.mismatches) == 1 and "engine" in report.mismatches[0]
    assert "MISMATCH" in report.to_text() and "MISMATCH" in report.to_markdown()


def test_microbench_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="scenarios must be among"):
        microbench.run(["mixed/G4"])
    with pytest.raises(ValueError, match="repeat must be an int >= 1, got 0"):
        microbench.MicrobenchOptions(repeat=0)


def test_bench_drop_in_cli_writes_json_and_markdown(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from batchfuzz.cli import main

    js, md = tmp_path / "r.json", tmp_path / "r.md"
    assert main(["bench", "--quick", "--scenarios", "mixed/G1", "--json", str(js), "--markdown", str(md)]) == 0
    assert "exact/shipped" in capsys.readouterr().out
    report = json.loads(js.read_text())
    assert report["mismatches"] == [] and report["scenarios"][0]["name"] == "mixed/G1"
    assert "| mixed/G1 |" in md.read_text()
