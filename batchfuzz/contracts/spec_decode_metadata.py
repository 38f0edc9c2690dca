"""Contract H: speculative-decoding metadata (docs/contracts.md, contract H)."""

from __future__ import annotations

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, as_int_array, assert_array_equal, require
from batchfuzz.codec import register_dataclass
from batchfuzz.contracts.spec_decode_metadata_variants import VARIANTS
from batchfuzz.impl import spec_decode_metadata_numpy
from batchfuzz.reference import spec_decode_metadata as oracle
from batchfuzz.reference.spec_decode_metadata import SpecDecodeIndices
from batchfuzz.registry import SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import spec_decode_metadata as strategies

register_dataclass(SpecDecodeIndices)

FIELDS = tuple(SpecDecodeIndices.__dataclass_fields__)


def _result(target: Target, case: Case) -> dict[str, np.ndarray]:
    got = target(case.args["num_draft_tokens"], case.args["num_scheduled_tokens"])
    require(isinstance(got, SpecDecodeIndices), f"result is a {type(got).__name__}, expected a SpecDecodeIndices")
    return {name: as_int_array(getattr(got, name), name) for name in FIELDS}


def _step(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = np.asarray(case.args["num_draft_tokens"], dtype=np.int64)
    q = np.asarray(case.args["num_scheduled_tokens"], dtype=np.int64)
    return d, q, np.cumsum(q)


def _matches_oracle(target: Target, case: Case) -> None:
    got, want = _result(target, case), oracle.spec_decode_metadata(**case.args)
    for name in FIELDS:
        assert_array_equal(got[name], getattr(want, name), name)


def _partition(target: Target, case: Case) -> None:
    got = _result(target, case)
    d, _, _ = _step(case)
    n = int((d + 1).sum())
    require(got["logits_indices"].size == n, f"{got['logits_indices'].size} logits indices, expected sum(d + 1) = {n}")
    both = np.concatenate([got["target_logits_indices"], got["bonus_logits_indices"]])
    require(sorted(both.tolist()) == list(range(n)), f"target {got['target_logits_indices'].tolist()} and bonus "
            f"{got['bonus_logits_indices'].tolist()} indices do not partition the {n} logits 0 .. {n - 1}")


def _last_positions(target: Target, case: Case) -> None:
    got = _result(target, case)
    d, _, ends = _step(case)
    logits, start = got["logits_indices"], 0
    for i in range(d.size):
        want = list(range(int(ends[i]) - 1 - int(d[i]), int(ends[i])))
        have = logits[start: start + len(want)].tolist()
        require(have == want, f"request {i} ({int(d[i])} drafts, tokens up to {int(ends[i])}): logits at {have}, "
                f"expected its last 1 + d positions {want}")
        start += len(want)
    require(logits.size == start, f"{logits.size} logits indices, expected {start}")


def _bonus(target: Target, case: Case) -> None:
    got = _result(target, case)
    d, _, ends = _step(case)
    bonus, logits = got["bonus_logits_indices"], got["logits_indices"]
    require(bonus.size == d.size, f"{bonus.size} bonus indices, expected one per request ({d.size})")
    inside = (bonus >= 0) & (bonus < logits.size)
    reads = np.where(inside, logits[np.clip(bonus, 0, max(logits.size - 1, 0))] if logits.size else -1, -1)
    wrong = np.flatnonzero(reads != ends - 1)
    if wrong.size:
        i = int(wrong[0])
        raise PropertyViolation(f"request {i}: bonus index {int(bonus[i])} does not read its last token {int(ends[i]) - 1} "
                                f"(logits indices {logits.tolist()[:24]})")


def _cumulative(target: Target, case: Case) -> None:
    got = _result(target, case)
    d, _, _ = _step(case)
    assert_array_equal(got["cu_num_draft_tokens"], np.cumsum(d), "cu_num_draft_tokens (running sum of d)")
    assert_array_equal(got["cu_num_sampled_tokens"], np.cumsum(d + 1), "cu_num_sampled_tokens (running sum of d + 1)")


def _draft_positions(target: Target, case: Case) -> None:
    got = _result(target, case)
    d, _, ends = _step(case)
    want = [p for i in range(d.size) for p in range(int(ends[i]) - int(d[i]), int(ends[i]))]
    assert_array_equal(got["draft_token_positions"], want, "draft token positions (each request's last d tokens)")


PROPERTIES = (
    Property("matches_oracle", "every index list equals the concatenated aranges of the oracle", _matches_oracle, label=SAFETY),
    Property("target_and_bonus_partition", "target and bonus indices partition the sum(d + 1) logits", _partition, label=SAFETY),
    Property("logits_are_last_positions", "request i's logits sit at its last 1 + d[i] token positions", _last_positions, label=SAFETY),
    Property("bonus_is_last_token", "request i's bonus index reads its last token", _bonus, label=SAFETY),
    Property("cumulative_counts", "cu_num_draft_tokens = cumsum(d), cu_num_sampled_tokens = cumsum(d + 1)", _cumulative, label=SAFETY),
    Property("draft_token_positions", "the draft tokens are each request's last d[i] tokens", _draft_positions, label=SAFETY),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", spec_decode_metadata_numpy.spec_decode_metadata, "repeat + batched arange, int64"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "R >= 1, d >= 0, q >= 1 + d: up to 16 requests, mostly-zero drafts, up to 512 requests with 64 drafts, "
            "or one or two with up to 40000",
    "engine": "decodes with q = 1 + d, d <= k <= 8, and draft-free prefill chunks of up to 64 tokens; up to 256 requests",
})

ERROR_INPUTS = (
    ErrorInput({"num_draft_tokens": [], "num_scheduled_tokens": []}, ValueError,
               r"num_draft_tokens must have at least one request, got 0"),
    ErrorInput({"num_draft_tokens": [-1], "num_scheduled_tokens": [1]}, ValueError, r"num_draft_tokens\[0\] must be >= 0, got -1"),
    ErrorInput({"num_draft_tokens": [2], "num_scheduled_tokens": [2]}, ValueError,
               r"num_scheduled_tokens\[0\] must be >= 1 \+ num_draft_tokens\[0\] = 3, got 2"),
    ErrorInput({"num_draft_tokens": [0, 1], "num_scheduled_tokens": [1]}, ValueError, r"one entry per request, got 2 and 1"),
    ErrorInput({"num_draft_tokens": [0.5], "num_scheduled_tokens": [1]}, TypeError, r"num_draft_tokens must hold ints"),
)

EXAMPLES = (
    Case({"num_draft_tokens": [3, 0, 2, 0, 1], "num_scheduled_tokens": [4, 100, 3, 100, 2]}),
    Case({"num_draft_tokens": [0], "num_scheduled_tokens": [1]}),
    Case({"num_draft_tokens": [0, 0, 4], "num_scheduled_tokens": [7, 1, 5]}),
)


def _labels(case: Case) -> list[str]:
    d = case.args["num_draft_tokens"]
    out = []
    if 0 in d:
        out.append("a request without drafts")
    if len(set(d)) == 1:
        out.append("uniform drafts")
    if sum(d) + len(d) > 32767:
        out.append("sampled past int16 max")
    return out


CONTRACT = registry.register(Contract(
    name="spec_decode_metadata",
    title="Speculative-decoding metadata",
    section="H",
    signature="spec_decode_metadata(num_draft_tokens, num_scheduled_tokens) -> SpecDecodeIndices",
    arguments=("num_draft_tokens", "num_scheduled_tokens"),
    oracle=oracle.spec_decode_metadata,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="Indices compare exactly as ints; the engine keeps the running sums in int32.",
))
