"""numpy implementation of contract G, batch order and decode/prefill
classification (docs/contracts.md, contract G), built from four parts.

A step goes through four jobs, each a part a binding can replace with the
engine's own function (``batchfuzz.engines.vllm``): ``aggregate`` (the
runner's threshold from the groups' thresholds), ``reorder`` (the batch's
rows after the reorder, on a :class:`RowBatch`), ``split`` (one group's
decode/prefill counts) and ``extends`` (its decode/extend/prefill counts).
:func:`pipeline` composes them into the contract's target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from batchfuzz.reference.batch_order import SPLIT_FLAGS, BatchOrder, Counts4, Counts6, check_step

Aggregate = Callable[[list[int | None], int], int | None]
Reorder = Callable[["RowBatch", dict[str, int], int], None]
Split = Callable[[np.ndarray, np.ndarray, np.ndarray, int, bool, bool], Counts4]
Extends = Callable[[np.ndarray, np.ndarray, np.ndarray, int], Counts6]


class RowBatch:
    """The persistent input batch as the reorder sees it: request ids and the
    per-request arrays, one row per request; :meth:`swap_states` exchanges
    two rows of every per-request array at once (request id, computed and
    prompt tokens, the id-to-row map), as the engine's input batch does."""

    def __init__(self, num_computed_tokens: np.ndarray, num_prompt_tokens: np.ndarray) -> None:
        n = len(num_computed_tokens)
        self.req_ids: list[str] = [str(i) for i in range(n)]
        self.req_id_to_index = {r: i for i, r in enumerate(self.req_ids)}
        self.num_computed_tokens_cpu = np.array(num_computed_tokens, dtype=np.int32)
        self.num_prompt_tokens = np.array(num_prompt_tokens, dtype=np.int32)

    def swap_states(self, i1: int, i2: int) -> None:
        ids = self.req_ids
        ids[i1], ids[i2] = ids[i2], ids[i1]
        self.req_id_to_index[ids[i1]], self.req_id_to_index[ids[i2]] = i1, i2
        for a in (self.num_computed_tokens_cpu, self.num_prompt_tokens):
            a[[i1, i2]] = a[[i2, i1]]

    def order(self) -> list[int]:
        return [int(r) for r in self.req_ids]


def aggregate(thresholds: list[int | None], num_speculative_tokens: int) -> int | None:
    """The smallest threshold asked for; the refusal of contract G."""
    asked = [b for b in thresholds if b is not None]
    if not asked:
        return None
    t, spec = min(asked), 1 + num_speculative_tokens
    if num_speculative_tokens >= 1 and t < spec and max(asked) >= spec:
        raise ValueError(f"thresholds={thresholds}: no reorder threshold satisfies every KV-cache group: a group runs "
                         f"{spec}-token speculative rows as decodes, another asks for at most {t}")
    return t


def regions(c: np.ndarray, q: np.ndarray, p: np.ndarray, t: int) -> np.ndarray:
    """Region per request (0 decode, 1 short extend, 2 long extend, 3 prefill)."""
    out = np.where(q > t, 2, np.where(c < p, 1, 0))
    return np.where(c == 0, 3, out)


def reorder(batch: RowBatch, num_scheduled_tokens: dict[str, int], threshold: int) -> None:
    """Stable sort of the rows by region, applied row by row with swaps."""
    q = np.array([num_scheduled_tokens[r] for r in batch.req_ids], dtype=np.int64)
    target = np.argsort(regions(batch.num_computed_tokens_cpu, q, batch.num_prompt_tokens, threshold), kind="stable")
    wanted = [batch.req_ids[i] for i in target.tolist()]
    for dst, want in enumerate(wanted):
        at = batch.req_id_to_index[want]
        if at != dst:
            batch.swap_states(dst, at)


def split(q: np.ndarray, c: np.ndarray, p: np.ndarray, b: int, require_uniform: bool, treat_short: bool) -> Counts4:
    """Decode count = the first row that is not a decode."""
    not_decode = q > b
    if require_uniform:
        not_decode |= q != q[0]
    if not treat_short:
        not_decode |= c < p
    nd = int(np.argmax(not_decode)) if not_decode.any() else len(q)
    dt = int(q[:nd].sum())
    return nd, len(q) - nd, dt, int(q.sum()) - dt


def extends(q: np.ndarray, c: np.ndarray, p: np.ndarray, b: int) -> Counts6:
    """Decodes up to the first row above ``b``; prefills from the first row above ``b`` with nothing computed."""
    above = q > b
    nd = int(np.argmax(above)) if above.any() else len(q)
    is_prefill = above & (c == 0)
    is_prefill[:nd] = False
    fp = int(np.argmax(is_prefill)) if is_prefill.any() else len(q)
    dt, pt = int(q[:nd].sum()), int(q[fp:].sum())
    return nd, fp - nd, len(q) - fp, dt, int(q.sum()) - dt - pt, pt


def pipeline(aggregate: Aggregate = aggregate, reorder: Reorder = reorder, split: Split = split,
             extends: Extends = extends) -> Callable[..., BatchOrder]:
    """Contract G's target made of the four parts given (ours by default)."""

    def batch_order(num_computed_tokens: Any, num_scheduled_tokens: Any, num_prompt_tokens: Any, thresholds: Any,
                    num_speculative_tokens: Any) -> BatchOrder:
        c, q, p, b, k = check_step(num_computed_tokens, num_scheduled_tokens, num_prompt_tokens, thresholds,
                                   num_speculative_tokens)
        t = aggregate(b, k)
        batch = RowBatch(np.asarray(c), np.asarray(p))
        scheduled = {r: q[i] for i, r in enumerate(batch.req_ids)}
        if t is not None:
            reorder(batch, scheduled, t)
        order = batch.order()
        rows_q = np.array([scheduled[r] for r in batch.req_ids], dtype=np.int64)
        rows_c = batch.num_computed_tokens_cpu.astype(np.int64)
        rows_p = batch.num_prompt_tokens.astype(np.int64)
        splits: list[list[Counts4] | None] = []
        exts: list[Counts6 | None] = []
        for g in b:
            splits.append(None if g is None else [tuple(int(v) for v in split(rows_q, rows_c, rows_p, g, u, s))
                                                  for u, s in SPLIT_FLAGS])
            exts.append(None if g is None else tuple(int(v) for v in extends(rows_q, rows_c, rows_p, g)))
        return BatchOrder(t, order, rows_c.tolist(), rows_p.tolist(), rows_q.tolist(), splits, exts)

    return batch_order


batch_order = pipeline()
