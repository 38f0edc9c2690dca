"""Contract D: the ubatch split (docs/contracts.md, contract D)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz._host import to_host
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, ResultTypeError, require
from batchfuzz.contracts._inputs import inputs_unchanged
from batchfuzz.contracts.split_ubatches_variants import VARIANTS
from batchfuzz.impl import split_ubatches_numpy
from batchfuzz.reference import split_ubatches as oracle
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import split_ubatches as strategies
from batchfuzz.strategies._steps import ENGINE_STEPS

Slices = list[tuple[tuple[int, int], tuple[int, int]]]


def _int(value: Any, what: str) -> int:
    value = to_host(value)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise PropertyViolation(f"{what} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _call(target: Target, case: Case) -> Slices | None:
    a = case.args
    out = target(a["num_scheduled_tokens"], a["num_tokens_padded"], a["num_reqs_padded"], a["num_ubatches"])
    if out is None:
        return None
    return decode_slices(out, "split_ubatches must return a list of ((rs, re), (ts, te)) or None")


def decode_slices(out: Any, expected: str) -> Slices:
    """A target's ubatch slices (lists, tuples, arrays or tensors) as Python
    ints; a ResultTypeError saying ``expected`` (what the contract takes) otherwise."""
    out = to_host(out)
    if isinstance(out, np.ndarray):
        out = out.tolist()
    if not isinstance(out, (list, tuple)):
        raise ResultTypeError(f"{expected}, got {type(out).__name__}")
    slices: Slices = []
    for k, item in enumerate(out):
        try:
            (rs, re), (ts, te) = item
        except (TypeError, ValueError):
            raise ResultTypeError(f"ubatch {k} must be ((req_start, req_stop), (tok_start, tok_stop)), got {item!r:.120}") from None
        slices.append(((_int(rs, f"ubatch {k} req_start"), _int(re, f"ubatch {k} req_stop")),
                       (_int(ts, f"ubatch {k} tok_start"), _int(te, f"ubatch {k} tok_stop"))))
    return slices


def _facts(case: Case) -> tuple[list[int], int, int, int, int, int]:
    a = case.args
    nst = [int(x) for x in np.asarray(a["num_scheduled_tokens"]).tolist()]
    n = a["num_ubatches"]
    return nst, sum(nst), a["num_tokens_padded"], a["num_reqs_padded"], n, a["num_tokens_padded"] // n


def _split(target: Target, case: Case) -> Slices | None:
    """The target's split; a refusal is fine here (refusal_rule judges it)."""
    out = _call(target, case)
    if out is not None:
        n = case.args["num_ubatches"]
        require(len(out) == n, f"got {len(out)} ubatches, expected num_ubatches = {n}: {out}")
    return out


def _matches_oracle(target: Target, case: Case) -> None:
    got = _call(target, case)
    expected = oracle.split_ubatches(**case.args)
    require(got == expected, f"split differs from the oracle\n  got      {got}\n  expected {expected}")


def _refusal(target: Target, case: Case) -> None:
    _, total, _, _, n, size = _facts(case)
    got = _call(target, case)
    refuse = size * (n - 1) >= total
    if refuse:
        require(got is None, f"(Np // n) * (n - 1) = {size * (n - 1)} >= sum(nst) = {total}: the last ubatch holds no real "
                             f"token, so the split must be refused (None); got {got}")
    else:
        require(got is not None, f"(Np // n) * (n - 1) = {size * (n - 1)} < sum(nst) = {total}: the split must not be refused")


def _partition(target: Target, case: Case) -> None:
    out = _split(target, case)
    if out is None:
        return
    _, _, padded, _, _, _ = _facts(case)
    edge = 0
    for k, (_, (ts, te)) in enumerate(out):
        require(ts == edge and te >= ts, f"ubatch {k} covers tokens [{ts}, {te}), expected to start at {edge}: {out}")
        edge = te
    require(edge == padded, f"ubatches end at token {edge}, expected num_tokens_padded = {padded}: {out}")


def _equal_sizes(target: Target, case: Case) -> None:
    out = _split(target, case)
    if out is None:
        return
    size = _facts(case)[5]
    for k, (_, (ts, te)) in enumerate(out[:-1]):
        require(te - ts == size and ts == k * size,
                f"ubatch {k} covers [{ts}, {te}), expected [{k * size}, {(k + 1) * size}) (s = Np // n = {size})")


def _last_has_real_token(target: Target, case: Case) -> None:
    out = _split(target, case)
    if out is None:
        return
    total = _facts(case)[1]
    ts = out[-1][1][0]
    require(ts < total, f"the last ubatch starts at token {ts} >= sum(nst) = {total}: it holds no real token")


def _request_ranges(target: Target, case: Case) -> None:
    out = _split(target, case)
    if out is None:
        return
    nst, total, _, padded_reqs, n, _ = _facts(case)
    owner = oracle.token_owners(nst)
    for k, ((rs, re), (ts, te)) in enumerate(out):
        real = owner[ts:min(te, total)]
        if not real:
            raise PropertyViolation(f"ubatch {k} covers [{ts}, {te}) with no real token (sum(nst) = {total})")
        want = (real[0], padded_reqs if k == n - 1 else real[-1] + 1)
        require((rs, re) == want, f"ubatch {k} (tokens [{ts}, {te})) has requests [{rs}, {re}), expected [{want[0]}, {want[1]}): "
                                  f"exactly the owners of its real tokens{' plus the padded requests' if k == n - 1 else ''}")


def _per_request_counts(target: Target, case: Case) -> None:
    out = _split(target, case)
    if out is None:
        return
    nst = _facts(case)[0]
    ends = np.cumsum(nst).tolist()
    counted = [0] * len(nst)
    for (rs, re), (ts, te) in out:
        for r in range(max(rs, 0), min(re, len(nst))):
            lo, hi = ends[r] - nst[r], ends[r]
            counted[r] += max(0, min(te, hi) - max(ts, lo))
    require(counted == nst, f"tokens per request summed over the ubatches that list the request: {counted} != nst = {nst}\n"
                            f"  split {out}")


def _straddlers(target: Target, case: Case) -> None:
    out = _split(target, case)
    if out is None:
        return
    nst = _facts(case)[0]
    ends = np.cumsum(nst).tolist()
    for k in range(1, len(out)):
        cut = out[k][1][0]
        for r in range(len(nst)):
            if ends[r] - nst[r] < cut < ends[r]:
                (a, b), (c, d) = out[k - 1][0], out[k][0]
                require(a <= r < b and c <= r < d, f"request {r} (tokens [{ends[r] - nst[r]}, {ends[r]})) straddles the split "
                                                   f"point {cut} but ubatches {k - 1} and {k} list requests [{a}, {b}) and [{c}, {d})")


PROPERTIES = (
    Property("matches_oracle", "the split equals the oracle's, refusal included", _matches_oracle, label=CHOICE),
    Property("refusal_rule", "None iff (Np // n) * (n - 1) >= sum(nst)", _refusal, label=CHOICE),
    Property("tokens_partition_padded", "token ranges partition [0, Np) in order", _partition, label=SAFETY),
    Property("equal_sizes", "ubatches 0 .. n-2 cover [k*s, (k+1)*s) with s = Np // n", _equal_sizes, label=SAFETY),
    Property("last_ubatch_has_real_token", "the last ubatch holds a real token", _last_has_real_token, label=SAFETY),
    Property("request_ranges_exact", "a ubatch's requests are exactly the owners of its real tokens (last: up to Rp)",
             _request_ranges, label=SAFETY),
    Property("per_request_token_counts", "per-request token counts summed over ubatches equal nst", _per_request_counts, label=SAFETY),
    Property("straddlers_in_both", "a request crossing a split point belongs to both neighbouring ubatches", _straddlers, label=SAFETY),
    inputs_unchanged(("num_scheduled_tokens", "num_tokens_padded", "num_reqs_padded", "num_ubatches")),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", split_ubatches_numpy.split_ubatches, "searchsorted over the token prefix sum"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "R >= 1 requests with >= 1 token each, Np >= max(sum(nst), n), Rp >= R, n >= 2: Np exact, a capture size, "
            "padded, or at the refusal boundary",
    "engine": "the same: the engine's callers guarantee exactly this precondition (padded counts land anywhere, the "
              "refusal boundary included, since data-parallel ranks pad to the largest rank's count)",
    ENGINE_STEPS: "num_scheduled_tokens of a step the installed vLLM's own scheduler produces (the model runner's batch order, "
                  "int32), Np, Rp and n drawn over it as in engine; drawn and shrunk as workloads (docs/engine-steps.md); "
                  "`check --steps engine`",
}, irreducible=(ENGINE_STEPS,))


def _args(nst: list[int], padded: int, padded_reqs: int, n: int) -> dict[str, Any]:
    return {"num_scheduled_tokens": np.array(nst, dtype=np.int64), "num_tokens_padded": padded,
            "num_reqs_padded": padded_reqs, "num_ubatches": n}


ERROR_INPUTS = (
    ErrorInput(_args([], 2, 1, 2), ValueError, r"num_scheduled_tokens must hold at least one request"),
    ErrorInput(_args([2, 0], 4, 2, 2), ValueError, r"num_scheduled_tokens\[1\] must be >= 1, got 0"),
    ErrorInput(_args([3, 2], 4, 2, 2), ValueError, r"num_tokens_padded must be >= sum\(num_scheduled_tokens\).*4 < 5"),
    ErrorInput(_args([1], 1, 1, 2), ValueError, r"num_tokens_padded must be >= num_ubatches.*1 < num_ubatches=2"),
    ErrorInput(_args([1, 1], 2, 1, 2), ValueError, r"num_reqs_padded must be >= the number of requests.*1 < 2"),
    ErrorInput(_args([4], 4, 1, 1), ValueError, r"num_ubatches must be >= 2, got 1"),
    ErrorInput({"num_scheduled_tokens": np.array([1.0, 2.0]), "num_tokens_padded": 4, "num_reqs_padded": 2,
                "num_ubatches": 2}, TypeError, r"num_scheduled_tokens must have dtype int32 or int64, got float64"),
    ErrorInput(_args([2], 4.0, 1, 2), TypeError, r"num_tokens_padded must be an int, got float 4.0"),  # type: ignore[arg-type]
)

EXAMPLES = (
    Case(_args([1], 2, 1, 2), {"kind": "boundary"}),
    Case(_args([3, 5, 1, 7], 16, 6, 2), {"kind": "padding"}),
    Case(_args([100, 1, 1, 30, 200], 336, 8, 4), {"kind": "capture"}),
)


def _labels(case: Case) -> list[str]:
    nst, total, padded, padded_reqs, n, size = _facts(case)
    out = [f"n == {n}", f"Np from {case.context.get('kind', '?')}"]
    if size * (n - 1) >= total:
        out.append("refused")
    elif size * (n - 1) == total - 1:
        out.append("refusal boundary: last ubatch holds 1 real token")
    else:
        ends = np.cumsum(nst).tolist()
        cuts = [k * size for k in range(1, n)]
        if any(e - x < cut < e for cut in cuts for e, x in zip(ends, nst, strict=True)):
            out.append("straddling request")
    if padded > total:
        out.append("padded tokens")
    if padded_reqs > len(nst):
        out.append("padded requests")
    return out


CONTRACT = registry.register(Contract(
    name="split_ubatches",
    title="Ubatch split",
    section="D",
    signature="split_ubatches(num_scheduled_tokens, num_tokens_padded: int, num_reqs_padded: int, num_ubatches: int) "
              "-> list of ((rs, re), (ts, te)) | None",
    arguments=("num_scheduled_tokens", "num_tokens_padded", "num_reqs_padded", "num_ubatches"),
    oracle=oracle.split_ubatches,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="Slices compare exactly after conversion to Python ints; tuples and lists, numpy arrays and tensors of "
          "shape (n, 2, 2) are accepted from a target.",
))
