"""Contract E, part 2: the split-agnostic decision ``allow_microbatching``
(SPEC.md, contract E, "Decisions").

The failure criterion is soundness against the simulation: when a target
allows a step, no split the case carries (the engine's rule, adversarial cut
points, and a cut after every reader's first token) may have a violation.
Vetoing a safe step is sound, so a target that never allows passes; how
often a target vetoes safe steps is reported through ``scores`` (precision).

Steps are well-formed (general steps with repaired tables, and realizable
steps): on ill-formed steps (a request reading a slot it writes itself, a
slot written twice; no engine produces them) the simulation reports
violations that SPEC.md's conflicts do not explain, and a target built on
SPEC's definitions would be blamed for inputs outside the domain where those
definitions mean what SPEC says. ``find_conflicts`` keeps them (its answer is
well defined on any step); docs/microbatch.md discusses the edge.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, require
from batchfuzz.contracts.conflicts import ARG_NAMES, _a, _k, call, describe, error_inputs, labels, size, splits_of, step_of
from batchfuzz.registry import Contract, Property, Target, Variant
from batchfuzz.variants import microbatch as bugs
from impl import conflicts_numpy, conflicts_torch
from impl.torch_common import to_numpy
from reference import conflicts as oracle
from strategies.microbatch import step_cases


def well_formed_step_cases() -> Any:
    """General (repaired) and realizable steps only: see the module docstring."""
    return step_cases(raw=False)


def decision(value: Any) -> bool:
    """A target's answer: a bool, a numpy bool or a one-element bool array/tensor."""
    value = to_numpy(value)
    if isinstance(value, np.ndarray):
        if value.dtype != np.bool_ or value.size != 1:
            raise PropertyViolation(f"allow_microbatching must return a bool, got an array of dtype {value.dtype} "
                                    f"and shape {value.shape}")
        return bool(value.reshape(-1)[0])
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise PropertyViolation(f"allow_microbatching must return a bool, got {type(value).__name__} {value!r:.120}")


def _returns_bool(target: Target, case: Case) -> None:
    decision(call(target, case))


def _sound(kinds: tuple[str, ...]) -> Any:
    def check(target: Target, case: Case) -> None:
        if not decision(call(target, case)):
            return  # a veto is always sound
        step = step_of(case)
        for kind, split in splits_of(case, step):
            if kind not in kinds:
                continue
            violations = oracle.simulate(step, split)
            require(not violations,
                    f"allowed, but the {kind} split {split} reads unwritten KV: {describe(violations[0]) if violations else ''}"
                    f"{f' (and {len(violations) - 1} more)' if len(violations) > 1 else ''}")

    return check


PROPERTIES = (
    Property("returns_bool", "the answer is a bool", _returns_bool),
    Property("sound_under_engine_splits", "if it allows, the engine's token-rule split has no violation", _sound(("engine",))),
    Property("sound_under_adversarial_splits", "if it allows, no consecutive split (arbitrary cut points, a cut after each "
             "reader's first token) has a violation", _sound(("adversarial", "reader cut"))),
)


def _scores(target: Target, case: Case) -> dict[str, int]:
    """Precision bookkeeping (never a failure): how many safe steps the target vetoes."""
    args = tuple(case.args[k] for k in ARG_NAMES)
    safe = oracle.allow_microbatching(*args)
    allowed = decision(call(target, case))
    return {"steps": 1, "safe_steps": int(safe), "allowed_steps": int(allowed), "vetoed_safe_steps": int(safe and not allowed)}


IMPLEMENTATIONS = (
    registry.numpy_impl("numpy", conflicts_numpy.allow_microbatching, "exact rule: earliest write per slot, searchsorted"),
    registry.torch_impl("torch", conflicts_torch.bind_allow_microbatching,
                        "exact rule on a dense (R, W*B) grid; no host sync until the result"),
)

_SOUND = ("sound_under_adversarial_splits",)
VARIANTS = (
    Variant("no_check", "no check at all: every step is split (the engine before the fix)",
            bugs.no_check_allow_microbatching, "shipped", _SOUND + ("sound_under_engine_splits",),
            _k([1, 0], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("shipped_check", "vLLM's check since 0.28 as SPEC.md describes it: readers need q > 1 and c > 0, whole blocks "
            "only, written columns include nulls", bugs.shipped_allow_microbatching, "shipped", _SOUND,
            # Realizable (docs/microbatch.md): two identical 3-token prompts; request 1 fills block 1 in this
            # step, request 0 hits it (c == 2), recomputes its last token (q == 1) and is moved to the front as
            # a decode. Shrinking over all steps reaches a smaller, unrealizable one (two requests writing one block).
            _k([2, 0], [1, 3], [[[1, 3], [1, 2]]], [2])),
    Variant("first_group_only", "exact rule over KV-cache group 0 only", bugs.allow_first_group_only, "mutant", _SOUND,
            _k([1, 1], [1, 4], [[[0], [0]], [[1, 0], [0, 1]]], [8, 4])),
    Variant("whole_blocks_only", "exact rule, but a reader's partly computed block is ignored",
            bugs.allow_whole_blocks_only, "mutant", _SOUND, _k([1, 0], [1, 1], [[[1], [1]]], [2])),
    Variant("order_reversed", "vetoes when the writer comes before the reader: reads and writes of the shared slot confused",
            bugs.allow_order_reversed, "mutant", _SOUND, _k([1, 0], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("last_computed_missed", "exact rule over computed positions [0, c - 1)", bugs.allow_last_computed_missed,
            "mutant", _SOUND, _k([1, 0], [1, 1], [[[1, 0], [1, 0]]], [1])),
    Variant("skip_decode_readers", "exact rule, but q == 1 requests are not readers (the shipped reader filter alone)",
            bugs.allow_skip_decode_readers, "mutant", _SOUND, _k([1, 0], [1, 1], [[[1], [1]]], [2])),
    Variant("floor_written_columns", "written columns [c // B, (c + q) // B): floor for ceil, a partly written last block "
            "missed", bugs.allow_floor_written_columns, "mutant", _SOUND, _k([1, 0], [1, 1], [[[1], [1]]], [2])),
    Variant("returns_conflicts", "returns the list of unsafe conflicts instead of a bool",
            bugs.allow_returns_conflicts, "mutant", ("returns_bool",), _k([0, 0], [0, 0], [[[], []]], [1])),
)

EXAMPLES = (
    # Decodes first: request 0 (q == 1, c == 1) hits block 1, which request 1 writes in this step.
    Case(_a([1, 0], [1, 1], [[[1, 2], [1, 0]]], [1]), {"source": "example", "adversarial_splits": [[(0, 1), (1, 2)]]}),
    # A null in reader 1's prefix and a null written column of request 0: safe, but the shipped check vetoes it.
    Case(_a([0, 2], [2, 2], [[[0, 0], [0, 3]]], [2]), {"source": "example"}),
)

CONTRACT = registry.register(Contract(
    name="allow_microbatching",
    title="Microbatch decision (split-agnostic)",
    spec_section="E2",
    signature="allow_microbatching(num_computed_tokens, num_scheduled_tokens, block_tables: list[array], "
              "block_sizes: list[int]) -> bool",
    oracle=oracle.allow_microbatching,
    implementations=IMPLEMENTATIONS,
    strategy=well_formed_step_cases,
    properties=PROPERTIES,
    error_inputs=error_inputs(),
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=labels,
    size=size,
    scores=_scores,
    notes="Failure = allowing a step that some consecutive split breaks (the simulation judges). Vetoing a safe step "
          "is sound; scores count it (vetoed_safe_steps / safe_steps = lost overlap).",
))
