"""Contract C: padded ``query_start_loc`` (docs/contracts.md, contract C).

Every property runs the target in the forms a caller uses: fresh
(``out=None``) and into a stale persistent buffer (``out=`` the case's
``context["out"]``), so ``batchfuzz check`` catches a target that forgets the
padding in a reused buffer. ``persistent_buffer`` also replays the case's
``context["history"]`` (earlier steps) on one buffer before the final step,
which is the form the shipped bug lived in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, as_int_array, assert_array_equal, assert_non_decreasing, require
from batchfuzz.codec import literal
from batchfuzz.consumers import token_map_numpy, token_map_torch
from batchfuzz.contracts._inputs import inputs_unchanged
from batchfuzz.contracts.pad_query_start_loc_variants import VARIANTS
from batchfuzz.impl import pad_query_start_loc_numpy
from batchfuzz.reference import pad_query_start_loc as oracle
from batchfuzz.registry import SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import pad_query_start_loc as strategies


@dataclass
class _Result:
    """One call of the target: its form, inputs, and the result as int64."""

    form: str
    nst: np.ndarray
    p: int
    q: np.ndarray

    @property
    def where(self) -> str:
        return f"[{self.form}] nst={self.nst.tolist()}, P={self.p}"


def _normalise(result: Any, p: int, form: str) -> np.ndarray:
    q = as_int_array(result, f"pad_query_start_loc result ({form})")
    require(q.shape == (p + 1,), f"[{form}] result has shape {q.shape}, expected ({p + 1},) = (num_reqs_padded + 1,)")
    return q


def _fresh(target: Target, case: Case) -> _Result:
    nst, p = case.args["num_scheduled_tokens"], case.args["num_reqs_padded"]
    q = _normalise(target(nst.copy(), p), p, "fresh, out=None")
    return _Result("fresh, out=None", nst.astype(np.int64), p, q)


def _stale_out(target: Target, case: Case) -> tuple[_Result, Any, np.ndarray, np.ndarray]:
    """Call with ``out=`` a copy of the stale buffer; returns the result, the raw
    return value, the buffer before and after."""
    nst, p = case.args["num_scheduled_tokens"], case.args["num_reqs_padded"]
    before = case.context["out"]
    buf = before.copy()
    raw = target(nst.copy(), p, buf)
    form = f"out=stale buffer of {before.size} {before.dtype}: target(num_scheduled_tokens, num_reqs_padded, out) on the context's out"
    return _Result(form, nst.astype(np.int64), p, _normalise(raw, p, form)), raw, before, buf


def _forms(target: Target, case: Case) -> list[_Result]:
    """The fresh form and the stale-``out`` form of the call."""
    return [_fresh(target, case), _stale_out(target, case)[0]]


def _each(check: Callable[[_Result], None]) -> Callable[[Target, Case], None]:
    def prop(target: Target, case: Case) -> None:
        for res in _forms(target, case):
            check(res)

    return prop


# ---------------------------------------------------------------- properties


def _matches_oracle(res: _Result) -> None:
    assert_array_equal(res.q, oracle.pad_query_start_loc(res.nst, res.p), f"query_start_loc {res.where}")


def _starts_at_zero(res: _Result) -> None:
    require(int(res.q[0]) == 0, f"q[0] = {int(res.q[0])} != 0 {res.where}; q = {res.q.tolist()[:24]}")


def _non_decreasing(res: _Result) -> None:
    assert_non_decreasing(res.q, f"query_start_loc {res.where}")


def _diff_real(res: _Result) -> None:
    r = res.nst.size
    assert_array_equal(np.diff(res.q)[:r], res.nst, f"diff(q)[:R] (R = {r}) vs num_scheduled_tokens {res.where}")


def _diff_padding(res: _Result) -> None:
    r = res.nst.size
    d = np.diff(res.q)[r:]
    assert_array_equal(d, np.zeros_like(d), f"diff(q)[R:] (padded slots {r}..{res.p - 1} must be empty) {res.where}")


def _last_is_total(res: _Result) -> None:
    total = int(res.nst.sum())
    require(int(res.q[res.p]) == total, f"q[P] = q[{res.p}] = {int(res.q[res.p])} != sum(nst) = {total} {res.where}")


def _check_token_map(res: _Result, consumer: str, build: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
    """A consumer's token-to-request map ``repeat(arange(P), diff(q))`` must
    exist, have ``sum(nst)`` entries, be non-decreasing and send every token
    to the request that owns it (the oracle's ``token_ranges``)."""
    total = int(res.nst.sum())
    counts = np.diff(res.q)
    span = int(res.q[-1]) - int(res.q[0])
    positive = int(counts[counts > 0].sum()) if counts.size else 0
    if positive > 4 * (total + res.p) + 1024:
        # Do not materialise a huge map: its length alone is wrong.
        raise PropertyViolation(f"{consumer}: the map would have {span} tokens, sum(nst) = {total} {res.where}")
    try:
        m = build(np.arange(res.p, dtype=np.int64), counts)
    except (ValueError, RuntimeError) as exc:
        j = int(np.argmax(counts < 0)) if (counts < 0).any() else -1
        raise PropertyViolation(
            f"{consumer} fails: {exc} (diff(q)[{j}] = {int(counts[j]) if j >= 0 else '?'}) {res.where}; q = {res.q.tolist()[:24]}"
        ) from exc
    require(m.size == total, f"{consumer} has {m.size} tokens, expected sum(nst) = {total} {res.where}")
    assert_non_decreasing(m, f"{consumer} {res.where}")
    # The oracle's ownership: token t belongs to the request whose range
    # [start, stop) holds it, that is the first request with stop > t.
    ranges = oracle.token_ranges(res.nst)
    stops = np.array([stop for _, stop in ranges], dtype=np.int64)
    owner = np.searchsorted(stops, np.arange(total, dtype=np.int64), side="right")
    wrong = np.flatnonzero(m != owner)
    if wrong.size:
        t = int(wrong[0])
        start, stop = ranges[int(owner[t])]
        raise PropertyViolation(
            f"{consumer} sends token {t} to request {int(m[t])}, but request {int(owner[t])} owns tokens "
            f"[{start}, {stop}) {res.where}"
        )


def _token_map_numpy(res: _Result) -> None:
    _check_token_map(res, "np.repeat(arange(P), diff(q))", token_map_numpy)


def _token_map_torch(res: _Result) -> None:
    _check_token_map(res, "torch.repeat_interleave(arange(P), diff(q))", token_map_torch)


def _out_form(target: Target, case: Case) -> None:
    """``out`` given: ``out[:P+1]`` holds the result, ``out[P+1:]`` is untouched,
    and the returned value is ``out[:P+1]`` (a numpy result must be a view of it)."""
    res, raw, before, after = _stale_out(target, case)
    p = res.p
    assert_array_equal(after[p + 1 :], before[p + 1 :], f"out[P+1:] = out[{p + 1}:] must be left untouched {res.where}")
    assert_array_equal(after[: p + 1], res.q, f"out[:P+1] after the call vs the returned value {res.where}")
    if isinstance(raw, np.ndarray):
        require(np.shares_memory(raw, after) and raw.__array_interface__["data"][0] == after.__array_interface__["data"][0],
                f"the returned array is not out[:P+1] (a view of out) {res.where}")


def _persistent_buffer(target: Target, case: Case) -> None:
    """History steps, then this step, on one buffer: after every step its first
    ``P + 1`` entries are the oracle's and the rest are untouched."""
    buf = case.context["out"].copy()
    steps = [*case.context["history"], (case.args["num_scheduled_tokens"], case.args["num_reqs_padded"])]
    done: list[str] = []
    for k, (nst, p) in enumerate(steps):
        before = buf.copy()
        raw = target(nst.copy(), p, buf)
        where = f"step {k + 1} of {len(steps)} on one persistent {buf.dtype} buffer of {buf.size} (earlier: {done or 'none'})"
        q = _normalise(raw, p, where)
        expected = oracle.pad_query_start_loc(nst, p)
        assert_array_equal(q, expected, f"query_start_loc at {where}, nst={nst.tolist()}, P={p}")
        assert_array_equal(buf[: p + 1], expected, f"buffer[:P+1] at {where}")
        assert_array_equal(buf[p + 1 :], before[p + 1 :], f"buffer[P+1:] at {where}")
        done.append(f"(nst={nst.tolist()}, P={p})")


def check_query_start_loc(result: Any, num_scheduled_tokens: Any, num_reqs_padded: int, where: str) -> None:
    """Every single-result property of the contract on one ``query_start_loc``:
    equal to the oracle, starts at 0, non-decreasing, ``diff`` right on real and
    padded slots, ``q[P] == sum(nst)``, and both consumers' token-to-request
    maps. Used by the state machine after every step."""
    p = int(num_reqs_padded)
    res = _Result(where, as_int_array(np.asarray(num_scheduled_tokens), "num_scheduled_tokens"), p, _normalise(result, p, where))
    for check in (_matches_oracle, _starts_at_zero, _non_decreasing, _diff_real, _diff_padding, _last_is_total,
                  _token_map_numpy, _token_map_torch):
        check(res)


PROPERTIES = (
    Property("matches_oracle", "q[0] = 0; q[i+1] = q[i] + nst[i] for i < R; q[j] = sum(nst) for R < j <= P (fresh and into a stale out)",
             _each(_matches_oracle), label=SAFETY),
    Property("starts_at_zero", "q[0] == 0", _each(_starts_at_zero), label=SAFETY),
    Property("non_decreasing", "q is non-decreasing", _each(_non_decreasing), label=SAFETY),
    Property("diff_real_is_num_scheduled_tokens", "diff(q)[:R] == nst", _each(_diff_real), label=SAFETY),
    Property("diff_padding_is_zero", "diff(q)[R:] == 0 (padded slots are empty)", _each(_diff_padding), label=SAFETY),
    Property("last_is_total", "q[P] == sum(nst)", _each(_last_is_total), label=SAFETY),
    Property("token_map_numpy", "np.repeat(arange(P), diff(q)) exists, has sum(nst) entries, is non-decreasing, "
             "sends each token to its owner", _each(_token_map_numpy), label=SAFETY),
    Property("token_map_torch", "torch.repeat_interleave(arange(P), diff(q)) exists, has sum(nst) entries, is non-decreasing, "
             "sends each token to its owner", _each(_token_map_torch), label=SAFETY),
    Property("out_form", "with out: writes out[:P+1], leaves out[P+1:] untouched, returns out[:P+1]", _out_form, label=SAFETY),
    Property("persistent_buffer", "one buffer over a sequence of steps: after each, buffer[:P+1] obeys the contract "
             "whatever earlier steps left", _persistent_buffer, label=SAFETY),
    inputs_unchanged(("num_scheduled_tokens", "num_reqs_padded")),
)


# ---------------------------------------------------------------- implementations and domains


IMPLEMENTATIONS = (
    registry.host_impl("numpy", pad_query_start_loc_numpy.pad_query_start_loc, "vectorised numpy; nst's dtype, or out's"),
    registry.torch_impl("torch", "batchfuzz.impl.pad_query_start_loc_torch:bind",
                        "torch, CUDA-graph capturable (no host sync), CPU and CUDA"),
    registry.torch_impl("torch.graph", "batchfuzz.impl.pad_query_start_loc_torch:bind_graph",
                        "per-capture-size graph form: R in a device scalar, stale staging buffer masked"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "R >= 0 requests with >= 0 tokens each, any P >= R, into a buffer holding anything (negative values, a "
            "non-zero [0], a tail past P + 1)",
    "engine": "what an engine's callers produce: R >= 1 requests with >= 1 token each, P from the real padding rules (mixed "
              "batches min(T, max_num_seqs), uniform decode min(T // q, max_num_seqs), eager P == R, dummy runs), into a "
              "buffer of max_num_reqs + 1 entries that started zeroed and that only earlier engine steps have written, "
              "so out[0] == 0",
})


# ---------------------------------------------------------------- errors, examples, labels


def _i32(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


ERROR_INPUTS = (
    ErrorInput({"num_scheduled_tokens": _i32(2, -1), "num_reqs_padded": 2}, ValueError,
               r"num_scheduled_tokens\[1\] must be >= 0, got -1", "negative count"),
    ErrorInput({"num_scheduled_tokens": _i32(1, 2, 3), "num_reqs_padded": 2}, ValueError,
               r"num_reqs_padded must be >= the number of requests R = len\(num_scheduled_tokens\) = 3, got num_reqs_padded=2",
               "P < R"),
    ErrorInput({"num_scheduled_tokens": _i32(), "num_reqs_padded": -1}, ValueError, r"num_reqs_padded must be >= 0, got -1"),
    ErrorInput({"num_scheduled_tokens": _i32(1, 2), "num_reqs_padded": 3, "out": np.zeros(3, dtype=np.int32)}, ValueError,
               r"out has 3 entries, needs at least num_reqs_padded \+ 1 = 4", "out too short"),
    ErrorInput({"num_scheduled_tokens": _i32(1, 2), "num_reqs_padded": 3, "out": np.zeros(8, dtype=np.int16)}, TypeError,
               r"out must have dtype int32 or int64, got int16", "out of a wrong dtype"),
    ErrorInput({"num_scheduled_tokens": _i32(1), "num_reqs_padded": 1, "out": np.zeros(4)}, TypeError,
               r"out must have dtype int32 or int64, got float64"),
    ErrorInput({"num_scheduled_tokens": _i32(1), "num_reqs_padded": 1, "out": [0, 0, 0]}, TypeError,
               r"out must be a numpy array or None, got list"),
    ErrorInput({"num_scheduled_tokens": _i32(1), "num_reqs_padded": 1, "out": np.zeros((2, 2), dtype=np.int64)}, ValueError,
               r"out must be 1-D, got shape \(2, 2\)"),
    ErrorInput({"num_scheduled_tokens": np.array([1.0, 2.0]), "num_reqs_padded": 2}, TypeError,
               r"num_scheduled_tokens must have dtype int32 or int64, got float64"),
    ErrorInput({"num_scheduled_tokens": _i32(1), "num_reqs_padded": 2.0}, TypeError, r"num_reqs_padded must be an int, got float 2.0"),
    ErrorInput({"num_scheduled_tokens": _i32(2**31 - 1, 1), "num_reqs_padded": 2}, ValueError,
               r"sum\(num_scheduled_tokens\) = 2147483648 does not fit in num_scheduled_tokens's dtype int32",
               "an int32 result would wrap"),
    ErrorInput({"num_scheduled_tokens": np.array([2**31], dtype=np.int64), "num_reqs_padded": 1,
                "out": np.zeros(2, dtype=np.int32)}, ValueError,
               r"sum\(num_scheduled_tokens\) = 2147483648 does not fit in out's dtype int32", "fits nst's int64, not out's int32"),
)


EXAMPLES = (
    # The shipped scenario: a large decode step, then a smaller padded one on the same buffer.
    Case({"num_scheduled_tokens": _i32(3), "num_reqs_padded": 4},
         {"max_num_reqs": 4, "out": np.zeros(5, dtype=np.int32), "history": [(_i32(5, 5, 5, 5), 4)], "kind": "shipped scenario"}),
    # Empty step padded to the whole buffer, int64 out behind int32 counts.
    Case({"num_scheduled_tokens": _i32(), "num_reqs_padded": 8},
         {"max_num_reqs": 8, "out": np.arange(9, 0, -1, dtype=np.int64), "history": [], "kind": "R==0"}),
    # A chunked prefill filling a 65536-token budget (past int16).
    Case({"num_scheduled_tokens": np.array([1, 1, 65534], dtype=np.int64), "num_reqs_padded": 3},
         {"max_num_reqs": 256, "out": np.zeros(257, dtype=np.int32), "history": [], "kind": "eager"}),
)


def _labels(case: Case) -> list[str]:
    nst, p = case.args["num_scheduled_tokens"], case.args["num_reqs_padded"]
    r, cap, out = nst.size, case.context["max_num_reqs"], case.context["out"]
    labels = [f"kind: {case.context['kind']}"]
    if p == r:
        labels.append("P == R")
    if p == r + 1:
        labels.append("P == R + 1")
    if p == cap:
        labels.append("P == max_num_reqs")
    if r == 0:
        labels.append("R == 0")
    if int(nst.sum()) > 32767:
        labels.append("sum(nst) > int16 max")
    if out.size > p + 1:
        labels.append("out has a tail past P + 1")
    if out.dtype != nst.dtype:
        labels.append("out dtype != nst dtype")
    if np.any(np.diff(out[: p + 1].astype(np.int64)) < 0):
        labels.append("stale out[:P+1] not monotone")
    if case.context["history"]:
        labels.append(f"history of {len(case.context['history'])} steps")
    return labels


def _reproduce(fn: str, case: Case, prop: str, imports: set[str]) -> list[str]:
    """The calls the properties make: the fresh form, then the ``out=`` form on
    the stale buffer (after the history of earlier steps, for persistent_buffer)."""
    nst = literal(case.args["num_scheduled_tokens"], imports)
    p = case.args["num_reqs_padded"]
    expected = oracle.pad_query_start_loc(case.args["num_scheduled_tokens"], p).tolist()
    lines = [f"result = {fn}({nst}, {p})  # fresh form",
             f"out = {literal(case.context['out'], imports)}  # a stale persistent buffer"]
    if prop == "persistent_buffer":
        for k, (h_nst, h_p) in enumerate(case.context["history"]):
            h_expected = oracle.pad_query_start_loc(h_nst, h_p).tolist()
            lines.append(f"step_{k + 1} = {fn}({literal(h_nst, imports)}, {h_p}, out).tolist()  "
                         f"# an earlier step on the same buffer; expected {h_expected}")
    lines.append(f"result_out = {fn}({nst}, {p}, out)  # the out= form; out[{p + 1}:] must be untouched")
    lines.append(f"# expected query_start_loc: {expected}")
    return lines


CONTRACT = registry.register(Contract(
    name="pad_query_start_loc",
    title="Padded query_start_loc",
    section="C",
    writes=("out",),
    signature="pad_query_start_loc(num_scheduled_tokens, num_reqs_padded: int, out=None) -> int array of length P + 1",
    arguments=("num_scheduled_tokens", "num_reqs_padded"),
    oracle=oracle.pad_query_start_loc,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    reproduce=_reproduce,
    notes="Dtype rule: without out the result has num_scheduled_tokens's dtype (int32 or int64; a list counts as int64); "
          "with out it is out's dtype, which must be int32 or int64 (TypeError naming out otherwise). sum(nst) must fit "
          "that dtype (ValueError otherwise). Values compare exactly as int64. Every property runs the target fresh and "
          "into a stale out (context['out']); persistent_buffer replays context['history'] on one buffer first.",
))
