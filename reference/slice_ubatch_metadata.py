"""Oracle of contract F: per-microbatch attention metadata (docs/contracts.md, contract F).

``slice_ubatch_metadata(nst, c, positions, block_table, Np, Rp, ubatch_slices)``
cuts a step's attention metadata into the metadata of each microbatch of a
given split. The step has ``R`` real requests (request ``r`` schedules
``nst[r]`` query tokens after ``c[r]`` computed ones, so its ``seq_len`` is
``c[r] + nst[r]``), padded to ``Rp`` requests and ``Np`` tokens; padded
requests own no token and have ``seq_len`` 0. A microbatch ``((rs, re), (ts,
te))`` runs tokens ``[ts, te)`` for requests ``[rs, re)``; a request whose
tokens cross a cut (it *straddles*) is in both microbatches, each with the
part of its query that the microbatch owns. Its part in a later microbatch is
a continuation: everything before the cut has been computed by then.

Written as plain loops over requests, line by line from the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from batchfuzz.reference._args import check_count_array, check_int
from batchfuzz.reference._step import check_table

UbatchSlice = tuple[tuple[int, int], tuple[int, int]]


@dataclass
class UbatchMetadata:
    """The attention metadata of one microbatch (contract F).

    ``query_start_loc`` has ``re - rs + 1`` entries, ``seq_lens`` and
    ``num_computed_tokens`` ``re - rs``, ``positions`` ``te - ts``,
    ``block_table`` ``re - rs`` rows; ``max_query_len`` is an int.
    """

    query_start_loc: Any
    seq_lens: Any
    num_computed_tokens: Any
    positions: Any
    block_table: Any
    max_query_len: Any


METADATA_FIELDS = ("query_start_loc", "seq_lens", "num_computed_tokens", "positions", "block_table", "max_query_len")


@dataclass(frozen=True)
class Step:
    """A validated step: Python lists of the per-request and per-token values."""

    nst: list[int]
    computed: list[int]
    positions: list[int]
    block_table: list[list[int]]
    num_tokens_padded: int
    num_reqs_padded: int
    slices: list[UbatchSlice]

    @property
    def num_reqs(self) -> int:
        return len(self.nst)

    @property
    def total(self) -> int:
        return sum(self.nst)


def request_starts(nst: list[int], num_reqs_padded: int) -> list[int]:
    """The step's ``query_start_loc`` over the padded requests: request ``r``'s
    tokens are ``[q[r], q[r + 1])``; padded requests start and end at ``sum(nst)``."""
    q = [0]
    for count in nst:
        q.append(q[-1] + count)
    while len(q) < num_reqs_padded + 1:
        q.append(q[-1])
    return q


def owner(nst: list[int], token: int) -> int:
    """The request owning real token ``token``."""
    end = 0
    for r, count in enumerate(nst):
        end += count
        if token < end:
            return r
    raise ValueError(f"token {token} is not a real token (sum(nst) = {end})")


def _slice_pair(k: int, item: Any) -> UbatchSlice:
    try:
        (rs, re), (ts, te) = item
    except (TypeError, ValueError):
        raise TypeError(f"ubatch_slices[{k}] must be ((req_start, req_stop), (tok_start, tok_stop)), got {item!r:.80}") from None
    return ((check_int(f"ubatch_slices[{k}] req_start", rs), check_int(f"ubatch_slices[{k}] req_stop", re)),
            (check_int(f"ubatch_slices[{k}] tok_start", ts), check_int(f"ubatch_slices[{k}] tok_stop", te)))


def check_slice_args(num_scheduled_tokens: Any, num_computed_tokens: Any, positions: Any, block_table: Any,
                     num_tokens_padded: Any, num_reqs_padded: Any, ubatch_slices: Any) -> Step:
    """Preconditions of contract F (docs/contracts.md, contract F, "Preconditions")."""
    nst = [int(v) for v in check_count_array("num_scheduled_tokens", num_scheduled_tokens, minimum=1).tolist()]
    computed = [int(v) for v in check_count_array("num_computed_tokens", num_computed_tokens).tolist()]
    pos = [int(v) for v in check_count_array("positions", positions).tolist()]
    padded_tokens = check_int("num_tokens_padded", num_tokens_padded, minimum=1)
    padded_reqs = check_int("num_reqs_padded", num_reqs_padded, minimum=1)
    if not nst:
        raise ValueError("num_scheduled_tokens must hold at least one request, got []")
    if len(computed) != len(nst):
        raise ValueError(f"num_computed_tokens must have one entry per request ({len(nst)}), got {len(computed)}")
    total = sum(nst)
    if padded_tokens < total:
        raise ValueError(f"num_tokens_padded must be >= sum(num_scheduled_tokens), got num_tokens_padded={padded_tokens} < {total}")
    if padded_reqs < len(nst):
        raise ValueError(f"num_reqs_padded must be >= the number of requests, got num_reqs_padded={padded_reqs} < {len(nst)}")
    if len(pos) != padded_tokens:
        raise ValueError(f"positions must have num_tokens_padded = {padded_tokens} entries, got {len(pos)}")
    table = check_table("block_table", block_table, padded_reqs)  # one row per padded request
    if not isinstance(ubatch_slices, (list, tuple)):
        raise TypeError(f"ubatch_slices must be a list of ((rs, re), (ts, te)), got {type(ubatch_slices).__name__}")
    slices = [_slice_pair(k, item) for k, item in enumerate(ubatch_slices)]
    if len(slices) < 2:
        raise ValueError(f"ubatch_slices must hold at least 2 microbatches, got {len(slices)}")
    step = Step(nst, computed, pos, [[int(v) for v in row] for row in table.tolist()], padded_tokens, padded_reqs, slices)
    _check_split(step)
    return step


def _check_split(step: Step) -> None:
    """A well-formed split (docs/contracts.md, contract F): token ranges cut
    ``[0, Np)`` in order, none empty; a microbatch's first request owns its
    first token (the last real request when it holds none); a microbatch
    ending at or before ``sum(nst)`` stops after the owner of its last token;
    one running past it stops anywhere in ``[R, Rp]``; the last stops at ``Rp``."""
    total, num_reqs = step.total, step.num_reqs
    edge = 0
    for k, ((rs, re), (ts, te)) in enumerate(step.slices):
        last = k == len(step.slices) - 1
        if ts != edge or te <= ts:
            raise ValueError(f"ubatch_slices[{k}] covers tokens [{ts}, {te}); expected a non-empty range starting at {edge}")
        edge = te
        first = owner(step.nst, ts) if ts < total else num_reqs - 1
        if rs != first:
            raise ValueError(f"ubatch_slices[{k}] starts at request {rs}; expected {first}, the owner of token {ts}"
                             f"{'' if ts < total else ' (a microbatch of padding only holds the last real request)'}")
        if last:
            ok, want = re == step.num_reqs_padded, f"num_reqs_padded = {step.num_reqs_padded}"
        elif te <= total:
            stop = owner(step.nst, te - 1) + 1
            ok, want = re == stop, f"{stop}, after the owner of token {te - 1}"
        else:
            ok, want = num_reqs <= re <= step.num_reqs_padded, f"a stop in [{num_reqs}, {step.num_reqs_padded}]"
        if not ok:
            raise ValueError(f"ubatch_slices[{k}] stops at request {re}; expected {want}")
    if edge != step.num_tokens_padded:
        raise ValueError(f"ubatch_slices end at token {edge}; expected num_tokens_padded = {step.num_tokens_padded}")


def slice_ubatch_metadata(num_scheduled_tokens: Any, num_computed_tokens: Any, positions: Any, block_table: Any,
                          num_tokens_padded: int, num_reqs_padded: int, ubatch_slices: Any) -> list[UbatchMetadata]:
    """Contract F: one :class:`UbatchMetadata` per microbatch, in order."""
    step = check_slice_args(num_scheduled_tokens, num_computed_tokens, positions, block_table,
                            num_tokens_padded, num_reqs_padded, ubatch_slices)
    starts = request_starts(step.nst, step.num_reqs_padded)
    out = []
    for (rs, re), (ts, te) in step.slices:
        qsl = [0]  # query_start_loc starts at 0
        seq_lens, computed = [], []
        for r in range(rs, re):
            begin, end = starts[r], starts[r + 1]
            # The request's tokens this microbatch owns: its tokens inside [ts, te).
            own = max(0, min(end, te) - max(begin, ts))
            # Its tokens run by earlier microbatches (before ts) and by later ones (from te on).
            before = max(0, min(end, ts) - begin)
            after = max(0, end - max(begin, te))
            qsl.append(qsl[-1] + own)
            # Computed before this microbatch: the step's computed tokens plus the earlier microbatches' part.
            done = (step.computed[r] if r < step.num_reqs else 0) + before
            computed.append(done)
            # seq_len: the step's seq_len less the tokens past the microbatch's end (= done + own).
            full = (step.computed[r] + step.nst[r]) if r < step.num_reqs else 0
            seq_lens.append(full - after)
        out.append(UbatchMetadata(
            query_start_loc=np.array(qsl, dtype=np.int64),
            seq_lens=np.array(seq_lens, dtype=np.int64),
            num_computed_tokens=np.array(computed, dtype=np.int64),
            # Per-token values follow their tokens, per-request rows their requests.
            positions=np.array(step.positions[ts:te], dtype=np.int64),
            block_table=np.array(step.block_table[rs:re], dtype=np.int64).reshape(re - rs, len(step.block_table[0])),
            # The longest query of the microbatch (0 when it holds no real token).
            max_query_len=max(qsl[i + 1] - qsl[i] for i in range(len(qsl) - 1)),
        ))
    return out
