"""Oracle of contract M, ``tbo_dp_agree``: whether the data-parallel ranks
run two-batch overlap in a step, and in which forward mode (docs/contracts.md,
contract M).

The rule is SGLang's ``TboDPAttentionPreparer.compute_output`` and its
``_compute_global_forward_mode`` (``two_batch_overlap.py``; the code has no
comments or docstrings on it, so the rule is read from the statements):
every rank gathers every rank's "can run" flag and forward mode; overlap
runs when it is enabled, the minimum of the flags is true, and the modes of
the ranks that are not idle are all the same (with at least one such rank).
Then every rank keeps its own split index and takes that common mode;
otherwise every rank gets ``(None, None)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference._args import check_choice, check_int

ARGUMENTS = ("can_run_tbo", "forward_modes", "split_seq_index", "enable_two_batch_overlap")
FORWARD_MODES = ("extend", "decode", "target_verify", "idle")
IDLE = "idle"


def _check_bool(name: str, value: Any) -> bool:
    """``value`` as a Python bool (a numpy bool too); TypeError naming ``name`` for anything else, 0 and 1 included."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r:.60}")
    return bool(value)


def _check_list(name: str, value: Any) -> list[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list with one entry per rank, got {type(value).__name__} {value!r:.60}")
    return list(value)


def check_args(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any,
               enable_two_batch_overlap: Any) -> tuple[list[bool], list[str], list[int], bool]:
    """Validate: ``can_run_tbo`` (bools), ``forward_modes`` (each one of
    FORWARD_MODES) and ``split_seq_index`` (ints >= 0) one entry per rank, at
    least one rank, the same length; ``enable_two_batch_overlap`` a bool."""
    can = [_check_bool(f"can_run_tbo[{r}]", v) for r, v in enumerate(_check_list("can_run_tbo", can_run_tbo))]
    if not can:
        raise ValueError("can_run_tbo must have at least one rank, got []")
    modes = _check_list("forward_modes", forward_modes)
    split = _check_list("split_seq_index", split_seq_index)
    for name, seq in (("forward_modes", modes), ("split_seq_index", split)):
        if len(seq) != len(can):
            raise ValueError(f"{name} must have one entry per rank ({len(can)}, as can_run_tbo), got {len(seq)}")
    for r, m in enumerate(modes):
        if not isinstance(m, str):
            raise TypeError(f"forward_modes[{r}] must be a str, got {type(m).__name__} {m!r:.60}")
        check_choice(f"forward_modes[{r}]", m, FORWARD_MODES)
    idx = [check_int(f"split_seq_index[{r}]", s, minimum=0) for r, s in enumerate(split)]
    return can, modes, idx, _check_bool("enable_two_batch_overlap", enable_two_batch_overlap)


def tbo_dp_agree(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any,
                 enable_two_batch_overlap: Any) -> list[tuple[int | None, str | None]]:
    """One ``(split_seq_index, forward_mode)`` per rank: the rank's own split
    and the common mode when overlap runs, ``(None, None)`` on every rank when not."""
    can, modes, idx, enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    busy = [m for m in modes if m != IDLE]  # idle ranks do not vote on the mode
    modes_agree = len(busy) > 0 and all(m == busy[0] for m in busy)
    every_rank_can = all(can)  # SGLang: the minimum of the gathered flags
    run = enabled and every_rank_can and modes_agree
    if not run:
        return [(None, None) for _ in can]
    return [(idx[r], busy[0]) for r in range(len(can))]
