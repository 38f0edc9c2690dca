"""Contract B: the dummy batch layout over persistent buffers (docs/contracts.md, contract B)."""

from __future__ import annotations

import numpy as np

from batchfuzz import registry
from batchfuzz._host import to_host
from batchfuzz.case import Case
from batchfuzz.checks import ResultTypeError, as_int_array, assert_array_equal, assert_non_decreasing, require
from batchfuzz.codec import register_dataclass
from batchfuzz.contracts.make_dummy_variants import VARIANTS
from batchfuzz.impl import make_dummy_numpy
from batchfuzz.reference import make_dummy as oracle
from batchfuzz.reference.make_dummy import DUMMY_BATCH_FIELDS, DummyBatch, DummyBuffers
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import make_dummy as strategies

register_dataclass(DummyBuffers)


def _run(target: Target, case: Case) -> tuple[dict[str, np.ndarray], DummyBuffers]:
    """Call the target on a copy of the case's (stale) buffers; return its
    outputs as int64 arrays (``max_query_len`` as a 0-d array, None made the
    longest count) and the buffers as they are after the call."""
    buffers = case.args["buffers"].copy()
    batch = target(case.args["num_reqs"], case.args["num_tokens"], buffers)
    if not isinstance(batch, DummyBatch):
        raise ResultTypeError(f"make_dummy must return a DummyBatch, got {type(batch).__name__}")
    out = {name: as_int_array(to_host(getattr(batch, name)), name) for name in DUMMY_BATCH_FIELDS}
    out["max_query_len"] = _max_query_len_of(to_host(batch.max_query_len), out["num_scheduled_tokens"])
    return out, buffers


def _max_query_len_of(value: object, nst: np.ndarray) -> np.ndarray:
    """A DummyBatch's ``max_query_len`` as a 0-d int64 array; None is the longest count."""
    if value is None:
        return np.array(int(nst.max()) if nst.size else 0, dtype=np.int64)
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iu":
        return value.astype(np.int64)
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return np.array(int(value), dtype=np.int64)
    raise ResultTypeError(f"max_query_len must be an int or None, got {type(value).__name__}: {value!r:.60}")


def _expected(case: Case) -> dict[str, np.ndarray]:
    b = case.args["buffers"]
    fresh = DummyBuffers.zeros(b.max_num_reqs, b.max_num_tokens, np.int64)
    batch = oracle.make_dummy(case.args["num_reqs"], case.args["num_tokens"], fresh)
    return {name: as_int_array(getattr(batch, name), name) for name in DUMMY_BATCH_FIELDS}


def _matches_oracle(target: Target, case: Case) -> None:
    out, _ = _run(target, case)
    exp = _expected(case)
    for name in DUMMY_BATCH_FIELDS:
        assert_array_equal(out[name], exp[name], name)


def _num_scheduled(target: Target, case: Case) -> None:
    out, _ = _run(target, case)
    assert_array_equal(out["num_scheduled_tokens"], oracle.split_dummy_tokens(case.args["num_reqs"], case.args["num_tokens"]),
                       "num_scheduled_tokens")


def _seq_lens(target: Target, case: Case) -> None:
    out, buffers = _run(target, case)
    r = case.args["num_reqs"]
    seq = out["seq_lens"]
    require(seq.shape == (buffers.max_num_reqs,), f"seq_lens must be the whole buffer of {buffers.max_num_reqs}, got shape {seq.shape}")
    assert_array_equal(seq[:r], out["num_scheduled_tokens"], "seq_lens[:R] (a dummy request is a fresh prefill)")
    assert_array_equal(seq[r:], np.zeros(seq.size - r, dtype=np.int64), "seq_lens[R:] (padded request slots)")
    assert_array_equal(as_int_array(buffers.seq_lens, "buffers.seq_lens"), seq, "buffers.seq_lens after the call")


def _within_max_model_len(target: Target, case: Case) -> None:
    out, _ = _run(target, case)
    r, limit = case.args["num_reqs"], case.context["max_model_len"]
    seq = out["seq_lens"][:r]
    i = int(np.argmax(seq))
    require(int(seq[i]) <= limit, f"dummy request {i} has seq_len {int(seq[i])} > max_model_len = {limit}")


def _query_start_loc(target: Target, case: Case) -> None:
    out, buffers = _run(target, case)
    r, n = case.args["num_reqs"], case.args["num_tokens"]
    qsl = out["query_start_loc"]
    require(qsl.shape == (buffers.max_num_reqs + 1,), f"query_start_loc must be the whole buffer, got shape {qsl.shape}")
    require(int(qsl[0]) == 0, f"query_start_loc[0] = {int(qsl[0])} != 0")
    assert_array_equal(qsl[1 : r + 1], np.cumsum(out["num_scheduled_tokens"]), "query_start_loc[1:R+1] (running sum)")
    assert_array_equal(qsl[r + 1 :], np.full(qsl.size - r - 1, n), "query_start_loc[R+1:] (zero-length padded slots)")
    assert_array_equal(as_int_array(buffers.query_start_loc, "buffers.query_start_loc"), qsl, "buffers.query_start_loc after the call")


def _qsl_monotone(target: Target, case: Case) -> None:
    out, _ = _run(target, case)
    assert_non_decreasing(out["query_start_loc"], "query_start_loc")


def _qsl_diff(target: Target, case: Case) -> None:
    out, _ = _run(target, case)
    r = case.args["num_reqs"]
    assert_array_equal(np.diff(out["query_start_loc"][: r + 1]), out["num_scheduled_tokens"], "diff(query_start_loc[:R+1])")


def _zero_tokens(target: Target, case: Case) -> None:
    out, _ = _run(target, case)
    n = case.args["num_tokens"]
    for name in ("positions", "input_ids"):
        assert_array_equal(out[name], np.zeros(n, dtype=np.int64), f"{name}[:N]")


def _indices(target: Target, case: Case) -> None:
    out, _ = _run(target, case)
    r = case.args["num_reqs"]
    assert_array_equal(out["idx_mapping"], np.arange(r), "idx_mapping")
    assert_array_equal(out["logits_indices"], out["query_start_loc"][1 : r + 1] - 1, "logits_indices")
    assert_array_equal(out["cu_num_logits"], np.arange(r + 1), "cu_num_logits")


def _max_query_len(target: Target, case: Case) -> None:
    out, _ = _run(target, case)
    n, mql, nst = case.args["num_tokens"], int(out["max_query_len"]), out["num_scheduled_tokens"]
    if nst.size:
        i = int(np.argmax(nst))
        require(int(nst[i]) <= mql, f"dummy request {i} schedules {int(nst[i])} tokens > max_query_len = {mql}")
    require(mql <= n, f"max_query_len = {mql} > num_tokens = {n}")


_TOKEN_FIELDS = ("positions", "input_ids")


def _stale_independent(target: Target, case: Case) -> None:
    stale, _ = _run(target, case)
    b = case.args["buffers"]
    fresh_case = Case(dict(case.args, buffers=DummyBuffers(
        seq_lens=np.zeros_like(b.seq_lens), query_start_loc=np.zeros_like(b.query_start_loc),
        positions=np.zeros_like(b.positions), input_ids=np.zeros_like(b.input_ids))), case.context)
    fresh, _ = _run(target, fresh_case)
    # positions and input_ids are left out: what the dummy tokens hold is the documented choice
    # positions_and_input_ids_zero (any in-range token is safe), and a safety property must not fail on a choice.
    for name in (*(f for f in DUMMY_BATCH_FIELDS if f not in _TOKEN_FIELDS), "max_query_len"):
        assert_array_equal(stale[name], fresh[name], f"{name} on stale buffers vs fresh buffers")


PROPERTIES = (
    Property("matches_oracle", "every field equals the oracle's on fresh buffers", _matches_oracle, label=CHOICE),
    Property("num_scheduled_tokens_is_split", "num_scheduled_tokens = split_dummy_tokens(R, N)", _num_scheduled, label=CHOICE),
    Property("seq_lens_layout", "seq_lens[:R] == num_scheduled_tokens, seq_lens[R:] == 0", _seq_lens, label=SAFETY),
    Property("seq_lens_within_max_model_len", "no dummy request is longer than max_model_len when N <= R * L", _within_max_model_len,
             label=SAFETY),
    Property("query_start_loc_layout", "[0] = 0, [1..R] running sum, [R+1..] = N", _query_start_loc, label=SAFETY),
    Property("query_start_loc_non_decreasing", "query_start_loc non-decreasing over the whole buffer", _qsl_monotone, label=SAFETY),
    Property("query_start_loc_diff", "diff(query_start_loc[:R+1]) == num_scheduled_tokens", _qsl_diff, label=SAFETY),
    Property("positions_and_input_ids_zero", "positions[:N] and input_ids[:N] zero", _zero_tokens, label=CHOICE),
    Property("index_arrays", "idx_mapping = arange(R); logits_indices = qsl[1:R+1] - 1; cu_num_logits = arange(R + 1)", _indices,
             label=SAFETY),
    Property("max_query_len_covers_batch", "max(num_scheduled_tokens) <= max_query_len <= N (None: the longest count)",
             _max_query_len, label=SAFETY),
    Property("independent_of_stale_buffers", "the result, but the dummy tokens (positions, input_ids), is identical whatever the "
             "buffers held before", _stale_independent, label=SAFETY),
)


IMPLEMENTATIONS = (
    registry.host_impl("numpy", make_dummy_numpy.make_dummy, "numpy over numpy buffers"),
    registry.torch_impl("torch", "batchfuzz.impl.make_dummy_torch:bind", "torch over device buffers"),
    registry.torch_impl("torch.graph", "batchfuzz.impl.make_dummy_torch:bind_graph",
                        "CUDA-graph form: sizes in device scalars, masks, no host sync"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "any 1 <= R <= N with buffers of capacity max_num_reqs >= R, max_num_tokens >= N holding any stale values",
    "engine": "the same sizes; the stale values are what an engine writes there (lengths, offsets, positions and token ids "
              "are never negative; query_start_loc[0] is 0)",
})


def _zeros(r: int, t: int) -> DummyBuffers:
    return DummyBuffers.zeros(r, t, np.int32)


ERROR_INPUTS = (
    ErrorInput({"num_reqs": 5, "num_tokens": 8, "buffers": _zeros(4, 16)}, ValueError, r"num_reqs=5 exceeds the buffers' max_num_reqs=4"),
    ErrorInput({"num_reqs": 2, "num_tokens": 17, "buffers": _zeros(4, 16)}, ValueError,
               r"num_tokens=17 exceeds the buffers. max_num_tokens=16"),
    ErrorInput({"num_reqs": 0, "num_tokens": 8, "buffers": _zeros(4, 16)}, ValueError, r"num_reqs must be >= 1, got 0"),
    ErrorInput({"num_reqs": 3, "num_tokens": 2, "buffers": _zeros(4, 16)}, ValueError, r"num_tokens must be >= num_reqs"),
    ErrorInput({"num_reqs": 1, "num_tokens": 2, "buffers": {"seq_lens": []}}, TypeError, r"buffers must be a DummyBuffers, got dict"),
)


def _labels(case: Case) -> list[str]:
    r, n, b = case.args["num_reqs"], case.args["num_tokens"], case.args["buffers"]
    out = []
    if b.max_num_reqs > r:
        out.append("padded request slots")
    if b.max_num_tokens > n:
        out.append("spare token capacity")
    if np.any(np.diff(b.query_start_loc.astype(np.int64)) < 0):
        out.append("stale query_start_loc not monotone")
    if n > 32767:
        out.append("N > int16 max")
    return out


CONTRACT = registry.register(Contract(
    name="make_dummy",
    title="Dummy batch layout",
    section="B",
    writes=("buffers",),
    signature="make_dummy(num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch",
    arguments=("num_reqs", "num_tokens", "buffers"),
    oracle=oracle.make_dummy,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=(
        Case({"num_reqs": 256, "num_tokens": 496, "buffers": DummyBuffers.zeros(256, 512, np.int32)}, {"max_model_len": 16}),
    ),
    labels=_labels,
    notes="Buffers keep their own dtypes; compared as int64 values.",
))
