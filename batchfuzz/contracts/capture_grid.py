"""Contract O: the CUDA-graph capture grid (docs/contracts.md, contract O)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import ResultTypeError, require
from batchfuzz.contracts.capture_grid_variants import VARIANTS
from batchfuzz.impl import capture_grid_numpy
from batchfuzz.reference import capture_grid as oracle
from batchfuzz.reference._args import ceil_div
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import capture_grid as strategies

ARGUMENTS = oracle.ARGUMENTS
CEILING = oracle.CEILING


def _grid(target: Target, case: Case) -> tuple[list[int], tuple[int, int, int, int, bool]]:
    """The target's sizes as Python ints, and the case's ``(S, B, q, tp, sp)``."""
    got = target(*(case.args[k] for k in ARGUMENTS))
    if isinstance(got, np.ndarray) or hasattr(got, "tolist"):
        got = got.tolist()
    if not isinstance(got, (list, tuple)):
        raise ResultTypeError(f"capture_grid must return a sequence of ints, got {type(got).__name__} {got!r:.120}")
    for v in got:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ResultTypeError(f"capture sizes must be ints, got {type(v).__name__} {v!r:.60}")
    return [int(v) for v in got], tuple(case.args[k] for k in ARGUMENTS)


def _ascending(target: Target, case: Case) -> None:
    sizes, _ = _grid(target, case)
    bad = next((i for i in range(1, len(sizes)) if sizes[i] <= sizes[i - 1]), None)
    require(bad is None, f"sizes not strictly ascending at index {bad}: {sizes[max(0, (bad or 1) - 1):(bad or 0) + 1]} "
                         f"(of {len(sizes)}: {sizes!r:.200})")


def _positive(target: Target, case: Case) -> None:
    sizes, _ = _grid(target, case)
    require(all(v >= 1 for v in sizes), f"a captured size below 1: {[v for v in sizes if v < 1]}")


def _within_budget(target: Target, case: Case) -> None:
    sizes, (_s, b, *_rest) = _grid(target, case)
    over = [v for v in sizes if v > b]
    require(not over, f"sizes {over} above max_num_batched_tokens = {b}: no step has that many tokens, and the "
                      "runner's token buffers are sized to the budget")


def _multiples(target: Target, case: Case) -> None:
    sizes, (_s, _b, _q, t, sp) = _grid(target, case)
    u = oracle.unit(t, sp)
    odd = [v for v in sizes if v % u]
    require(not odd, f"under sequence parallelism over tp_size = {t}, sizes {odd} are not multiples of {t}")


def _cap(b: int, u: int) -> int:
    return min(b, CEILING) // u * u


def _non_empty(target: Target, case: Case) -> None:
    sizes, (s, b, q, t, sp) = _grid(target, case)
    u = oracle.unit(t, sp)
    require(bool(sizes) or _cap(b, u) < u, f"no size captured, though {u} tokens fit within min(max_num_batched_tokens "
                                           f"= {b}, {CEILING}); max_num_seqs = {s}, q = {q}")


def _decode_covered(target: Target, case: Case) -> None:
    sizes, (s, b, q, t, sp) = _grid(target, case)
    u = oracle.unit(t, sp)
    d = oracle.decode_tokens(s, b, q)
    if d == 0 or ceil_div(d, u) * u > _cap(b, u):
        return  # no decode batch fits the budget, or it is beyond the ceiling: documented eager execution there
    require(bool(sizes) and sizes[-1] >= d, f"the largest uniform decode batch, min(max_num_seqs = {s}, "
                                            f"{b} // q) requests of q = {q} tokens = {d} tokens, is above every "
                                            f"captured size ({sizes!r:.120}) though it fits the ceiling")


def _budget_captured(target: Target, case: Case) -> None:
    sizes, (s, b, q, t, sp) = _grid(target, case)
    u = oracle.unit(t, sp)
    if b > min(2 * s * q, CEILING) or b % u:
        return
    require(b in sizes, f"max_num_batched_tokens = {b} is within the capture ceiling min(2 * {s} * {q}, {CEILING}) "
                        f"but not captured: the largest step runs on a padded or no graph ({sizes!r:.120})")


PROPERTIES = (
    Property("ascending_unique", "the sizes are strictly ascending", _ascending, label=SAFETY),
    Property("positive", "every size >= 1", _positive, label=SAFETY),
    Property("within_token_budget", "every size <= max_num_batched_tokens", _within_budget, label=SAFETY),
    Property("multiples_under_sp", "under sequence parallelism every size is a multiple of tp_size", _multiples,
             label=SAFETY),
    Property("non_empty", "some size is captured when a multiple of the unit fits min(B, ceiling)", _non_empty,
             label=CHOICE),
    Property("decode_batch_covered", "the largest uniform decode batch fits the largest size when it fits the ceiling",
             _decode_covered, label=CHOICE),
    Property("budget_captured", "max_num_batched_tokens is a size when it is within min(2 S q, ceiling) and the unit",
             _budget_captured, label=CHOICE),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", capture_grid_numpy.capture_grid, "the oracle's grid as arrays, np.unique"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "every valid call: S up to 1024, B up to 16384, q up to 8, tp 1 to 8, sequence parallelism on or off",
    "engine": "what vLLM's configuration admits: B >= S, sequence parallelism only with tp > 1",
})

ERROR_INPUTS = (
    ErrorInput(dict(strategies.case_of(0, 8).args), ValueError, r"max_num_seqs must be >= 1, got 0"),
    ErrorInput(dict(strategies.case_of(2, 8, 0).args), ValueError, r"decode_query_len must be >= 1, got 0"),
    ErrorInput({**strategies.case_of(2, 8).args, "sequence_parallel": 1}, TypeError, r"sequence_parallel must be a bool"),
)

EXAMPLES = (strategies.case_of(4, 8192), strategies.case_of(30, 8192, 17), strategies.case_of(3, 8192, 1, 8, True))


def _labels(case: Case) -> list[str]:
    s, b, q, t, sp = (case.args[k] for k in ARGUMENTS)
    return [("spec decode" if q > 1 else "q = 1"), ("SP" if sp and t > 1 else "no SP"),
            ("budget in ceiling" if b <= min(2 * s * q, CEILING) else "budget above ceiling")]


CONTRACT: Any = registry.register(Contract(
    name="capture_grid",
    title="CUDA-graph capture grid",
    section="O",
    signature="capture_grid(max_num_seqs: int, max_num_batched_tokens: int, decode_query_len: int, tp_size: int, "
              "sequence_parallel: bool) -> sizes",
    arguments=ARGUMENTS,
    oracle=oracle.capture_grid,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes=f"Token counts of the captured graphs, the platform's default ceiling {CEILING} tokens; results compare as "
          "Python ints.",
))
