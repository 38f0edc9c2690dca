"""Known buggy variants of contract K, the padding of a CUDA-graph replay:
mutants modelled on the bugs SGLang's runners have had or could have
(a padded row left as an earlier replay wrote it, in each of the three
buffers; the bisection off by one either way or over the token count; the
padding written over the real rows; the padding one row short), each the
oracle's rule with one knob turned."""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from batchfuzz.reference.pad_graph_replay import check_args
from batchfuzz.registry import Variant
from batchfuzz.strategies.pad_graph_replay import case_of


def _pad(args: tuple[Any, ...], *, stale: str = "", side: str = "left", shift: int = 0, by_tokens: bool = False,
         fill_after: bool = False, short: int = 0) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    sizes, lens, pos, loc, t, fill = check_args(*args)
    key = len(lens) * t if by_tokens else len(lens)
    index = (bisect.bisect_right if side == "right" else bisect.bisect_left)(sizes, key) + shift
    bs = sizes[min(max(index, 0), len(sizes) - 1)]
    out = []
    for name, buf, real, pad, rows in (("seq_lens", args[6], lens, fill, bs), ("positions", args[7], pos, 0, bs * t),
                                       ("out_cache_loc", args[8], loc, 0, bs * t)):
        work = np.array(buf[:rows], dtype=np.int64)
        if name != stale:
            work[len(real): rows - short * (t if rows != bs else 1)] = pad
        work[: min(len(real), rows)] = real[:rows]
        if fill_after and name == "seq_lens" and bs != len(lens):
            work[:] = pad  # the fill after the copy: the real rows overwritten too
        out.append(work)
    return bs, out[0], out[1], out[2]


def stale_padded_positions(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Padded token rows of ``positions`` left as an earlier replay wrote them (the model runner's replay_prepare)."""
    return _pad(args, stale="positions")


def stale_padded_seq_lens(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Padded rows of ``seq_lens`` not set to the fill value."""
    return _pad(args, stale="seq_lens")


def stale_padded_out_cache_loc(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Padded token rows of ``out_cache_loc`` not zeroed: the graph writes KV into stale slots."""
    return _pad(args, stale="out_cache_loc")


def bisect_right(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``bisect_right``: a step of exactly a captured size replays the next larger graph."""
    return _pad(args, side="right")


def bisect_one_below(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """The captured size one below the bisection's: a graph too small for the step."""
    return _pad(args, shift=-1)


def bisect_over_tokens(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """The size bisected over ``R * T`` tokens, not ``R`` requests (the token count taken for a batch size)."""
    return _pad(args, by_tokens=True)


def fill_after_copy(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``seq_lens`` filled after the step's rows were copied: a padded replay sees only the fill value."""
    return _pad(args, fill_after=True)


def padding_one_short(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """The padding stops one request short of the graph size: the last padded row keeps its stale values."""
    return _pad(args, short=1)


def writes_step_seq_lens(*args: Any) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Pads the caller's ``seq_lens`` in place (its rows past the real ones do not exist: it clamps them to >= 1 first)."""
    if isinstance(args[1], np.ndarray):
        np.maximum(args[1], 1, out=args[1])
    return _pad(args)


def _padded_one(buffer: str) -> dict[str, Any]:
    """R = 0 replayed on the graph of 1, the stale buffer ``buffer`` holding 1 (the others 0)."""
    stale = {"seq_lens_buf": [0], "positions_buf": [0], "out_cache_loc_buf": [0], buffer: [1]}
    args = case_of([1], [], 1, 0, stale=(stale["seq_lens_buf"], stale["positions_buf"], stale["out_cache_loc_buf"])).args
    return {k: args[k] for k in ("capture_bs", "seq_lens", "seq_len_fill_value", buffer)}


def _sizes(capture_bs: list[int], seq_lens: list[int], t: int = 1) -> dict[str, Any]:
    args = case_of(capture_bs, seq_lens, t).args
    return {k: args[k] for k in ("capture_bs", "seq_lens", "num_tokens_per_bs")}


VARIANTS = (
    Variant("stale_padded_positions", "padded positions not zeroed (SGLang's model runner, every release)",
            stale_padded_positions, "mutant", ("padded_positions_zeroed", "matches_oracle"), _padded_one("positions_buf")),
    Variant("stale_padded_seq_lens", "padded seq_lens not set to the fill value", stale_padded_seq_lens, "mutant",
            ("padded_seq_lens_filled", "matches_oracle"), _padded_one("seq_lens_buf")),
    Variant("stale_padded_out_cache_loc", "padded out_cache_loc not zeroed", stale_padded_out_cache_loc, "mutant",
            ("padded_out_cache_loc_zeroed", "matches_oracle"), _padded_one("out_cache_loc_buf")),
    Variant("bisect_right", "bisect_right: an exactly captured size replays the next graph", bisect_right, "mutant",
            ("size_smallest", "matches_oracle"), _sizes([1, 2], [0])),
    Variant("bisect_one_below", "the captured size below the one that fits", bisect_one_below, "mutant",
            ("size_fits", "matches_oracle"), _sizes([1, 2], [0, 0])),
    Variant("bisect_over_tokens", "the size bisected over R * T tokens", bisect_over_tokens, "mutant",
            ("size_smallest", "matches_oracle"), _sizes([1, 2], [0], 2)),
    Variant("fill_after_copy", "seq_lens filled after the real rows were copied", fill_after_copy, "mutant",
            ("real_rows_copied", "matches_oracle"), {**_sizes([2], [1]), "seq_len_fill_value": 0}),
    Variant("padding_one_short", "the padding stops a row short of the graph size", padding_one_short, "mutant",
            ("padded_seq_lens_filled", "matches_oracle"), _padded_one("seq_lens_buf")),
    Variant("writes_step_seq_lens", "clamps the caller's seq_lens in place", writes_step_seq_lens, "mutant",
            ("inputs_unchanged",), _sizes([1], [0])),
)
