"""Oracle of contract K, ``pad_graph_replay``: the padding of a batch
replayed on a captured CUDA graph (docs/contracts.md, contract K).

Plain loops, one line per sentence of the contract's text. The rule is
SGLang's (the CUDA-graph runners' ``replay_prepare``/``replay``): the graph
of the smallest captured batch size that holds the step's ``R`` requests is
replayed; its persistent buffers hold the step's rows first, then padded
rows with fixed values (``seq_lens`` the fill value, ``positions`` and
``out_cache_loc`` 0), whatever an earlier replay left there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference._args import check_count_array, check_int

ARGUMENTS = ("capture_bs", "seq_lens", "positions", "out_cache_loc", "num_tokens_per_bs", "seq_len_fill_value",
             "seq_lens_buf", "positions_buf", "out_cache_loc_buf")


def check_args(capture_bs: Any, seq_lens: Any, positions: Any, out_cache_loc: Any, num_tokens_per_bs: Any,
               seq_len_fill_value: Any, seq_lens_buf: Any, positions_buf: Any, out_cache_loc_buf: Any
               ) -> tuple[list[int], list[int], list[int], list[int], int, int]:
    """Validate the arguments: ``capture_bs`` the captured batch sizes, a
    strictly increasing 1-D integer array of sizes >= 1, not empty;
    ``seq_lens`` the step's ``R <= capture_bs[-1]`` sequence lengths (>= 0);
    ``positions`` and ``out_cache_loc`` its ``R * T`` token rows (>= 0),
    ``T = num_tokens_per_bs >= 1``; ``seq_len_fill_value >= 0``; the three
    persistent buffers (any values: what an earlier replay left) of at least
    ``capture_bs[-1]`` rows (``seq_lens_buf``) and ``capture_bs[-1] * T``
    rows (the other two). Returns the Python values of the first six."""
    sizes = [int(x) for x in check_count_array("capture_bs", capture_bs, minimum=1)]
    if not sizes:
        raise ValueError("capture_bs must hold at least one captured batch size, got []")
    for i in range(1, len(sizes)):
        if sizes[i] <= sizes[i - 1]:
            raise ValueError(f"capture_bs must be strictly increasing, got capture_bs[{i - 1}] = {sizes[i - 1]}, "
                             f"capture_bs[{i}] = {sizes[i]}")
    lens = [int(x) for x in check_count_array("seq_lens", seq_lens, minimum=0)]
    t = check_int("num_tokens_per_bs", num_tokens_per_bs, minimum=1)
    fill = check_int("seq_len_fill_value", seq_len_fill_value, minimum=0)
    max_bs = sizes[-1]
    if len(lens) > max_bs:
        raise ValueError(f"seq_lens must have at most capture_bs[-1] ({max_bs}) rows, got {len(lens)}")
    tokens = []
    for name, value in (("positions", positions), ("out_cache_loc", out_cache_loc)):
        arr = [int(x) for x in check_count_array(name, value, minimum=0)]
        if len(arr) != len(lens) * t:
            raise ValueError(f"{name} must have R * num_tokens_per_bs = {len(lens) * t} rows, got {len(arr)}")
        tokens.append(arr)
    for name, value, rows in (("seq_lens_buf", seq_lens_buf, max_bs), ("positions_buf", positions_buf, max_bs * t),
                              ("out_cache_loc_buf", out_cache_loc_buf, max_bs * t)):
        buf = check_count_array(name, value, minimum=None)
        if len(buf) < rows:
            raise ValueError(f"{name} must have at least {rows} rows, got {len(buf)}")
    return sizes, lens, tokens[0], tokens[1], t, fill


def graph_size(capture_bs: list[int], num_reqs: int) -> int:
    """The smallest captured batch size that holds ``num_reqs`` requests."""
    for size in capture_bs:
        if size >= num_reqs:
            return size
    raise ValueError(f"no captured batch size holds {num_reqs} requests (capture_bs = {capture_bs})")


def pad_graph_replay(capture_bs: Any, seq_lens: Any, positions: Any, out_cache_loc: Any, num_tokens_per_bs: Any,
                     seq_len_fill_value: Any, seq_lens_buf: Any, positions_buf: Any, out_cache_loc_buf: Any
                     ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """``(bs, seq_lens, positions, out_cache_loc)`` as the graph of ``bs``
    requests reads them (the buffers' first ``bs`` and ``bs * T`` rows), int64."""
    sizes, lens, pos, loc, t, fill = check_args(capture_bs, seq_lens, positions, out_cache_loc, num_tokens_per_bs,
                                                seq_len_fill_value, seq_lens_buf, positions_buf, out_cache_loc_buf)
    bs = graph_size(sizes, len(lens))
    out_lens = []
    for i in range(bs):
        out_lens.append(lens[i] if i < len(lens) else fill)  # real rows copied, padded rows the fill value
    out_pos, out_loc = [], []
    for j in range(bs * t):
        out_pos.append(pos[j] if j < len(pos) else 0)  # padded tokens at position 0
        out_loc.append(loc[j] if j < len(loc) else 0)  # and cache slot 0
    return bs, np.array(out_lens, dtype=np.int64), np.array(out_pos, dtype=np.int64), np.array(out_loc, dtype=np.int64)
