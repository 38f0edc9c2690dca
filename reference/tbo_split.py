"""Oracle of contract J, ``tbo_split``: the two-batch-overlap split of one
step into two children (docs/contracts.md, contract J).

Plain loops, one line per sentence of the contract's text. The rule is
SGLang's (``two_batch_overlap.py``: ``compute_split_seq_index``,
``compute_split_token_index``, ``_split_extend_seqs`` and its two helpers).
"""

from __future__ import annotations

import numbers
from typing import Any

from batchfuzz.reference._args import check_count_array

FORWARD_MODES = ("extend", "decode", "target_verify", "idle")


def check_args(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[str, list[int], float]:
    """Validate the arguments: ``forward_mode`` one of FORWARD_MODES,
    ``seq_lens`` a 1-D integer array of per-request token counts (extend:
    each >= 0; decode: each 1; target_verify: all equal, >= 1; idle: none),
    ``threshold`` a float in [0, 0.5]."""
    if not isinstance(forward_mode, str):
        raise TypeError(f"forward_mode must be a str, got {type(forward_mode).__name__} {forward_mode!r}")
    if forward_mode not in FORWARD_MODES:
        raise ValueError(f"forward_mode must be one of {FORWARD_MODES}, got {forward_mode!r}")
    lens = [int(x) for x in check_count_array("seq_lens", seq_lens, minimum=0)]
    if isinstance(threshold, bool) or not isinstance(threshold, numbers.Real):
        raise TypeError(f"threshold must be a float, got {type(threshold).__name__} {threshold!r}")
    if not 0.0 <= float(threshold) <= 0.5:
        raise ValueError(f"threshold must be in [0, 0.5], got {threshold!r}")
    if forward_mode == "idle" and lens:
        raise ValueError(f"seq_lens must be empty in idle mode, got {lens}")
    if forward_mode == "decode" and any(x != 1 for x in lens):
        raise ValueError(f"seq_lens must be all 1 in decode mode, got {lens}")
    if forward_mode == "target_verify" and (any(x != lens[0] for x in lens) if lens else False):
        raise ValueError(f"seq_lens must be all equal in target_verify mode, got {lens}")
    if forward_mode == "target_verify" and lens and lens[0] < 1:
        raise ValueError(f"seq_lens must be >= 1 in target_verify mode, got {lens}")
    return forward_mode, lens, float(threshold)


def balanced_index(lens: list[int]) -> int:
    """The balanced split: the first i in 1..R-1 reached by walking while
    |left - right| does not grow (ties move on), 0 when R < 2."""
    total = sum(lens)
    best, best_diff, left = 0, None, 0
    for i in range(1, len(lens)):
        left += lens[i - 1]
        diff = abs(left - (total - left))
        if best_diff is None or diff <= best_diff:
            best, best_diff = i, diff
        else:
            break
    return best


def is_lopsided(lens: list[int], threshold: float) -> bool:
    """The balanced split's left sum L is outside [N * threshold, N * (1 - threshold)]."""
    total = sum(lens)
    left = sum(lens[: balanced_index(lens)])
    return left < total * threshold or left > total * (1 - threshold)


def is_two_chunk(lens: list[int], threshold: float) -> bool:
    """Two-chunk mode: the balanced split is lopsided and token N // 2 lies
    strictly inside a request (it is not that request's first token), so
    that the cut request keeps a token in each child."""
    prefix = sum(lens[: cut_index(lens)])
    return is_lopsided(lens, threshold) and prefix < sum(lens) // 2


def cut_index(lens: list[int]) -> int:
    """The request holding token N // 2: the first i whose prefix sum
    lens[0] + ... + lens[i] exceeds N // 2 (0 when none does)."""
    half, left = sum(lens) // 2, 0
    for i, x in enumerate(lens):
        left += x
        if left > half:
            return i
    return 0


def tbo_split(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """``(split_seq_index, split_token_index, two_chunk)`` of the step."""
    mode, lens, thr = check_args(forward_mode, seq_lens, threshold)
    if mode == "idle":
        return 0, 0, False
    if mode in ("decode", "target_verify"):
        per_seq = lens[0] if lens else 1
        s = len(lens) // 2
        return s, s * per_seq, False
    if is_two_chunk(lens, thr):
        return cut_index(lens), sum(lens) // 2, True
    s = balanced_index(lens)
    return s, sum(lens[:s]), False
