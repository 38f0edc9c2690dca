"""Contract N: the request-boundary split of a uniform speculative-decoding batch (docs/contracts.md, contract N)."""

from __future__ import annotations

from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import require
from batchfuzz.contracts.split_ubatches import decode_slices
from batchfuzz.contracts.split_uniform_ubatches_variants import VARIANTS
from batchfuzz.impl import split_uniform_ubatches_numpy
from batchfuzz.reference import split_uniform_ubatches as oracle
from batchfuzz.registry import CHOICE, SAFETY, Contract, ErrorInput, Property, Target
from batchfuzz.strategies import split_uniform_ubatches as strategies

ARGUMENTS = oracle.ARGUMENTS


def _slices(target: Target, case: Case) -> oracle.Slices:
    """The target's ``n`` slices as Python ints."""
    out = target(*(case.args[k] for k in ARGUMENTS))
    slices = decode_slices(out, "split_uniform_ubatches must return a list of ((rs, re), (ts, te))")
    n = case.args["num_ubatches"]
    require(len(slices) == n, f"got {len(slices)} ubatches, expected num_ubatches = {n}: {slices}")
    return slices


def _partition(target: Target, case: Case) -> None:
    out, edge = _slices(target, case), 0
    for k, (_, (ts, te)) in enumerate(out):
        require(ts == edge and te >= ts, f"ubatch {k} covers tokens [{ts}, {te}), expected to start at {edge}: {out}")
        edge = te
    require(edge == case.args["num_tokens_padded"], f"ubatches end at token {edge}, expected Np = "
                                                     f"{case.args['num_tokens_padded']}: {out}")


def _boundaries(target: Target, case: Case) -> None:
    out, q = _slices(target, case), case.args["query_len"]
    for k, (_, (_, te)) in enumerate(out[:-1]):
        require(te % q == 0, f"ubatch {k} ends at token {te}, inside a request of q = {q} tokens: {out}")


def _shares(target: Target, case: Case) -> None:
    out = _slices(target, case)
    s = oracle.cut_size(case.args["query_len"], case.args["num_tokens_padded"], case.args["num_ubatches"])
    for k, (_, (ts, te)) in enumerate(out[:-1]):
        require(te - ts == s, f"ubatch {k} has {te - ts} tokens, expected the whole requests within Np // n: {s}: {out}")


def _first_real(target: Target, case: Case) -> None:
    out = _slices(target, case)
    (_, (ts, te)) = out[0]
    real = case.args["num_reqs"] * case.args["query_len"]
    require(ts < min(te, real), f"the first ubatch [{ts}, {te}) holds no real token (real tokens [0, {real})): {out}")


def _owners(target: Target, case: Case) -> None:
    out = _slices(target, case)
    r, q, rp = case.args["num_reqs"], case.args["query_len"], case.args["num_reqs_padded"]
    for k, ((rs, re), (ts, te)) in enumerate(out):
        require(0 <= rs < re <= rp, f"ubatch {k}'s requests [{rs}, {re}) are empty or outside [0, Rp = {rp}]: {out}")
        own = oracle.owners(r, q, ts, te)
        require(not own or (rs <= own.start and own.stop <= re),
                f"ubatch {k}'s requests [{rs}, {re}) miss owners [{own.start}, {own.stop}) of its tokens: {out}")


def _matches_oracle(target: Target, case: Case) -> None:
    got = [t for _, t in _slices(target, case)]
    want = [t for _, t in oracle.split_uniform_ubatches(*(case.args[k] for k in ARGUMENTS))]
    require(got == want, f"token ranges differ from the oracle\n  got      {got}\n  expected {want}")


PROPERTIES = (
    Property("tokens_partition_padded", "token ranges partition [0, Np) in order", _partition, label=SAFETY),
    Property("cuts_on_request_boundaries", "every cut is a multiple of q", _boundaries, label=SAFETY),
    Property("equal_whole_request_shares", "ubatches 0 .. n-2 hold q * (Np // (q n)) tokens", _shares, label=CHOICE),
    Property("first_ubatch_has_real_token", "the first ubatch holds a real token", _first_real, label=SAFETY),
    Property("request_ranges_hold_owners", "each ubatch's requests, non-empty within [0, Rp], hold its tokens' owners",
             _owners, label=SAFETY),
    Property("matches_oracle", "the token ranges equal the oracle's", _matches_oracle, label=CHOICE),
)

IMPLEMENTATIONS = (
    registry.host_impl("numpy", split_uniform_ubatches_numpy.split_uniform_ubatches,
                       "cut points as a vector, request ranges by np.searchsorted"),
)

INPUTS = registry.input_space(strategies, {
    "spec": "every valid call: R requests of q >= 2 tokens, Np >= max(R, n) * q, Rp >= R",
    "engine": "vLLM's new runner: Np a multiple of q, Rp = Np // q (FULL decode graph) or R (eager)",
})

ERROR_INPUTS = (
    ErrorInput({"num_reqs": 1, "query_len": 1, "num_tokens_padded": 4, "num_reqs_padded": 1, "num_ubatches": 2},
               ValueError, r"query_len must be >= 2, got 1"),
    ErrorInput({"num_reqs": 2, "query_len": 2, "num_tokens_padded": 3, "num_reqs_padded": 2, "num_ubatches": 2},
               ValueError, r"num_tokens_padded must be >= max\(num_reqs, num_ubatches\) \* query_len = 4, got 3"),
    ErrorInput({"num_reqs": 2, "query_len": 2, "num_tokens_padded": 4, "num_reqs_padded": 1, "num_ubatches": 2},
               ValueError, r"num_reqs_padded must be >= num_reqs = 2, got 1"),
)

EXAMPLES = (strategies.case_of(4, 3, 12, 4, 2), strategies.case_of(1, 2, 8, 4, 2), strategies.case_of(3, 2, 6, 3, 3))


def _labels(case: Case) -> list[str]:
    r, q, np_, _rp, n = (case.args[k] for k in ARGUMENTS)
    return ["padded" if np_ > r * q else "unpadded", f"n={n}"]


CONTRACT: Any = registry.register(Contract(
    name="split_uniform_ubatches",
    title="The request-boundary split of a uniform spec-decode batch",
    section="N",
    signature="split_uniform_ubatches(num_reqs, query_len, num_tokens_padded, num_reqs_padded, num_ubatches) "
              "-> [((req_start, req_stop), (tok_start, tok_stop)), ...]",
    arguments=ARGUMENTS,
    oracle=oracle.split_uniform_ubatches,
    implementations=IMPLEMENTATIONS,
    inputs=INPUTS,
    properties=PROPERTIES,
    error_inputs=ERROR_INPUTS,
    variants=VARIANTS,
    examples=EXAMPLES,
    labels=_labels,
    notes="Every request has q tokens (the target and its drafts); cuts are whole-request multiples; requests compare "
          "by ownership, tokens exactly.",
))
