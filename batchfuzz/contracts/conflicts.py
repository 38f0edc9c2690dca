"""Contract E, part 1: the conflict set (SPEC.md, contract E, "Definitions").

Also the helpers contract E's two records share (``microbatching.py`` imports
them): reading a step from a case, normalising a target's conflict set, the
splits a case carries, and input-class labels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, require
from batchfuzz.codec import register_dataclass
from batchfuzz.registry import Contract, ErrorInput, Property, Target, Variant
from batchfuzz.variants import microbatch as bugs
from impl import conflicts_numpy, conflicts_torch
from impl.torch_common import to_numpy
from reference import conflicts as oracle
from reference.types import Step
from strategies.microbatch import step_cases

register_dataclass(Step)

ARG_NAMES = ("num_computed_tokens", "num_scheduled_tokens", "block_tables", "block_sizes")


# ---------------------------------------------------------------- shared helpers


def step_of(case: Case) -> Step:
    return oracle.check_step(*(case.args[k] for k in ARG_NAMES))


def call(target: Target, case: Case) -> Any:
    """Call the target positionally with the canonical arguments."""
    return target(*(case.args[k] for k in ARG_NAMES))


def conflict_set(value: Any) -> set[oracle.Conflict]:
    """A target's conflict set: any iterable of 4-tuples of ints, or a (K, 4)
    integer array or tensor (duplicates collapse: it is a set)."""
    value = to_numpy(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iu":
            raise PropertyViolation(f"find_conflicts must return integer tuples, got an array of dtype {value.dtype}")
        if value.size == 0:
            return set()
        if value.ndim != 2 or value.shape[1] != 4:
            raise PropertyViolation(f"find_conflicts returned an array of shape {value.shape}, expected (K, 4)")
        return {(int(a), int(b), int(c), int(d)) for a, b, c, d in value.tolist()}
    try:
        items = list(value)
    except TypeError:
        raise PropertyViolation(f"find_conflicts must return an iterable of (g, r, w, b), got {type(value).__name__}") from None
    out: set[oracle.Conflict] = set()
    for item in items:
        item = to_numpy(item)
        if isinstance(item, np.ndarray):
            item = item.tolist()
        if not (isinstance(item, (tuple, list)) and len(item) == 4
                and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in item)):
            raise PropertyViolation(f"each conflict must be a 4-tuple of ints (g, r, w, b), got {item!r}")
        out.add((int(item[0]), int(item[1]), int(item[2]), int(item[3])))
    return out


def splits_of(case: Case, step: Step) -> list[tuple[str, list[oracle.Range]]]:
    """The case's engine and adversarial splits, plus one two-ubatch split
    cutting after each reader's first token (``oracle.witness_splits``)."""
    out = [("engine", list(s)) for s in case.context.get("engine_splits", [])]
    out += [("adversarial", list(s)) for s in case.context.get("adversarial_splits", [])]
    out += [("reader cut", s) for s in oracle.witness_splits(step)]
    return out


def describe(v: oracle.Violation) -> str:
    return (f"request {v.reader} reads position {v.position} = slot (block {v.block}, offset {v.offset}) of group {v.group} "
            f"in ubatch {v.ubatch}, before request {v.writer} writes it")


def labels(case: Case) -> list[str]:
    """Input classes of a contract E case (for hypothesis.event statistics)."""
    step = step_of(case)
    source = case.context.get("source", "?")
    out = [f"source: {source}"]
    out += [f"{source}: {label}" for label in case.context.get("labels", [])]
    args = tuple(case.args[k] for k in ARG_NAMES)
    conflicts = oracle.find_conflicts(*args)
    out.append("conflict" if conflicts else "no conflict")
    exact = oracle.allow_microbatching(*args)
    if not exact:
        out.append("unsafe step (a reader before a writer)")
    c = step.num_computed_tokens.tolist()
    q = step.num_scheduled_tokens.tolist()
    if any(q[r] == 1 and c[r] > 0 for _g, r, _w, _b in conflicts):
        out.append("conflict read by a q == 1, c > 0 request")
    if any(q[r] > 0 and (t[r, : -(-c[r] // b)] == 0).any() for t, b in zip(step.block_tables, step.block_sizes, strict=True)
           for r in range(len(q)) if c[r] > 0):
        out.append("null block in a read prefix")
    if len(step.block_sizes) > 1:
        out.append("several groups")
    splits = [s for kind, s in splits_of(case, step) if kind != "reader cut"]
    starts = np.cumsum(q) - np.asarray(q, dtype=np.int64)
    ends = starts + np.asarray(q, dtype=np.int64)
    if any(((starts < ts) & (ts < ends)).any() for s in splits for ts, _ in s[1:]):
        out.append("straddling request")
    if any(oracle.harmful_conflicts(step, s) for s in splits):
        out.append("harmful conflict under a generated split")
    if oracle.self_overlaps(step):
        out.append("ill-formed: self-overlap")
    if oracle.multi_written_slots(step):
        out.append("ill-formed: slot written twice")
    shipped = bugs.shipped_allow_microbatching(*args)
    if shipped and not exact:
        out.append("shipped check unsound here")
    if exact and not shipped:
        out.append("shipped check vetoes a safe step")
    return out


def size(case: Case) -> tuple[int, ...]:
    q = np.asarray(case.args["num_scheduled_tokens"])
    return (int(q.shape[0]), int(q.sum()), len(case.args["block_sizes"]))


def _a(c: list[int], q: list[int], tables: list[list[list[int]]], sizes: list[int]) -> dict[str, Any]:
    """Canonical arguments from plain lists (for literals in this module)."""
    return {"num_computed_tokens": np.array(c, dtype=np.int64), "num_scheduled_tokens": np.array(q, dtype=np.int64),
            "block_tables": [np.array(t, dtype=np.int64).reshape(len(c), -1) for t in tables], "block_sizes": sizes}


def _k(c: list[int], q: list[int], tables: list[list[list[int]]], sizes: list[int]) -> dict[str, Any]:
    """A canonical counterexample as plain lists (the catalogue then leaves dtypes free)."""
    return {"num_computed_tokens": c, "num_scheduled_tokens": q, "block_tables": tables, "block_sizes": sizes}


def error_inputs() -> tuple[ErrorInput, ...]:
    """Bad steps; shared by both contract E records."""
    return (
        ErrorInput(_a([1, 0], [1], [[[1], [2]]], [2]), ValueError,
                   r"num_computed_tokens and num_scheduled_tokens must have one entry per request, got lengths 2 and 1"),
        ErrorInput(_a([-1], [1], [[[1]]], [2]), ValueError, r"num_computed_tokens\[0\] must be >= 0, got -1"),
        ErrorInput(_a([0], [1], [], []), ValueError, r"block_sizes must name at least one KV-cache group"),
        ErrorInput(_a([0], [1], [[[1]]], [0]), ValueError, r"block_sizes\[0\] must be >= 1, got 0"),
        ErrorInput(_a([0], [1], [[[1]]], [2, 2]), ValueError,
                   r"block_tables must have one table per group \(len\(block_sizes\) = 2\), got 1"),
        ErrorInput({**_a([0, 0], [1, 1], [[[1], [2]]], [2]), "block_tables": [np.array([[1]])]}, ValueError,
                   r"block_tables\[0\] must have one row per request \(2\), got 1 rows"),
        ErrorInput(_a([2], [3], [[[1, 2]]], [2]), ValueError,
                   r"block_tables\[0\] has 2 columns of block size 2 \(4 positions\), but request 0 needs c \+ q = 2 \+ 3 = 5"),
        ErrorInput(_a([0], [1], [[[-3]]], [2]), ValueError, r"block_tables\[0\]\[0, 0\] must be a block id >= 0, got -3"),
        ErrorInput({**_a([0], [1], [[[1]]], [2]), "num_computed_tokens": np.array([0.0])}, TypeError,
                   r"num_computed_tokens must have dtype int32 or int64, got float64"),
        ErrorInput({**_a([0], [1], [[[1]]], [2]), "block_tables": np.array([[[1]]])}, TypeError,
                   r"block_tables must be a list of 2-D arrays \(one per group\), got ndarray"),
        ErrorInput({**_a([0], [1], [[[1]]], [2]), "block_sizes": [2.0]}, TypeError, r"block_sizes\[0\] must be an int, got float 2.0"),
    )


# ---------------------------------------------------------------- properties


def _conflicts(target: Target, case: Case) -> set[oracle.Conflict]:
    return conflict_set(call(target, case))


def _fmt(items: set[oracle.Conflict], limit: int = 12) -> str:
    s = sorted(items)
    return repr(s[:limit])[:-1] + (f", ... ({len(s)} in all)]" if len(s) > limit else "]")


def _matches_oracle(target: Target, case: Case) -> None:
    got = _conflicts(target, case)
    expected = oracle.find_conflicts(*(case.args[k] for k in ARG_NAMES))
    if got != expected:
        raise PropertyViolation(f"conflict set differs from the oracle's (tuples are (group, reader, writer, block))\n"
                                f"  missing  {_fmt(expected - got)}\n  spurious {_fmt(got - expected)}")


def _tuple_ranges(target: Target, case: Case) -> None:
    step = step_of(case)
    num_groups, num_reqs = len(step.block_sizes), step.num_reqs
    for g, r, w, b in sorted(_conflicts(target, case)):
        require(0 <= g < num_groups and 0 <= r < num_reqs and 0 <= w < num_reqs,
                f"conflict {(g, r, w, b)} names a group or request that does not exist (G = {num_groups}, R = {num_reqs})")
        require(w != r, f"conflict {(g, r, w, b)} has writer == reader: conflicts need w != r")
        require(b != 0, f"conflict {(g, r, w, b)} is on the null block 0, which is never read nor written")


def _witness(step: Step, g: int, r: int, w: int, b: int) -> tuple[int, int] | None:
    """A computed position of r and a written position of w on one slot of b in group g, found directly."""
    size = step.block_sizes[g]
    table = step.block_tables[g]
    c, q = step.num_computed_tokens, step.num_scheduled_tokens
    if q[r] == 0:
        return None
    read = {int(p) % size: int(p) for p in range(int(c[r])) if table[r, p // size] == b}
    for p in range(int(c[w]), int(c[w] + q[w])):
        if table[w, p // size] == b and p % size in read:
            return read[p % size], p
    return None


def _no_spurious(target: Target, case: Case) -> None:
    step = step_of(case)
    num_groups, num_reqs = len(step.block_sizes), step.num_reqs
    for g, r, w, b in sorted(_conflicts(target, case)):
        ok = 0 <= g < num_groups and 0 <= r < num_reqs and 0 <= w < num_reqs and w != r and b != 0
        if not ok or _witness(step, g, r, w, b) is None:
            raise PropertyViolation(f"reported conflict {(g, r, w, b)} is not one: no computed position of request {r} "
                                    f"(a request with a scheduled token) shares a slot of block {b} in group {g} with a "
                                    f"position request {w} writes")


def _no_missing(target: Target, case: Case) -> None:
    got = _conflicts(target, case)
    missing = oracle.find_conflicts(*(case.args[k] for k in ARG_NAMES)) - got
    if missing:
        g, r, w, b = min(missing)
        pr, pw = _witness(step_of(case), g, r, w, b) or (-1, -1)
        raise PropertyViolation(f"missing conflicts {_fmt(missing)}; e.g. request {r}'s computed position {pr} and request "
                                f"{w}'s written position {pw} share a slot of block {b} in group {g}")


def _harmful_matches_simulation(target: Target, case: Case) -> None:
    step = step_of(case)
    got = _conflicts(target, case)
    well_formed = oracle.is_well_formed(step)
    for kind, split in splits_of(case, step):
        violations = oracle.simulate(step, split)
        seen = {(v.group, v.reader, v.writer, v.block) for v in violations if v.writer != v.reader}
        harmful = oracle.harmful_among(step, split, got)
        if seen - harmful:
            v = next(v for v in violations if (v.group, v.reader, v.writer, v.block) in seen - harmful)
            raise PropertyViolation(f"{kind} split {split}: the simulation finds a violation that no reported conflict "
                                    f"explains: {describe(v)}\n  harmful among the reported {_fmt(harmful)}")
        if well_formed and harmful - seen:
            raise PropertyViolation(f"{kind} split {split}: reported conflicts {_fmt(harmful - seen)} are harmful under it, "
                                    f"but the simulation sees no violation for them (step is well-formed)")


PROPERTIES = (
    Property("matches_oracle", "the conflict set, exactly (no more, no less)", _matches_oracle),
    Property("tuples_in_range", "every (g, r, w, b) has g < G, r, w < R, w != r, b != 0", _tuple_ranges),
    Property("no_spurious_conflicts", "every reported tuple has a shared slot (checked directly on the step)", _no_spurious),
    Property("no_missing_conflicts", "every conflict of the step is reported", _no_missing),
    Property("harmful_match_simulation", "under every split, the harmful reported conflicts are the simulation's violations "
             "(well-formed steps; in general every violation with w != r is one)", _harmful_matches_simulation),
)

IMPLEMENTATIONS = (
    registry.numpy_impl("numpy", conflicts_numpy.find_conflicts, "ragged positions, sort + searchsorted join, O(sum(c + q))"),
    registry.torch_impl("torch", conflicts_torch.bind_find_conflicts, "dense (R, W*B) grid per group, sort + searchsorted"),
)

VARIANTS = (
    Variant("first_group_only", "looks at KV-cache group 0 only", bugs.conflicts_first_group_only, "mutant",
            ("no_missing_conflicts", "matches_oracle", "harmful_match_simulation"), _k([0, 1], [1, 1], [[[0], [0]], [[1], [1]]], [2, 2])),
    Variant("block_level", "a shared block counts, whatever the offsets (block-level instead of slot-level)",
            bugs.conflicts_block_level, "mutant", ("no_spurious_conflicts", "matches_oracle"), _k([1, 2], [1, 1], [[[1], [1]]], [4])),
    Variant("with_self", "keeps w == r (a request reading a slot it writes itself)", bugs.conflicts_with_self, "mutant",
            ("tuples_in_range", "no_spurious_conflicts", "matches_oracle"), _k([0, 1], [0, 1], [[[0, 0], [1, 1]]], [1])),
    Variant("roles_swapped", "reports (g, writer, reader, b): reads and writes of the shared slot confused",
            bugs.conflicts_roles_swapped, "mutant", ("no_spurious_conflicts", "matches_oracle", "harmful_match_simulation"),
            _k([0, 1], [1, 1], [[[1], [1]]], [2])),
    Variant("null_block_counted", "treats the null block 0 as a real block", bugs.conflicts_with_null, "mutant",
            ("tuples_in_range", "no_spurious_conflicts", "matches_oracle"), _k([0, 1], [1, 1], [[[0], [0]]], [2])),
    Variant("idle_readers", "counts requests with no scheduled token (q == 0) as readers", bugs.conflicts_idle_readers,
            "mutant", ("no_spurious_conflicts", "matches_oracle"), _k([0, 1], [1, 0], [[[1], [1]]], [1])),
    Variant("last_computed_missed", "reads computed positions [0, c - 1): the last one is missed",
            bugs.conflicts_last_computed_missed, "mutant", ("no_missing_conflicts", "matches_oracle"),
            _k([0, 1], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("last_written_missed", "writes positions [c, c + q - 1): the last scheduled token's write is missed",
            bugs.conflicts_last_written_missed, "mutant", ("no_missing_conflicts", "matches_oracle"),
            _k([0, 1], [1, 1], [[[1, 0], [1, 0]]], [1])),
)

EXAMPLES = (
    # A decode-first batch: request 0 (q == 1, c == 1) reads block 1, which request 1 writes in this step.
    Case(_a([1, 0], [1, 1], [[[1, 2], [1, 0]]], [1]), {"source": "example"}),
    # Two groups of different block sizes; the conflict is in group 1 only, on a partly shared block.
    Case(_a([4, 0], [2, 4], [[[1, 2, 3], [4, 5, 0]], [[6, 7], [6, 0]]], [2, 4]), {"source": "example"}),
)

CONTRACT = registry.register(Contract(
    name="find_conflicts",
    title="Microbatch conflict set",
    spec_section="E1",
    signature="find_conflicts(num_computed_tokens, num_scheduled_tokens, block_tables: list[array], block_sizes: list[int]) "
              "-> iterable of (g, r, w, b)",
    oracle=oracle.find_conflicts,
    implementations=IMPLEMENTATIONS,
    strategy=step_cases,
    properties=PROPERTIES,
    error_inputs=error_inputs(),
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=labels,
    size=size,
    notes="Compared as sets of Python-int 4-tuples; a (K, 4) array or tensor is accepted. A reader is a request with "
          "q > 0 (a request without a token in the step reads nothing).",
))
