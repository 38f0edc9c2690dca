"""Contract L: the real tokens of the two-batch-overlap children (docs/contracts.md, contract L)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import ResultTypeError, require
from batchfuzz.contracts.tbo_children_tokens_variants import VARIANTS
from batchfuzz.impl import tbo_children_tokens_numpy
from batchfuzz.reference import tbo_children_tokens as oracle
from batchfuzz.registry import SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import tbo_children_tokens as strategies

ARGUMENTS = oracle.ARGUMENTS


def _counts(target: Target, case: Case) -> tuple[int, int, int, int, int]:
    """``(a, b, t, M, N)``: the target's two counts as Python ints, and the case's values."""
    got = target(*(case.args[k] for k in ARGUMENTS))
    if isinstance(got, np.ndarray) or hasattr(got, "tolist"):
        got = got.tolist()
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise ResultTypeError(f"tbo_children_tokens must return (a, b), got {got!r:.120}")
    out = []
    for name, v in zip("ab", got, strict=True):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ResultTypeError(f"{name} must be an int, got {type(v).__name__} {v!r:.60}")
        out.append(int(v))
    return out[0], out[1], *(case.args[k] for k in ARGUMENTS)


def _conserved(target: Target, case: Case) -> None:
    a, b, t, m, n = _counts(target, case)
    require(a + b == m, f"children hold {a} + {b} real tokens, the parent {m}; t = {t}, N = {n}")


def _fit(target: Target, case: Case) -> None:
    a, b, t, m, n = _counts(target, case)
    require(0 <= a <= t and 0 <= b <= n - t, f"(a, b) = ({a}, {b}) outside the children's sizes [0, {t}] and [0, {n - t}]; "
                                             f"M = {m}")


def _second(target: Target, case: Case) -> None:
    a, b, t, m, n = _counts(target, case)
    require(a == min(t, m), f"child A holds {a} real tokens of its {t}, though {m} real tokens come first: the padding "
                            f"belongs to child B; N = {n}, b = {b}")


def _matches_oracle(target: Target, case: Case) -> None:
    a, b, *_ = _counts(target, case)
    want = oracle.tbo_children_tokens(*(case.args[k] for k in ARGUMENTS))
    require((a, b) == want, f"(a, b) = {(a, b)}, expected {want}")


PROPERTIES = (
    Property("counts_fit_children", "0 <= a <= t and 0 <= b <= N - t", _fit, label=SAFETY),
    Property("real_tokens_conserved", "a + b == M", _conserved, label=SAFETY),
    Property("padding_in_second_child", "a == min(t, M): the real tokens fill child A first, all padding is in child B",
             _second, label=SAFETY),
    Property("matches_oracle", "(a, b) of the rule, exactly", _matches_oracle, label=SAFETY),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", tbo_children_tokens_numpy.tbo_children_tokens, "np.clip of the children's ends at M"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "every valid call: N from 0, t and M anywhere in [0, N]",
    "engine": "what SGLang's preparer passes: t split from the real tokens, so t <= M",
})

ERROR_INPUTS = (
    ErrorInput({"split_token_index": 3, "num_token_non_padded": 1, "num_tokens": 2}, ValueError,
               r"split_token_index must be <= num_tokens \(2\), got 3"),
    ErrorInput({"split_token_index": 1, "num_token_non_padded": -1, "num_tokens": 2}, ValueError,
               r"num_token_non_padded must be >= 0, got -1"),
    ErrorInput({"split_token_index": 1, "num_token_non_padded": 1, "num_tokens": 2.0}, TypeError, r"num_tokens must be an int"),
)

EXAMPLES = (strategies.case_of(3, 5, 8), strategies.case_of(4, 2, 8), strategies.case_of(0, 0, 0))


def _labels(case: Case) -> list[str]:
    t, m, n = (case.args[k] for k in ARGUMENTS)
    return ["padded" if m < n else "unpadded"] + (["t > M"] if t > m else [])


CONTRACT: Any = registry.register(Contract(
    name="tbo_children_tokens",
    title="Real tokens of the two-batch-overlap children",
    section="L",
    signature="tbo_children_tokens(split_token_index: int, num_token_non_padded: int, num_tokens: int) -> (a, b)",
    arguments=ARGUMENTS,
    oracle=oracle.tbo_children_tokens,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="Child A is the parent's tokens [0, t), child B [t, N); the first M tokens are real. Results compare as Python ints.",
))
