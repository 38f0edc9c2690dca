"""What the two contract E records share: reading a step from a case, the
splits a case is judged under, the derived rules their properties use, the
engine's shipped check (our own words), input-class labels and error inputs.

Derived rules, each proven in its docstring and tested against the
simulation (tests/test_microbatch_theory.py), never assumed:

- :func:`unsafe_conflicts`: the conflicts whose reader's first token comes
  before the writer's token (the split-agnostic harm condition);
- :func:`witness_splits`: if any consecutive split has a violation, one of
  the two-ubatch splits cutting right after a reader's first token has;
- :func:`harmful_among`: which members of a *target's* conflict set are
  harmful under a split, found from the step itself.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchfuzz.case import Case
from batchfuzz.reference._step import (
    STEP_ARGUMENTS,
    Conflict,
    PlainStep,
    Range,
    Step,
    as_step,
    check_split,
    check_step,
    cuts_to_split,
    plain,
    reads,
    ubatch_of_tokens,
    writer_tokens,
    writes,
)
from batchfuzz.reference.allow_microbatching import Violation
from batchfuzz.registry import ErrorInput


def step_of(case: Case) -> Step:
    return check_step(*(case.args[k] for k in STEP_ARGUMENTS))


def call(target: Any, case: Case) -> Any:
    """Call the target positionally with the canonical arguments."""
    return target(*(case.args[k] for k in STEP_ARGUMENTS))


def step_args(c: list[int], q: list[int], tables: list[list[list[int]]], sizes: list[int]) -> dict[str, Any]:
    """Canonical arguments from plain lists (int64 arrays)."""
    return {"num_computed_tokens": np.array(c, dtype=np.int64), "num_scheduled_tokens": np.array(q, dtype=np.int64),
            "block_tables": [np.array(t, dtype=np.int64).reshape(len(c), -1) for t in tables], "block_sizes": sizes}


def step_lists(c: list[int], q: list[int], tables: list[list[list[int]]], sizes: list[int]) -> dict[str, Any]:
    """A canonical counterexample as plain lists (the catalogue then leaves dtypes free)."""
    return {"num_computed_tokens": c, "num_scheduled_tokens": q, "block_tables": tables, "block_sizes": sizes}


def unsafe_conflicts(step: Any) -> set[Conflict]:
    """Conflicts with the reader's first token strictly before the writer's
    token that writes the shared slot (the split-agnostic harm condition)."""
    s = plain(as_step(step))
    writers = writer_tokens(s)
    out: set[Conflict] = set()
    for g, r, _p, b, o in reads(s):
        for w, t in writers.get((g, b, o), {}).items():
            if w != r and s.start[r] < t:
                out.add((g, r, w, b))
    return out


def witness_splits(step: Any) -> list[list[Range]]:
    """Two-ubatch splits cutting right after each reader's first token.

    If any consecutive split has a violation, one of these has (see
    ``allow_microbatching``); properties use them as extra adversarial splits.
    """
    s = plain(as_step(step))
    total = s.num_tokens
    cuts = sorted({s.start[r] + 1 for r in range(s.num_reqs) if s.q[r] > 0 and s.start[r] + 1 < total})
    return [cuts_to_split([cut], total) for cut in cuts]


def harmful_among(step: Any, split: Any, conflicts: Iterable[Conflict]) -> set[Conflict]:
    """The members of ``conflicts`` that are harmful under ``split``.

    For each tuple the shared slots are found from the step itself (a tuple
    with none, i.e. no conflict at all, is never harmful), so a property can
    judge a target's conflict set against the simulation.
    """
    s = plain(as_step(step))
    ranges = check_split(split, s.num_tokens)
    ub = ubatch_of_tokens(ranges, s.num_tokens)
    writers = writer_tokens(s)
    read_slots: set[tuple[int, int, int, int]] = {(g, r, b, o) for g, r, _p, b, o in reads(s)}
    out: set[Conflict] = set()
    for g, r, w, b in conflicts:
        if w == r or not (0 <= r < s.num_reqs) or s.q[r] == 0:
            continue
        first_ub = ub[s.start[r]]
        for o in range(s.sizes[g] if 0 <= g < len(s.sizes) else 0):
            t = writers.get((g, b, o), {}).get(w)
            if t is not None and (g, r, b, o) in read_slots and first_ub < ub[t]:
                out.add((g, r, w, b))
                break
    return out



# ---------------------------------------------------------------- the engine's shipped check
#
# Two forms of one check, side by side so that they cannot drift apart:
# - shipped_allow_microbatching: plain loops over a validated step, each line
#   a sentence of docs/contracts.md ("What the engine ships"). It is the
#   registered variant ``shipped`` (the contract's properties judge it) and the
#   reference the vectorised form is checked against.
# - shipped_vectorised: numpy, written to cost what the engine's own code costs
#   (one dense gather per group, np.unique, np.isin per reader), for the benches
#   that compare the exact check's time with the shipped check's. Unvalidated,
#   as the engine's is. tests/test_exact_microbatch.py checks that the two
#   decide alike.


def shipped_allow_microbatching(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any,
                                block_sizes: Any, reorder_batch_threshold: int = 1) -> bool:
    """The engine's shipped check (vLLM since 0.28), as docs/contracts.md describes it.

    Readers are the requests with ``q > reorder_batch_threshold`` and ``c > 0``;
    a reader reads only its whole blocks, columns ``[0, c // B)``; written are
    the columns ``[c // B, ceil((c + q) / B))`` of every request, null entries
    included; the split is vetoed when a reader's whole block is in its
    group's written set, in any group.
    """
    return _shipped_on(plain(check_step(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes)),
                       reorder_batch_threshold)


def _shipped_on(s: PlainStep, reorder_batch_threshold: int = 1) -> bool:
    """:func:`shipped_allow_microbatching` on a validated, plain step."""
    c, q, tables, sizes, _ = s
    for g, size in enumerate(sizes):
        table = tables[g]
        written: set[int] = set()
        for r in range(len(c)):
            for col in range(c[r] // size, -(-(c[r] + q[r]) // size)):
                written.add(table[r][col])
        for r in range(len(c)):
            if q[r] > reorder_batch_threshold and c[r] > 0:
                for col in range(c[r] // size):
                    if table[r][col] in written:
                        return False
    return True


def shipped_vectorised(num_reqs: int, num_computed_tokens: np.ndarray, num_scheduled_tokens: np.ndarray,
                       block_tables: Sequence[np.ndarray], block_sizes: Sequence[int],
                       reorder_batch_threshold: int = 1) -> bool:
    """The check vLLM ships since 0.28 (``GPUModelRunner._allow_microbatching``
    in ``vllm/v1/worker/gpu_model_runner.py``), written to cost what it costs there.

    Readers: rows with ``q > reorder_batch_threshold`` and ``c > 0``. Per
    group, the written ids are the unique values of every row's columns
    ``[c // B, ceil((c + q) / B))``, gathered through one dense ``rows x
    (largest span)`` grid, null ids included; then, reader by reader, its
    whole blocks (columns ``[0, c // B)``) are looked up in them with
    ``np.isin`` and the first hit vetoes. The engine also answers True
    without looking when ``num_reqs < 2``; that guard is left out here so that
    this function decides exactly as the registered variant
    ``shipped_allow_microbatching`` on every step (they differ only on a
    one-request step whose row repeats a block id).
    """
    c = num_computed_tokens[:num_reqs]
    q = num_scheduled_tokens[:num_reqs]
    readers = np.flatnonzero((q > reorder_batch_threshold) & (c > 0))
    if readers.size == 0:
        return True
    for table, size in zip(block_tables, block_sizes, strict=True):
        lo = c // size
        hi = (c + q + size - 1) // size
        grid = lo[:, None] + np.arange(int((hi - lo).max()))[None, :]
        ids = np.take_along_axis(table[:num_reqs], np.minimum(grid, table.shape[1] - 1), axis=1)
        written = np.unique(ids[grid < hi[:, None]])
        for r in readers:
            if np.isin(table[r, : c[r] // size], written).any():
                return False
    return True


# ---------------------------------------------------------------- report



def splits_of(case: Case, step: Step) -> list[tuple[str, list[Range]]]:
    """The case's engine and adversarial splits, plus one two-ubatch split
    cutting after each reader's first token (``witness_splits``)."""
    out = [("engine", list(s)) for s in case.context.get("engine_splits", [])]
    out += [("adversarial", list(s)) for s in case.context.get("adversarial_splits", [])]
    out += [("reader cut", s) for s in witness_splits(step)]
    return out


def describe(v: Violation) -> str:
    return (f"request {v.reader} reads position {v.position} = slot (block {v.block}, offset {v.offset}) of group {v.group} "
            f"in ubatch {v.ubatch}, before request {v.writer} writes it")


@dataclass
class _Scan:
    """One pass over a step's writes and reads: what ``labels`` reports."""

    conflicts: set[Conflict] = field(default_factory=set)
    pairs: set[tuple[int, int]] = field(default_factory=set)  # (reader's first token, a writer's token) per conflict
    exact: bool = True  # no slot's first write comes after a reader's first token
    self_overlap: bool = False
    written_twice: bool = False


def _scan(s: Any) -> _Scan:
    scan = _Scan()
    writers: dict[tuple[int, int, int], dict[int, int]] = {}  # slot -> {writer: its earliest token there}
    for g, w, _p, b, o, t in writes(s):
        per = writers.setdefault((g, b, o), {})
        if per:
            scan.written_twice = True
        if w not in per or t < per[w]:
            per[w] = t
    for g, r, _p, b, o in reads(s):
        by_writer = writers.get((g, b, o))
        if not by_writer:
            continue
        if min(by_writer.values()) > s.start[r]:
            scan.exact = False  # the slot's first write comes after the reader's first token
        for w, t in by_writer.items():
            if w == r:
                scan.self_overlap = True
            else:
                scan.conflicts.add((g, r, w, b))
                scan.pairs.add((s.start[r], t))
    return scan


def labels(case: Case) -> list[str]:
    """Input classes of a contract E case (for hypothesis.event statistics).

    The same classes the oracles define (conflicts, the exact decision,
    self-overlaps, slots written twice, harmful conflicts under the case's
    generated splits, the shipped check's answer), computed from one
    validation of the step and one pass over its writes and reads: the fuzz
    job records labels on every example, so they must cost less than a
    property (each oracle called on its own would validate and walk the
    step again)."""
    step = step_of(case)
    s = plain(step)
    source = case.context.get("source", "?")
    out = [f"source: {source}"]
    out += [f"{source}: {label}" for label in case.context.get("labels", [])]
    scan = _scan(s)
    out.append("conflict" if scan.conflicts else "no conflict")
    if not scan.exact:
        out.append("unsafe step (a reader before a writer)")
    c, q = s.c, s.q
    if any(q[r] == 1 and c[r] > 0 for _g, r, _w, _b in scan.conflicts):
        out.append("conflict read by a q == 1, c > 0 request")
    readers = (step.num_scheduled_tokens > 0) & (step.num_computed_tokens > 0)
    for t, b in zip(step.block_tables, step.block_sizes, strict=True):
        prefix = np.arange(t.shape[1])[None, :] < (-(-step.num_computed_tokens // b))[:, None]
        if ((t == 0) & prefix)[readers].any():
            out.append("null block in a read prefix")
            break
    if len(step.block_sizes) > 1:
        out.append("several groups")
    out += _split_labels(case, s, step, scan.pairs)
    if scan.self_overlap:
        out.append("ill-formed: self-overlap")
    if scan.written_twice:
        out.append("ill-formed: slot written twice")
    shipped = _shipped_on(s)
    if shipped and not scan.exact:
        out.append("shipped check unsound here")
    if scan.exact and not shipped:
        out.append("shipped check vetoes a safe step")
    return out


def _split_labels(case: Case, s: Any, step: Any, pairs: set[tuple[int, int]]) -> list[str]:
    """The labels of the case's generated splits: one that cuts a request, one under which a conflict harms."""
    out = []
    splits = [check_split(list(sp), s.num_tokens) for sp in (*case.context.get("engine_splits", []),
                                                           *case.context.get("adversarial_splits", []))]
    starts = np.asarray(s.start, dtype=np.int64)
    ends = starts + step.num_scheduled_tokens
    if any(((starts < ts) & (ts < ends)).any() for sp in splits for ts, _ in sp[1:]):
        out.append("straddling request")
    if pairs and any(_ubatch(sp, first) < _ubatch(sp, t) for sp in splits for first, t in pairs):
        out.append("harmful conflict under a generated split")
    return out


def _ubatch(ranges: list[Range], token: int) -> int:
    """The ubatch of a real token under a split (consecutive ranges from 0)."""
    return bisect.bisect_right([te for _ts, te in ranges], token)


def error_inputs() -> tuple[ErrorInput, ...]:
    """Bad steps; shared by both contract E records."""
    return (
        ErrorInput(step_args([1, 0], [1], [[[1], [2]]], [2]), ValueError,
                   r"num_computed_tokens and num_scheduled_tokens must have one entry per request, got lengths 2 and 1"),
        ErrorInput(step_args([-1], [1], [[[1]]], [2]), ValueError, r"num_computed_tokens\[0\] must be >= 0, got -1"),
        ErrorInput(step_args([0], [1], [], []), ValueError, r"block_sizes must name at least one KV-cache group"),
        ErrorInput(step_args([0], [1], [[[1]]], [0]), ValueError, r"block_sizes\[0\] must be >= 1, got 0"),
        ErrorInput(step_args([0], [1], [[[1]]], [2, 2]), ValueError,
                   r"block_tables must have one table per group \(len\(block_sizes\) = 2\), got 1"),
        ErrorInput({**step_args([0, 0], [1, 1], [[[1], [2]]], [2]), "block_tables": [np.array([[1]])]}, ValueError,
                   r"block_tables\[0\] must have one row per request \(2\), got 1 rows"),
        ErrorInput(step_args([2], [3], [[[1, 2]]], [2]), ValueError,
                   r"block_tables\[0\] has 2 columns of block size 2 \(4 positions\), but request 0 needs c \+ q = 2 \+ 3 = 5"),
        ErrorInput(step_args([0], [1], [[[-3]]], [2]), ValueError, r"block_tables\[0\]\[0, 0\] must be a block id >= 0, got -3"),
        ErrorInput({**step_args([0], [1], [[[1]]], [2]), "num_computed_tokens": np.array([0.0])}, TypeError,
                   r"num_computed_tokens must have dtype int32 or int64, got float64"),
        ErrorInput({**step_args([0], [1], [[[1]]], [2]), "block_tables": np.array([[[1]]])}, TypeError,
                   r"block_tables must be a list of 2-D arrays \(one per group\), got ndarray"),
        ErrorInput({**step_args([0], [1], [[[1]]], [2]), "block_sizes": [2.0]}, TypeError,
                   r"block_sizes\[0\] must be an int, got float 2.0"),
    )

