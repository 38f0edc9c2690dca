"""Contract E1: the conflict set (docs/contracts.md, contract E, "Definitions")."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz._host import to_host
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, ResultTypeError, require
from batchfuzz.codec import register_dataclass
from batchfuzz.contracts._inputs import inputs_unchanged
from batchfuzz.contracts._microbatch import call, describe, error_inputs, harmful_among, labels, splits_of, step_args, step_of
from batchfuzz.contracts.find_conflicts_variants import VARIANTS
from batchfuzz.impl import find_conflicts_numpy
from batchfuzz.reference import find_conflicts as oracle
from batchfuzz.reference._step import STEP_ARGUMENTS, Conflict, Step, is_well_formed
from batchfuzz.reference.allow_microbatching import simulate
from batchfuzz.registry import SAFETY, Contract, Property, Target
from batchfuzz.strategies import find_conflicts as strategies
from batchfuzz.strategies._steps import ENGINE_STEPS, ENGINE_STEPS_DESCRIPTION

register_dataclass(Step)


def conflict_set(value: Any) -> set[Conflict]:
    """A target's conflict set: any iterable of 4-tuples of ints, or a (K, 4)
    integer array or tensor (duplicates collapse: it is a set)."""
    value = to_host(value)
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
        raise ResultTypeError(f"find_conflicts must return an iterable of (g, r, w, b), got {type(value).__name__}") from None
    out: set[Conflict] = set()
    for item in items:
        item = to_host(item)
        if isinstance(item, np.ndarray):
            item = item.tolist()
        if not (isinstance(item, (tuple, list)) and len(item) == 4
                and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in item)):
            raise ResultTypeError(f"each conflict must be a 4-tuple of ints (g, r, w, b), got {item!r:.120}")
        out.add((int(item[0]), int(item[1]), int(item[2]), int(item[3])))
    return out


# ---------------------------------------------------------------- properties


def _conflicts(target: Target, case: Case) -> set[Conflict]:
    return conflict_set(call(target, case))


def _fmt(items: set[Conflict], limit: int = 12) -> str:
    s = sorted(items)
    return repr(s[:limit])[:-1] + (f", ... ({len(s)} in all)]" if len(s) > limit else "]")


def _matches_oracle(target: Target, case: Case) -> None:
    got = _conflicts(target, case)
    expected = oracle.find_conflicts(*(case.args[k] for k in STEP_ARGUMENTS))
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
    missing = oracle.find_conflicts(*(case.args[k] for k in STEP_ARGUMENTS)) - got
    if missing:
        g, r, w, b = min(missing)
        pr, pw = _witness(step_of(case), g, r, w, b) or (-1, -1)
        raise PropertyViolation(f"missing conflicts {_fmt(missing)}; e.g. request {r}'s computed position {pr} and request "
                                f"{w}'s written position {pw} share a slot of block {b} in group {g}")


def _harmful_matches_simulation(target: Target, case: Case) -> None:
    step = step_of(case)
    got = _conflicts(target, case)
    well_formed = is_well_formed(step)
    for kind, split in splits_of(case, step):
        violations = simulate(step, split)
        seen = {(v.group, v.reader, v.writer, v.block) for v in violations if v.writer != v.reader}
        harmful = harmful_among(step, split, got)
        if seen - harmful:
            v = next(v for v in violations if (v.group, v.reader, v.writer, v.block) in seen - harmful)
            raise PropertyViolation(f"{kind} split {split}: the simulation finds a violation that no reported conflict "
                                    f"explains: {describe(v)}\n  harmful among the reported {_fmt(harmful)}")
        if well_formed and harmful - seen:
            raise PropertyViolation(f"{kind} split {split}: reported conflicts {_fmt(harmful - seen)} are harmful under it, "
                                    f"but the simulation sees no violation for them (step is well-formed)")


PROPERTIES = (
    Property("matches_oracle", "the conflict set, exactly (no more, no less)", _matches_oracle, label=SAFETY),
    Property("tuples_in_range", "every (g, r, w, b) has g < G, r, w < R, w != r, b != 0", _tuple_ranges, label=SAFETY),
    Property("no_spurious_conflicts", "every reported tuple has a shared slot (checked directly on the step)", _no_spurious, label=SAFETY),
    Property("no_missing_conflicts", "every conflict of the step is reported", _no_missing, label=SAFETY),
    Property("harmful_match_simulation", "under every split, the harmful reported conflicts are the simulation's violations "
             "(well-formed steps; in general every violation with w != r is one)", _harmful_matches_simulation, label=SAFETY),
    inputs_unchanged(STEP_ARGUMENTS),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", find_conflicts_numpy.find_conflicts,
                       "block level: write records and whole-block reads, slot level only for partly written blocks"),
    registry.torch_impl("torch", "batchfuzz.impl._resident:conflicts",
                       "records sorted by block, read cells matched by searchsorted, pairs at fixed positions: no host sync "
                       "(fixed capacity, overflow reported; bind retries with room for all)"),
    dataclasses.replace(registry.torch_impl("torch.cudagraph", "batchfuzz.impl._resident:conflicts_graph",
                                            "the torch one replayed from a CUDA graph per padded step shape "
                                            "(impl._cuda_graph.CapturedStep; CUDA only)"), devices=("cuda",)),
)

INPUTS = registry.input_space(strategies, {
    "spec": "any valid step: general random tables (ill-formed ones too: the conflict set is defined on any step) and "
            "realizable steps",
    "engine": "the steps a prefix-caching scheduler produces (realizable steps, drawn through the scheduler model); "
              "membership checks well-formedness, the part of realizability a predicate can check",
    ENGINE_STEPS: ENGINE_STEPS_DESCRIPTION,
}, irreducible=("engine", ENGINE_STEPS))

EXAMPLES = (
    # A decode-first batch: request 0 (q == 1, c == 1) reads block 1, which request 1 writes in this step.
    Case(step_args([1, 0], [1, 1], [[[1, 2], [1, 0]]], [1]), {"source": "example"}),
    # Two groups of different block sizes; the conflict is in group 1 only, on a partly shared block.
    Case(step_args([4, 0], [2, 4], [[[1, 2, 3], [4, 5, 0]], [[6, 7], [6, 0]]], [2, 4]), {"source": "example"}),
)

CONTRACT = registry.register(Contract(
    name="find_conflicts",
    title="Microbatch conflict set",
    section="E1",
    signature="find_conflicts(num_computed_tokens, num_scheduled_tokens, block_tables: list[array], block_sizes: list[int]) "
              "-> iterable of (g, r, w, b)",
    arguments=STEP_ARGUMENTS,
    oracle=oracle.find_conflicts,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=error_inputs(),
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=labels,
    notes="Compared as sets of Python-int 4-tuples; a (K, 4) array or tensor is accepted. A reader is a request with "
          "q > 0 (a request without a token in the step reads nothing).",
))
