"""Contract G: batch order and decode/prefill classification (docs/contracts.md, contract G)."""

from __future__ import annotations

from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, require
from batchfuzz.codec import call_literal, register_dataclass
from batchfuzz.contracts.batch_order_variants import VARIANTS
from batchfuzz.impl import batch_order_numpy
from batchfuzz.reference import batch_order as oracle
from batchfuzz.reference.batch_order import REGIONS, SPLIT_FLAGS, BatchOrder
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import batch_order as strategies

register_dataclass(BatchOrder)


def _expected(case: Case) -> BatchOrder | None:
    """The oracle's answer, None where it refuses the thresholds."""
    try:
        return oracle.batch_order(**case.args)
    except ValueError:
        return None


def _result(target: Target, case: Case) -> BatchOrder | None:
    """The target's answer, shape-checked; None where it refuses and so does
    the oracle (nothing further to check)."""
    a = case.args
    try:
        got = target(*a.values())
    except ValueError:
        if _expected(case) is None:
            return None
        raise
    r, groups = len(a["num_computed_tokens"]), len(a["thresholds"])
    require(isinstance(got, BatchOrder), f"result is a {type(got).__name__}, expected a BatchOrder")
    for name in ("order", "num_computed_tokens", "num_prompt_tokens", "num_scheduled_tokens"):
        require(len(getattr(got, name)) == r, f"result.{name} has {len(getattr(got, name))} rows, expected {r}")
    require(len(got.splits) == groups and len(got.extends) == groups,
            f"result has {len(got.splits)} splits and {len(got.extends)} extends, expected one per group ({groups})")
    return got


def _threshold(target: Target, case: Case) -> None:
    try:
        expected, why = oracle.batch_order(**case.args), ""
    except ValueError as exc:
        expected, why = None, str(exc)
    try:
        got = target(*case.args.values())
    except ValueError as exc:
        require(expected is None, f"refused thresholds={case.args['thresholds']}, which threshold "
                f"{expected.threshold if expected else None} satisfies: {exc}")
        return
    require(expected is not None, f"returned reorder threshold {got.threshold}, but {why}")
    assert expected is not None
    require(got.threshold == expected.threshold, f"reorder threshold {got.threshold} != {expected.threshold}, the smallest "
            f"of thresholds={case.args['thresholds']}")


def _permutation(target: Target, case: Case) -> None:
    got = _result(target, case)
    if got is None:
        return
    r = len(case.args["num_computed_tokens"])
    require(sorted(got.order) == list(range(r)), f"row order {got.order} is not a permutation of the {r} requests")


def _state(target: Target, case: Case) -> None:
    got = _result(target, case)
    if got is None:
        return
    a = case.args
    for i, req in enumerate(got.order):
        require(0 <= req < len(got.order), f"row {i} holds request {req}, which does not exist")
        for name in ("num_computed_tokens", "num_prompt_tokens", "num_scheduled_tokens"):
            row, own = getattr(got, name)[i], a[name][req]
            require(row == own, f"row {i} holds request {req} but its {name} is {row}, the request's is {own} "
                    f"(rows {getattr(got, name)}, order {got.order})")


def _regions(target: Target, case: Case) -> None:
    got = _result(target, case)
    if got is None:
        return
    r = len(got.order)
    if got.threshold is None:
        require(got.order == list(range(r)), f"no group asks for a reorder, but the rows were moved: order {got.order}")
        return
    kinds = [oracle.region(got.num_computed_tokens[i], got.num_scheduled_tokens[i], got.num_prompt_tokens[i], got.threshold)
             for i in range(r)]
    for i in range(1, r):
        require(kinds[i - 1] <= kinds[i], f"row {i - 1} is a {REGIONS[kinds[i - 1]]} and row {i} a {REGIONS[kinds[i]]} "
                f"under threshold {got.threshold}: regions {[REGIONS[k] for k in kinds]} (c={got.num_computed_tokens}, "
                f"q={got.num_scheduled_tokens}, p={got.num_prompt_tokens})")


def _split_counts(target: Target, case: Case) -> None:
    got = _result(target, case)
    if got is None:
        return
    splits, extends = oracle.classify(got.num_scheduled_tokens, got.num_computed_tokens, got.num_prompt_tokens,
                                      oracle.check_thresholds(case.args["thresholds"]))
    for g, (want, have) in enumerate(zip(splits, got.splits, strict=True)):
        if want is None or have is None:
            require(want is None and have is None, f"group {g}: split {have}, expected {want}")
            continue
        for (u, s), w, h in zip(SPLIT_FLAGS, want, have, strict=True):
            require(tuple(h) == w, f"group {g} (threshold {case.args['thresholds'][g]}, require_uniform={u}, "
                    f"treat_short_extends_as_decodes={s}): (decodes, prefills, decode tokens, prefill tokens) = {tuple(h)}, "
                    f"expected {w} for rows q={got.num_scheduled_tokens}, c={got.num_computed_tokens}, p={got.num_prompt_tokens}")
    for g, (want6, have6) in enumerate(zip(extends, got.extends, strict=True)):
        require((want6 is None) == (have6 is None) and (want6 is None or tuple(have6) == want6),
                f"group {g}: (decodes, extends, prefills, decode, extend, prefill tokens) = {have6}, expected {want6} "
                f"for rows q={got.num_scheduled_tokens}, c={got.num_computed_tokens}")


def _spec_rows(target: Target, case: Case) -> None:
    a = case.args
    k = a["num_speculative_tokens"]
    rows = list(zip(a["num_computed_tokens"], a["num_scheduled_tokens"], a["num_prompt_tokens"], strict=True))
    # A uniform speculative step: every request done prefilling schedules its token and k drafts.
    if k < 1 or not all(q == 1 + k for c, q, p in rows if c >= p) or not any(c >= p for c, _, p in rows):
        return
    got = _result(target, case)
    if got is None:
        return
    spec_rows = [i for i in range(len(got.order)) if got.num_computed_tokens[i] >= got.num_prompt_tokens[i]]
    for g, b in enumerate(a["thresholds"]):
        if b is None or b < 1 + k:
            continue
        counted: list[tuple[str, int]] = [(f"split(require_uniform={u}, treat_short_extends_as_decodes={s})", int(h[0]))
                                          for (u, s), h in zip(SPLIT_FLAGS, got.splits[g] or [], strict=True)]
        counted.append(("split with extends", int((got.extends[g] or (0,))[0])))
        for how, num_decodes in counted:
            late = [i for i in spec_rows if i >= num_decodes]
            if late:
                raise PropertyViolation(f"group {g} (threshold {b} >= 1 + k = {1 + k}) counts speculative row {late[0]} "
                                        f"(q = {1 + k}) as a prefill in {how}: {num_decodes} decodes; reorder threshold "
                                        f"{got.threshold}, rows q={got.num_scheduled_tokens}, c={got.num_computed_tokens}, "
                                        f"p={got.num_prompt_tokens}")


PROPERTIES = (
    Property("threshold_matches_oracle", "the reorder threshold is the smallest a group asks for (None when none asks), "
             "refused when a group running (1 + k)-token speculative rows as decodes would get less than 1 + k", _threshold, label=CHOICE),
    Property("is_permutation", "the reorder is a permutation of the requests", _permutation, label=SAFETY),
    Property("state_moves_with_request", "each row holds its request's computed, prompt and scheduled tokens", _state, label=SAFETY),
    Property("regions_in_order", "rows ordered decode, short extend, long extend, prefill under the threshold "
             "(every decode before every prefill); not moved when no group asks", _regions, label=CHOICE),
    Property("split_counts_match_order", "each group's split counts are the longest decode prefix of the rows as ordered "
             "(four flag combinations, and the extends split)", _split_counts, label=SAFETY),
    Property("spec_rows_are_decodes", "in a uniform speculative step, every group whose threshold admits 1 + k counts "
             "every speculative row as a decode", _spec_rows, label=CHOICE),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", batch_order_numpy.batch_order, "vectorised numpy parts on a stand-in input batch"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "1 <= R <= 8 requests with any c >= 0, q >= 1, p >= 1 up to 8; 0 to 3 groups asking for 1..4 or None; k in 0..3",
    "engine": "the steps a scheduler makes: prefill chunks within the prompt, decodes of one token and at most k drafts; "
              "1 to 3 groups asking for 1, 1 + k, max(128, 1 + k) or None",
})


def _args(c: Any, q: Any, p: Any, thresholds: Any, k: Any) -> dict[str, Any]:
    return {"num_computed_tokens": c, "num_scheduled_tokens": q, "num_prompt_tokens": p, "thresholds": thresholds,
            "num_speculative_tokens": k}


ERROR_INPUTS = (
    ErrorInput(_args([], [], [], [1], 0), ValueError, r"num_computed_tokens must have at least one request, got 0"),
    ErrorInput(_args([0], [0], [1], [1], 0), ValueError, r"num_scheduled_tokens\[0\] must be >= 1, got 0"),
    ErrorInput(_args([0, 1], [1], [1, 1], [1], 0), ValueError, r"one entry per request, got 2, 1 and 2"),
    ErrorInput(_args([0], [1], [1], [0], 0), ValueError, r"thresholds\[0\] must be >= 1, got 0"),
    ErrorInput(_args([0], [1], [1], 2, 0), TypeError, r"thresholds must be a list of ints or None .*got int"),
    ErrorInput(_args([0], [1], [1], [1], -1), ValueError, r"num_speculative_tokens must be >= 0, got -1"),
    ErrorInput(_args([0], [1], [1], [1.5], 0), TypeError, r"thresholds\[0\] must be an int, got float 1.5"),
)

EXAMPLES = (
    # A hybrid model with speculative decoding: one group cannot run speculative rows as decodes.
    Case(_args([4, 1], [3, 2], [8, 1], [1, 2], 1)),
    # A uniform speculative step behind a short prefill chunk.
    Case(_args([1, 5, 0], [1, 3, 4], [3, 5, 4], [3], 2)),
    Case(_args([0], [1], [1], [], 0)),
)


def _labels(case: Case) -> list[str]:
    a = case.args
    asked = [b for b in a["thresholds"] if b is not None]
    out = []
    if _expected(case) is None:
        out.append("thresholds refused")
    if len(set(asked)) > 1:
        out.append("mixed thresholds")
    if not asked:
        out.append("no reorder")
    if a["num_speculative_tokens"] and any(q == 1 + a["num_speculative_tokens"] and c >= p for c, q, p in
                                           zip(a["num_computed_tokens"], a["num_scheduled_tokens"], a["num_prompt_tokens"],
                                               strict=True)):
        out.append("speculative rows")
    return out


def _reproduce(fn: str, case: Case, prop: str, imports: set[str]) -> list[str]:
    """The call, kept when it refuses the thresholds: a refusal is the
    contract's answer where no threshold satisfies every group."""
    call = call_literal(fn, case, imports)
    if _expected(case) is not None:
        return [f"result = {call}"]
    why = ""
    try:
        oracle.batch_order(**case.args)
    except ValueError as exc:
        why = str(exc)
    return ["try:", f"    result = {call}", "except ValueError as refusal:",
            "    result = refusal  # the contract's answer here: " + why.replace("\n", " ")]


CONTRACT = registry.register(Contract(
    name="batch_order",
    title="Batch order and decode/prefill classification",
    section="G",
    refusals=(ValueError,),  # refused thresholds: the contract's answer, judged against the oracle's refusal
    signature="batch_order(num_computed_tokens, num_scheduled_tokens, num_prompt_tokens, thresholds, "
              "num_speculative_tokens) -> BatchOrder",
    arguments=("num_computed_tokens", "num_scheduled_tokens", "num_prompt_tokens", "thresholds", "num_speculative_tokens"),
    oracle=oracle.batch_order,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    reproduce=_reproduce,
    notes="The order within a region is not part of the contract; counts compare exactly as ints.",
))
