"""Known buggy variants of contract J, the two-batch-overlap split: mutants
modelled on the kinds of bug SGLang's history shows around its split (a
split computed from a padded token count, a child left without a real
token, a request cut outside the two-chunk mode, a two-chunk cut that leaves
the cut request no token in one child, the two-chunk indices disagreeing),
each the oracle's rule with one knob turned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from batchfuzz.reference.tbo_split import balanced_index, check_args, cut_index, is_lopsided, is_two_chunk
from batchfuzz.registry import Variant


@dataclass(frozen=True)
class _Knobs:
    """The oracle's rule with one knob turned per variant (the defaults: the oracle's)."""

    padded_to: int = 1
    seq_floor: bool = False
    token_half: bool = False
    seq_after_cut: bool = False
    strict_ties: bool = False
    two_chunk: bool = True
    unguarded: bool = False
    always_half: bool = False


def _split(forward_mode: Any, seq_lens: Any, threshold: Any, knobs: _Knobs = _Knobs()) -> tuple[int, int, bool]:
    mode, lens, thr = check_args(forward_mode, seq_lens, threshold)
    if mode == "idle":
        return 0, 0, False
    total = sum(lens)
    if mode != "extend":
        per_seq = lens[0] if lens else 1
        counted = -(-total // knobs.padded_to) * knobs.padded_to  # the token count the split is computed from
        s = ((len(lens) - 1) // 2 if lens else 0) if knobs.seq_floor else (counted // per_seq) // 2
        if knobs.token_half:  # a cut at half the tokens, reported as a two-chunk split
            return s, total // 2, total // 2 != s * per_seq
        return s, s * per_seq, False
    b = balanced_index(lens)
    if knobs.strict_ties:
        b, best, left = 0, None, 0
        for i in range(1, len(lens)):
            left += lens[i - 1]
            diff = abs(2 * left - total)
            if best is None or diff < best:
                b, best = i, diff
            elif diff > best:
                break
    if knobs.two_chunk and (is_lopsided(lens, thr) if knobs.unguarded else is_two_chunk(lens, thr)):
        return cut_index(lens) + (1 if knobs.seq_after_cut else 0), total // 2, True
    return b, (total // 2 if knobs.always_half else sum(lens[:b])), False


def split_from_padded_count(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """Decode and verify: the split computed from the token count padded to a capture size (a multiple of 4)."""
    return _split(forward_mode, seq_lens, threshold, _Knobs(padded_to=4))


def empty_first_child(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """Decode and verify: half the requests rounded down from R - 1, so two requests give child A none."""
    return _split(forward_mode, seq_lens, threshold, _Knobs(seq_floor=True))


def verify_cut_at_token_half(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """Decode and verify: the token index at half the tokens, cutting a verified request's draft tokens."""
    return _split(forward_mode, seq_lens, threshold, _Knobs(token_half=True))


def two_chunk_seq_after_cut(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """Two-chunk mode: the sequence index of the request after the cut one, away from the token index."""
    return _split(forward_mode, seq_lens, threshold, _Knobs(seq_after_cut=True))


def two_chunk_unguarded(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """Two-chunk mode whenever the balanced split is lopsided, even when token N // 2 is a request's first
    token: that request goes to child A with no token there (the rule of SGLang 0.5.3 to 0.5.14)."""
    return _split(forward_mode, seq_lens, threshold, _Knobs(unguarded=True))


def balanced_strict_ties(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """The balanced split keeps the first of equal differences (``<`` for ``<=``)."""
    return _split(forward_mode, seq_lens, threshold, _Knobs(strict_ties=True))


def two_chunk_ignored(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """Never the two-chunk mode: a lopsided extend step keeps its lopsided (or empty) child."""
    return _split(forward_mode, seq_lens, threshold, _Knobs(two_chunk=False))


def cut_outside_two_chunk(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """Extend: the token index at half the tokens even when the balanced split is taken."""
    return _split(forward_mode, seq_lens, threshold, _Knobs(always_half=True))


def sorts_seq_lens(forward_mode: Any, seq_lens: Any, threshold: Any) -> tuple[int, int, bool]:
    """Sorts the caller's extend lengths in place (descending) before splitting them."""
    if forward_mode == "extend" and isinstance(seq_lens, np.ndarray):
        seq_lens[::-1].sort()
    return _split(forward_mode, seq_lens, threshold)


def _lens(mode: str, lens: list[int], threshold: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"forward_mode": mode, "seq_lens": np.asarray(lens, dtype=np.int32)}
    if threshold is not None:
        out["threshold"] = threshold
    return out


VARIANTS = (
    Variant("split_from_padded_count", "decode/verify split from the padded token count (a multiple of 4), not the real one",
            split_from_padded_count, "mutant", ("indices_in_range", "matches_oracle"), _lens("decode", [1])),
    Variant("empty_first_child", "decode/verify: (R - 1) // 2 requests to child A, none of two", empty_first_child, "mutant",
            ("both_children_real", "matches_oracle"), _lens("decode", [1, 1])),
    Variant("verify_cut_at_token_half", "decode/verify: token index N // 2, cutting a verified request",
            verify_cut_at_token_half, "mutant", ("two_chunk_only_in_extend", "matches_oracle"), _lens("target_verify", [2])),
    Variant("two_chunk_seq_after_cut", "two-chunk mode: sequence index one past the cut request", two_chunk_seq_after_cut,
            "mutant", ("indices_in_range", "tokens_follow_requests", "matches_oracle"), _lens("extend", [2])),
    Variant("two_chunk_unguarded", "two-chunk mode even when token N // 2 starts a request (SGLang 0.5.3-0.5.14's rule)",
            two_chunk_unguarded, "mutant", ("cut_request_in_both", "matches_oracle"), _lens("extend", [1])),
    Variant("balanced_strict_ties", "balanced split keeps the first of equal differences", balanced_strict_ties, "mutant",
            ("matches_oracle",), _lens("extend", [0, 0, 0])),
    Variant("two_chunk_ignored", "no two-chunk mode: one long request leaves child A empty", two_chunk_ignored, "mutant",
            ("both_children_real", "matches_oracle"), _lens("extend", [2])),
    Variant("cut_outside_two_chunk", "extend: token index N // 2 under the balanced split too", cut_outside_two_chunk,
            "mutant", ("tokens_follow_requests", "matches_oracle"), _lens("extend", [2], 0.0)),
    Variant("sorts_seq_lens", "sorts the caller's extend lengths in place", sorts_seq_lens, "mutant",
            ("inputs_unchanged",), _lens("extend", [0, 1])),
)
