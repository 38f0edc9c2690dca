"""Oracle of contract G: batch order and decode/prefill classification
(docs/contracts.md, contract G).

One step of the engine's attention preparation, end to end:

1. the reorder threshold ``t`` aggregated over the KV-cache groups' backends
   (each asks for a threshold ``b_g`` or for no reordering, ``None``): the
   smallest one asked for; refused when a group runs ``(1 + k)``-token
   speculative rows as decodes and ``t`` would be below ``1 + k``;
2. the batch reordered into four regions under ``t``: decode (``q <= t``,
   done prefilling), short extend (``q <= t``, still prefilling), long extend
   (``q > t``, has context), prefill (nothing computed);
3. each group's classification of the reordered rows with its own ``b_g``:
   the decode count is the longest prefix of rows it treats as decodes.

Within a region the order is not part of the contract; the oracle keeps the
original order there (a stable sort) and :func:`split_counts` and
:func:`extend_counts` classify any row order a target returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchfuzz.reference._args import check_count_array, check_int

REGIONS = ("decode", "short_extend", "long_extend", "prefill")
# (require_uniform, treat_short_extends_as_decodes) of every classification a group makes.
SPLIT_FLAGS = ((False, True), (True, True), (False, False), (True, False))

Counts4 = tuple[int, int, int, int]
Counts6 = tuple[int, int, int, int, int, int]


@dataclass(frozen=True)
class BatchOrder:
    """The step after the reorder. ``order[i]`` is the request (its index in
    the arguments) in row ``i``; the three per-row lists are what the batch
    holds in each row afterwards. ``splits[g]`` holds group ``g``'s
    ``(num_decodes, num_prefills, num_decode_tokens, num_prefill_tokens)``,
    one per entry of ``SPLIT_FLAGS``, and ``extends[g]`` its ``(num_decodes,
    num_extends, num_prefills, num_decode_tokens, num_extend_tokens,
    num_prefill_tokens)``; both ``None`` for a group that asks for no
    reordering."""

    threshold: int | None
    order: list[int]
    num_computed_tokens: list[int]
    num_prompt_tokens: list[int]
    num_scheduled_tokens: list[int]
    splits: list[list[Counts4] | None]
    extends: list[Counts6 | None]


def check_thresholds(thresholds: Any) -> list[int | None]:
    """Each group's requested threshold: an int >= 1 or None."""
    if not isinstance(thresholds, (list, tuple)):
        raise TypeError(f"thresholds must be a list of ints or None (one per KV-cache group), got {type(thresholds).__name__}")
    return [None if b is None else check_int(f"thresholds[{g}]", b, minimum=1) for g, b in enumerate(thresholds)]


def check_step(num_computed_tokens: Any, num_scheduled_tokens: Any, num_prompt_tokens: Any, thresholds: Any,
               num_speculative_tokens: Any) -> tuple[list[int], list[int], list[int], list[int | None], int]:
    """Preconditions of contract G: ``R >= 1`` requests, ``c >= 0``,
    ``q >= 1``, ``p >= 1``, all of one length; thresholds as
    :func:`check_thresholds`; ``k >= 0``."""
    c = check_count_array("num_computed_tokens", num_computed_tokens)
    q = check_count_array("num_scheduled_tokens", num_scheduled_tokens, minimum=1)
    p = check_count_array("num_prompt_tokens", num_prompt_tokens, minimum=1)
    if c.size == 0:
        raise ValueError("num_computed_tokens must have at least one request, got 0")
    if q.size != c.size or p.size != c.size:
        raise ValueError(f"num_computed_tokens, num_scheduled_tokens and num_prompt_tokens must have one entry per request, "
                         f"got {c.size}, {q.size} and {p.size}")
    k = check_int("num_speculative_tokens", num_speculative_tokens, minimum=0)
    return [int(v) for v in c], [int(v) for v in q], [int(v) for v in p], check_thresholds(thresholds), k


def aggregate_threshold(thresholds: list[int | None], num_speculative_tokens: int) -> int | None:
    """The runner's threshold: the smallest a group asks for (None when none
    asks); a ValueError when a group whose threshold runs ``(1 + k)``-token
    speculative rows as decodes would get less than ``1 + k``."""
    t = None
    for b in thresholds:
        if b is not None and (t is None or b < t):
            t = b
    spec = 1 + num_speculative_tokens
    for g, b in enumerate(thresholds):
        if num_speculative_tokens >= 1 and b is not None and b >= spec and t is not None and t < spec:
            raise ValueError(f"thresholds={thresholds}: no reorder threshold satisfies every KV-cache group: group {g} "
                             f"runs {spec}-token speculative rows as decodes (threshold {b}), another asks for at most {t}")
    return t


def region(c: int, q: int, p: int, t: int) -> int:
    """The region (index into ``REGIONS``) of one request under threshold ``t``."""
    if c == 0:
        return 3  # prefill: nothing computed yet (a first chunk)
    if q > t:
        return 2  # long extend: has context, above the threshold
    if c < p:
        return 1  # short extend: below the threshold, still prefilling
    return 0  # decode: below the threshold, done prefilling


def split_counts(q: list[int], c: list[int], p: list[int], b: int, require_uniform: bool, treat_short_extends_as_decodes: bool
                 ) -> Counts4:
    """A group's decode/prefill split of rows in the order given: the decodes
    are the longest prefix of rows with ``q <= b`` (and ``q == q[0]`` under
    ``require_uniform``; not prefilling unless short extends count as decodes)."""
    num_decodes = 0
    for i in range(len(q)):
        if q[i] > b:
            break
        if require_uniform and q[i] != q[0]:
            break
        if not treat_short_extends_as_decodes and c[i] < p[i]:
            break
        num_decodes += 1
    decode_tokens = 0
    for i in range(num_decodes):
        decode_tokens += q[i]
    return num_decodes, len(q) - num_decodes, decode_tokens, sum(q) - decode_tokens


def extend_counts(q: list[int], c: list[int], b: int) -> Counts6:
    """A group's decode/extend/prefill split of rows in the order given: the
    decodes are the longest prefix with ``q <= b``; the prefills start at the
    first row with ``q > b`` and nothing computed; the extends lie between."""
    num_decodes = 0
    while num_decodes < len(q) and q[num_decodes] <= b:
        num_decodes += 1
    first_prefill = len(q)
    for i in range(num_decodes, len(q)):
        if q[i] > b and c[i] == 0:
            first_prefill = i
            break
    decode_tokens = sum(q[:num_decodes])
    prefill_tokens = sum(q[first_prefill:])
    return (num_decodes, first_prefill - num_decodes, len(q) - first_prefill,
            decode_tokens, sum(q) - decode_tokens - prefill_tokens, prefill_tokens)


def classify(q: list[int], c: list[int], p: list[int], thresholds: list[int | None]
             ) -> tuple[list[list[Counts4] | None], list[Counts6 | None]]:
    """Every group's classifications of rows in the order given."""
    splits: list[list[Counts4] | None] = []
    extends: list[Counts6 | None] = []
    for b in thresholds:
        if b is None:
            splits.append(None)
            extends.append(None)
        else:
            splits.append([split_counts(q, c, p, b, u, s) for u, s in SPLIT_FLAGS])
            extends.append(extend_counts(q, c, b))
    return splits, extends


def batch_order(num_computed_tokens: Any, num_scheduled_tokens: Any, num_prompt_tokens: Any, thresholds: Any,
                num_speculative_tokens: Any) -> BatchOrder:
    """Contract G: aggregate, reorder into the four regions (stable), classify."""
    c, q, p, b, k = check_step(num_computed_tokens, num_scheduled_tokens, num_prompt_tokens, thresholds, num_speculative_tokens)
    t = aggregate_threshold(b, k)
    order = list(range(len(c)))
    if t is not None:
        keyed = []
        for i in range(len(c)):
            keyed.append((region(c[i], q[i], p[i], t), i))
        order = [i for _, i in sorted(keyed)]
    rows_c = [c[i] for i in order]
    rows_q = [q[i] for i in order]
    rows_p = [p[i] for i in order]
    splits, extends = classify(rows_q, rows_c, rows_p, b)
    return BatchOrder(t, order, rows_c, rows_p, rows_q, splits, extends)
