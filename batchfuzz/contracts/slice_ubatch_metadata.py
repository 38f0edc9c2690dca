"""Contract F: per-microbatch attention metadata (docs/contracts.md, contract F)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz._host import to_host
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, ResultTypeError, as_int_array, assert_array_equal, assert_non_decreasing, require
from batchfuzz.codec import register_dataclass
from batchfuzz.contracts._inputs import inputs_unchanged
from batchfuzz.contracts.slice_ubatch_metadata_variants import VARIANTS
from batchfuzz.impl import slice_ubatch_metadata_numpy
from batchfuzz.reference import slice_ubatch_metadata as oracle
from batchfuzz.reference.slice_ubatch_metadata import METADATA_FIELDS, UbatchMetadata
from batchfuzz.registry import SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import slice_ubatch_metadata as strategies

register_dataclass(UbatchMetadata)

ARGUMENTS = ("num_scheduled_tokens", "num_computed_tokens", "positions", "block_table", "num_tokens_padded",
             "num_reqs_padded", "ubatch_slices")

Sliced = list[dict[str, Any]]


def _field(item: Any, name: str, k: int) -> Any:
    if isinstance(item, dict):
        if name not in item:
            raise ResultTypeError(f"microbatch {k} has no {name}")
        return item[name]
    if not hasattr(item, name):
        raise ResultTypeError(f"microbatch {k} ({type(item).__name__}) has no {name}")
    return getattr(item, name)


def _call(target: Target, case: Case) -> Sliced:
    """The target's metadata, one dict of int64 arrays per microbatch (positions None when it gives none)."""
    out = target(*(case.args[k] for k in ARGUMENTS))
    if not isinstance(out, (list, tuple)):
        raise ResultTypeError(f"slice_ubatch_metadata must return a list of UbatchMetadata, got {type(out).__name__}")
    n = len(case.args["ubatch_slices"])
    require(len(out) == n, f"got metadata of {len(out)} microbatches, expected one per slice ({n})")
    sliced = []
    for k, item in enumerate(out):
        got: dict[str, Any] = {}
        for name in METADATA_FIELDS:
            value = to_host(_field(item, name, k))
            if name == "positions" and value is None:
                got[name] = None
            elif name == "max_query_len":
                if isinstance(value, np.ndarray) and value.ndim == 0:
                    value = value.item()
                if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                    raise PropertyViolation(f"microbatch {k} max_query_len must be an int, got {type(value).__name__} {value!r}")
                got[name] = int(value)
            else:
                got[name] = as_int_array(value, f"microbatch {k} {name}")
        sliced.append(got)
    return sliced


def _facts(case: Case) -> tuple[oracle.Step, list[int]]:
    a = case.args
    step = oracle.check_slice_args(*(a[k] for k in ARGUMENTS))
    return step, oracle.request_starts(step.nst, step.num_reqs_padded)


def _parts(starts: list[int], r: int, ts: int, te: int) -> tuple[int, int, int]:
    """Request ``r``'s tokens before ``ts``, inside ``[ts, te)`` and from ``te`` on."""
    begin, end = starts[r], starts[r + 1]
    before = max(0, min(end, ts) - begin)
    own = max(0, min(end, te) - max(begin, ts))
    return before, own, end - begin - before - own


def _matches_oracle(target: Target, case: Case) -> None:
    got = _call(target, case)
    expected = oracle.slice_ubatch_metadata(*(case.args[k] for k in ARGUMENTS))
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        for name in METADATA_FIELDS:
            if name == "max_query_len":
                require(g[name] == e.max_query_len, f"microbatch {k} max_query_len: got {g[name]}, expected {e.max_query_len}")
            elif name == "positions" and g[name] is None:
                raise PropertyViolation(f"microbatch {k} has no positions, expected {e.positions.tolist()}")
            else:
                assert_array_equal(g[name], getattr(e, name), f"microbatch {k} {name}")


def _rebased(target: Target, case: Case) -> None:
    for k, (g, ((rs, re), _)) in enumerate(zip(_call(target, case), case.args["ubatch_slices"], strict=True)):
        q = g["query_start_loc"]
        require(q.shape == (re - rs + 1,), f"microbatch {k} query_start_loc has {q.size} entries, expected re - rs + 1 = {re - rs + 1}")
        require(int(q[0]) == 0, f"microbatch {k} query_start_loc starts at {int(q[0])}, expected 0: {q.tolist()}")
        assert_non_decreasing(q, f"microbatch {k} query_start_loc")


def _conserved(target: Target, case: Case) -> None:
    step, starts = _facts(case)
    counted = [0] * step.num_reqs_padded
    for k, (g, ((rs, re), (ts, te))) in enumerate(zip(_call(target, case), step.slices, strict=True)):
        q = g["query_start_loc"]
        real = max(0, min(te, step.total) - ts)
        require(q.shape == (re - rs + 1,), f"microbatch {k} query_start_loc has {q.size} entries, expected re - rs + 1 = {re - rs + 1}")
        require(int(q[-1]) - int(q[0]) == real,
                f"microbatch {k} (tokens [{ts}, {te})) has {int(q[-1]) - int(q[0])} query tokens, expected its {real} real tokens: "
                f"{q.tolist()}")
        for i, r in enumerate(range(rs, re)):
            counted[r] += int(q[i + 1] - q[i])
            own = _parts(starts, r, ts, te)[1]
            require(int(q[i + 1] - q[i]) == own, f"microbatch {k}: request {r} has {int(q[i + 1] - q[i])} query tokens, "
                                                 f"expected {own}, its tokens inside [{ts}, {te})")
    want = step.nst + [0] * (step.num_reqs_padded - step.num_reqs)
    require(counted == want, f"query tokens per request summed over the microbatches: {counted} != nst = {want}")


def _continuation(target: Target, case: Case) -> None:
    step, starts = _facts(case)
    for k, (g, ((rs, re), (ts, te))) in enumerate(zip(_call(target, case), step.slices, strict=True)):
        q, seq, done = g["query_start_loc"], g["seq_lens"], g["num_computed_tokens"]
        require(done.shape == (re - rs,), f"microbatch {k} num_computed_tokens has shape {done.shape}, expected ({re - rs},)")
        for i, r in enumerate(range(rs, re)):
            before = _parts(starts, r, ts, te)[0]
            want = (step.computed[r] if r < step.num_reqs else 0) + before
            require(int(done[i]) == want, f"microbatch {k}: request {r} has num_computed_tokens {int(done[i])}, expected c = "
                                          f"{step.computed[r] if r < step.num_reqs else 0} plus its {before} tokens run by "
                                          f"earlier microbatches = {want}")
            if seq.shape == (re - rs,) and q.shape == (re - rs + 1,):
                require(int(seq[i]) - int(q[i + 1] - q[i]) == want,
                        f"microbatch {k}: request {r} has seq_len - query_len = {int(seq[i])} - {int(q[i + 1] - q[i])}, "
                        f"expected everything computed before it, {want}")


def _seq_lens(target: Target, case: Case) -> None:
    step, starts = _facts(case)
    for k, (g, ((rs, re), (ts, te))) in enumerate(zip(_call(target, case), step.slices, strict=True)):
        seq = g["seq_lens"]
        require(seq.shape == (re - rs,), f"microbatch {k} seq_lens has shape {seq.shape}, expected ({re - rs},)")
        for i, r in enumerate(range(rs, re)):
            after = _parts(starts, r, ts, te)[2]
            full = step.computed[r] + step.nst[r] if r < step.num_reqs else 0
            require(int(seq[i]) == full - after, f"microbatch {k}: request {r} has seq_len {int(seq[i])}, expected its step "
                                                 f"seq_len {full} less its {after} tokens past token {te} = {full - after}")


def _positions(target: Target, case: Case) -> None:
    step, _ = _facts(case)
    for k, (g, (_, (ts, te))) in enumerate(zip(_call(target, case), step.slices, strict=True)):
        if g["positions"] is None:
            raise PropertyViolation(f"microbatch {k} (tokens [{ts}, {te})) has no positions, expected {step.positions[ts:te]}")
        assert_array_equal(g["positions"], np.array(step.positions[ts:te], dtype=np.int64), f"microbatch {k} positions "
                           f"(the step's positions[{ts}:{te}])")


def _block_rows(target: Target, case: Case) -> None:
    table = np.asarray(case.args["block_table"], dtype=np.int64)
    for k, (g, ((rs, re), _)) in enumerate(zip(_call(target, case), case.args["ubatch_slices"], strict=True)):
        assert_array_equal(g["block_table"], table[rs:re], f"microbatch {k} block_table (the step's rows [{rs}, {re}))")


def _max_query_len(target: Target, case: Case) -> None:
    step, starts = _facts(case)
    for k, (g, ((rs, re), (ts, te))) in enumerate(zip(_call(target, case), step.slices, strict=True)):
        want = max(_parts(starts, r, ts, te)[1] for r in range(rs, re))
        require(g["max_query_len"] == want, f"microbatch {k} (tokens [{ts}, {te})) has max_query_len {g['max_query_len']}, "
                                            f"expected its longest query, {want}")


PROPERTIES = (
    Property("matches_oracle", "every microbatch's metadata equals the oracle's", _matches_oracle, label=SAFETY),
    Property("query_start_loc_rebased", "each query_start_loc has re - rs + 1 entries, starts at 0, is non-decreasing",
             _rebased, label=SAFETY),
    Property("tokens_conserved", "a microbatch's requests have exactly its real tokens, each its own part; per request, "
             "the parts sum to nst", _conserved, label=SAFETY),
    Property("continuation_computed", "num_computed_tokens = seq_len - query_len = c plus the tokens earlier microbatches "
             "ran (a straddler's continuation included)", _continuation, label=SAFETY),
    Property("seq_lens_follow_requests", "seq_len = the step's seq_len less the tokens past the microbatch's end (padded: 0)",
             _seq_lens, label=SAFETY),
    Property("positions_follow_tokens", "positions are the step's positions[ts:te]", _positions, label=SAFETY),
    Property("block_table_rows_follow", "block-table rows are the step's rows [rs, re)", _block_rows, label=SAFETY),
    Property("max_query_len_right", "max_query_len is the microbatch's longest query (0 when it holds no real token)",
             _max_query_len, label=SAFETY),
    inputs_unchanged(ARGUMENTS),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", slice_ubatch_metadata_numpy.slice_ubatch_metadata,
                       "query_start_loc rebased and clamped onto each microbatch, per-request parts by clipping"),
    registry.torch_impl("torch", "batchfuzz.impl.slice_ubatch_metadata_torch:bind",
                        "the same subtract-and-clamp on the device, CPU and CUDA"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "any step of R >= 1 requests, Np >= sum(nst), Rp >= R, and any well-formed split into n >= 2 microbatches "
            "(cut points anywhere in (0, Np)); any positions and block ids",
    "engine": "the split vLLM makes: cuts at k * (Np // n), request ranges from maybe_create_ubatch_slices clamped as "
              "the new model runner's create_ubatch_slices clamps them (a microbatch of padding only holds the last real request "
              "with no query token); positions c[r] + j; n = 2 mostly, 3 or 4 sometimes",
})


def _args(nst: list[int], computed: list[int], padded: int, padded_reqs: int,
          slices: list[tuple[tuple[int, int], tuple[int, int]]], positions: list[int] | None = None) -> dict[str, Any]:
    pos = positions if positions is not None else strategies.engine_positions(nst, computed, padded)
    return {"num_scheduled_tokens": np.array(nst, dtype=np.int64), "num_computed_tokens": np.array(computed, dtype=np.int64),
            "positions": np.array(pos, dtype=np.int64), "block_table": np.zeros((padded_reqs, 1), dtype=np.int32),
            "num_tokens_padded": padded, "num_reqs_padded": padded_reqs, "ubatch_slices": slices}


_HALVES = [((0, 1), (0, 1)), ((0, 1), (1, 2))]

ERROR_INPUTS = (
    ErrorInput(_args([], [], 2, 1, _HALVES, [0, 0]), ValueError, r"num_scheduled_tokens must hold at least one request"),
    ErrorInput(_args([2], [0, 1], 2, 1, _HALVES, [0, 1]), ValueError, r"num_computed_tokens must have one entry per request \(1\), got 2"),
    ErrorInput(_args([2], [-1], 2, 1, _HALVES, [0, 1]), ValueError, r"num_computed_tokens\[0\] must be >= 0, got -1"),
    ErrorInput(_args([2], [0], 2, 1, _HALVES, [0]), ValueError, r"positions must have num_tokens_padded = 2 entries, got 1"),
    ErrorInput(_args([3], [0], 2, 1, _HALVES, [0, 1]), ValueError, r"num_tokens_padded must be >= sum\(num_scheduled_tokens\)"),
    ErrorInput(_args([2], [0], 2, 1, [((0, 1), (0, 2))]), ValueError, r"ubatch_slices must hold at least 2 microbatches, got 1"),
    ErrorInput(_args([2], [0], 2, 1, [((0, 1), (0, 1)), ((0, 1), (2, 2))]), ValueError,
               r"ubatch_slices\[1\] covers tokens \[2, 2\); expected a non-empty range starting at 1"),
    ErrorInput(_args([1, 1], [0, 0], 2, 2, [((0, 2), (0, 1)), ((1, 2), (1, 2))]), ValueError,
               r"ubatch_slices\[0\] stops at request 2; expected 1, after the owner of token 0"),
    ErrorInput(_args([1, 1], [0, 0], 2, 2, [((0, 1), (0, 1)), ((0, 2), (1, 2))]), ValueError,
               r"ubatch_slices\[1\] starts at request 0; expected 1, the owner of token 1"),
    ErrorInput({**_args([2], [0], 2, 1, _HALVES), "block_table": np.zeros((2, 1), dtype=np.int32)}, ValueError,
               r"block_table must have one row per request \(1\), got 2 rows"),
    ErrorInput({**_args([2], [0], 2, 1, _HALVES), "block_table": np.array([[-1]])}, ValueError,
               r"block_table\[0, 0\] must be a block id >= 0, got -1"),
    ErrorInput({**_args([2], [0], 2, 1, _HALVES), "num_tokens_padded": 2.0}, TypeError,
               r"num_tokens_padded must be an int, got float 2.0"),
)


def _example(nst: list[int], computed: list[int], padded: int, padded_reqs: int, n: int) -> Case:
    args = _args(nst, computed, padded, padded_reqs, strategies.engine_split(nst, padded, padded_reqs, n))
    args["block_table"] = np.arange(padded_reqs * 2, dtype=np.int32).reshape(padded_reqs, 2)
    return Case(args, {"kind": "example", "n": n})


EXAMPLES = (
    _example([5, 11], [3, 0], 16, 2, 2),
    _example([3, 3, 3], [0, 4, 1], 12, 4, 3),
    _example([1], [7], 4, 2, 4),
)


def _labels(case: Case) -> list[str]:
    step, starts = _facts(case)
    out = [f"n == {len(step.slices)}", f"Np from {case.context.get('kind', '?')}"]
    if any(ts >= step.total for _, (ts, _) in step.slices):
        out.append("a microbatch of padding only")
    if any(_parts(starts, r, ts, te)[0] > 0 for (rs, re), (ts, te) in step.slices for r in range(rs, min(re, step.num_reqs))):
        out.append("straddling request")
    if step.num_tokens_padded > step.total:
        out.append("padded tokens")
    if step.num_reqs_padded > step.num_reqs:
        out.append("padded requests")
    return out


CONTRACT = registry.register(Contract(
    name="slice_ubatch_metadata",
    title="Per-microbatch attention metadata",
    section="F",
    signature="slice_ubatch_metadata(num_scheduled_tokens, num_computed_tokens, positions, block_table, num_tokens_padded: int, "
              "num_reqs_padded: int, ubatch_slices) -> list of UbatchMetadata",
    arguments=ARGUMENTS,
    oracle=oracle.slice_ubatch_metadata,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="A target returns one object (or dict) per microbatch with the UbatchMetadata fields; arrays may be lists, numpy "
          "arrays or tensors and compare exactly as int64; positions None means the metadata carries none.",
))
