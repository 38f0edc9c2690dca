"""Contract E, part 2: the split-agnostic decision ``allow_microbatching``
(docs/contracts.md, contract E, "Decisions").

The failure criterion is soundness against the simulation: when a target
allows a step, no split the case carries (the engine's rule, adversarial cut
points, and a cut after every reader's first token) may have a violation.
Vetoing a safe step is sound, so a target that never allows passes; how
often a target vetoes safe steps is reported through ``scores`` (precision).

Steps are well-formed (general steps with repaired tables, and realizable
steps): on ill-formed steps (a request reading a slot it writes itself, a
slot written twice; no engine produces them) the simulation reports
violations that the contract's conflicts do not explain, and a target built
on the definitions would be blamed for inputs outside the domain where those
definitions mean what they say. ``find_conflicts`` keeps them (its answer is
well defined on any step); docs/microbatch.md discusses the edge.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz._host import to_host
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, ResultTypeError, require
from batchfuzz.contracts._inputs import inputs_unchanged
from batchfuzz.contracts._microbatch import call, describe, error_inputs, labels, splits_of, step_args, step_of
from batchfuzz.contracts.allow_microbatching_variants import VARIANTS
from batchfuzz.impl import allow_microbatching_numpy
from batchfuzz.reference import allow_microbatching as oracle
from batchfuzz.reference._step import STEP_ARGUMENTS
from batchfuzz.registry import SAFETY, Contract, Property, Target
from batchfuzz.strategies import allow_microbatching as strategies
from batchfuzz.strategies._steps import ENGINE_STEPS, ENGINE_STEPS_DESCRIPTION


def decision(value: Any) -> bool:
    """A target's answer: a bool, a numpy bool or a one-element bool array/tensor."""
    value = to_host(value)
    if isinstance(value, np.ndarray):
        if value.dtype != np.bool_ or value.size != 1:
            raise PropertyViolation(f"allow_microbatching must return a bool, got an array of dtype {value.dtype} "
                                    f"and shape {value.shape}")
        return bool(value.reshape(-1)[0])
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ResultTypeError(f"allow_microbatching must return a bool, got {type(value).__name__} {value!r:.120}")


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
    Property("returns_bool", "the answer is a bool", _returns_bool, label=SAFETY),
    Property("sound_under_engine_splits", "if it allows, the engine's token-rule split has no violation", _sound(("engine",)),
             label=SAFETY),
    Property("sound_under_adversarial_splits", "if it allows, no consecutive split (arbitrary cut points, a cut after each "
             "reader's first token) has a violation", _sound(("adversarial", "reader cut")), label=SAFETY),
    inputs_unchanged(STEP_ARGUMENTS),
)


def _scores(target: Target, case: Case) -> dict[str, int]:
    """Precision bookkeeping (never a failure): how many safe steps the target vetoes."""
    args = tuple(case.args[k] for k in STEP_ARGUMENTS)
    safe = oracle.allow_microbatching(*args)
    allowed = decision(call(target, case))
    return {"steps": 1, "safe_steps": int(safe), "allowed_steps": int(allowed), "vetoed_safe_steps": int(safe and not allowed)}


IMPLEMENTATIONS = (
    registry.host_impl("numpy", allow_microbatching_numpy.allow_microbatching,
                       "ExactMicrobatchCheck: block level, a fast path under one write record per block, a general path otherwise"),
    registry.torch_impl("torch", "batchfuzz.impl._resident:decision",
                       "ExactMicrobatchCheckTorch: scatter_reduce over all groups at once; no host sync until the result"),
    dataclasses.replace(registry.torch_impl("torch.cudagraph", "batchfuzz.impl._resident:decision_graph",
                                            "the torch one replayed from a CUDA graph per padded step shape "
                                            "(impl._cuda_graph.CapturedStep; CUDA only)"), devices=("cuda",)),
)

INPUTS = registry.input_space(strategies, {
    "spec": "well-formed steps: general random tables (repaired) and realizable steps (ill-formed steps are outside the "
            "domain where the definitions mean what they say)",
    "engine": "the steps a prefix-caching scheduler produces (realizable steps, drawn through the scheduler model); "
              "membership checks well-formedness, the part of realizability a predicate can check",
    ENGINE_STEPS: ENGINE_STEPS_DESCRIPTION,
}, irreducible=("engine", ENGINE_STEPS))

EXAMPLES = (
    # Decodes first: request 0 (q == 1, c == 1) hits block 1, which request 1 writes in this step.
    Case(step_args([1, 0], [1, 1], [[[1, 2], [1, 0]]], [1]), {"source": "example", "adversarial_splits": [[(0, 1), (1, 2)]]}),
    # A null in reader 1's prefix and a null written column of request 0: safe, but the shipped check vetoes it.
    Case(step_args([0, 2], [2, 2], [[[0, 0], [0, 3]]], [2]), {"source": "example"}),
)

CONTRACT = registry.register(Contract(
    name="allow_microbatching",
    title="Microbatch decision (split-agnostic)",
    section="E2",
    signature="allow_microbatching(num_computed_tokens, num_scheduled_tokens, block_tables: list[array], "
              "block_sizes: list[int]) -> bool",
    arguments=STEP_ARGUMENTS,
    oracle=oracle.allow_microbatching,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=error_inputs(),
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=labels,
    scores=_scores,
    notes="Failure = allowing a step that some consecutive split breaks (the simulation judges). Vetoing a safe step "
          "is sound; scores count it (vetoed_safe_steps / safe_steps = lost overlap).",
))
