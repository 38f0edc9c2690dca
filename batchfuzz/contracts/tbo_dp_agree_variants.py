"""Known buggy variants of contract M, the data-parallel agreement on
two-batch overlap: SGLang 0.4.9's rule (an idle rank counted as decode), and
mutants (any rank's flag enough, each rank deciding from its own flag, the
forward modes not compared, the mode of rank 0 even when idle, the enable
switch ignored, rank 0's split index on every rank), each the oracle's rule
with one knob turned."""

from __future__ import annotations

from typing import Any

from batchfuzz.reference.tbo_dp_agree import IDLE, check_args
from batchfuzz.registry import Variant

Result = list[tuple[int | None, str | None]]


def _decide(idx: list[int], run: list[bool] | bool, mode: str | None) -> Result:
    runs = run if isinstance(run, list) else [run] * len(idx)
    return [(idx[r], mode) if runs[r] else (None, None) for r in range(len(idx))]


def _agreed(modes: list[str]) -> str | None:
    busy = [m for m in modes if m != IDLE]
    return busy[0] if busy and all(m == busy[0] for m in busy) else None


def idle_as_decode(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any, enable_two_batch_overlap: Any) -> Result:
    """SGLang 0.4.9: an idle rank's mode is taken as decode before the modes
    are compared, so all-idle ranks run overlap in decode mode and an idle
    rank beside extend ranks stops it."""
    can, modes, idx, enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    seen = ["decode" if m == IDLE else m for m in modes]
    agree = all(m == seen[0] for m in seen)
    return _decide(idx, enabled and all(can) and agree, seen[0])


def any_rank_can(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any, enable_two_batch_overlap: Any) -> Result:
    """The maximum of the flags instead of the minimum."""
    can, modes, idx, enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    mode = _agreed(modes)
    return _decide(idx, enabled and any(can) and mode is not None, mode)


def own_flag(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any, enable_two_batch_overlap: Any) -> Result:
    """Each rank decides from its own flag, not the gathered ones."""
    can, modes, idx, enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    mode = _agreed(modes)
    return _decide(idx, [enabled and c and mode is not None for c in can], mode)


def modes_not_compared(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any,
                       enable_two_batch_overlap: Any) -> Result:
    """Overlap runs whatever the other ranks' modes, in the first busy rank's mode."""
    can, modes, idx, enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    busy = [m for m in modes if m != IDLE]
    return _decide(idx, enabled and all(can) and bool(busy), busy[0] if busy else None)


def first_rank_mode(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any, enable_two_batch_overlap: Any) -> Result:
    """The agreed mode is rank 0's, even when rank 0 is idle."""
    can, modes, idx, enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    return _decide(idx, enabled and all(can) and _agreed(modes) is not None, modes[0])


def enable_ignored(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any, enable_two_batch_overlap: Any) -> Result:
    """The server's switch for two-batch overlap not read."""
    can, modes, idx, _enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    mode = _agreed(modes)
    return _decide(idx, all(can) and mode is not None, mode)


def first_rank_split(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any, enable_two_batch_overlap: Any) -> Result:
    """Every rank takes rank 0's split index for its own."""
    can, modes, idx, enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    mode = _agreed(modes)
    return _decide([idx[0]] * len(idx), enabled and all(can) and mode is not None, mode)


def _args(can: list[bool], modes: list[str], split: list[int], enabled: bool = True) -> dict[str, Any]:
    return {"can_run_tbo": can, "forward_modes": modes, "split_seq_index": split, "enable_two_batch_overlap": enabled}


VARIANTS = (
    Variant("idle_as_decode", "SGLang 0.4.9: an idle rank counted as decode, so all-idle ranks run overlap",
            idle_as_decode, "shipped", ("mode_of_busy_ranks", "matches_oracle"), _args([True], ["idle"], [0])),
    Variant("any_rank_can", "overlap when any rank can, not every rank", any_rank_can, "mutant",
            ("runs_only_if_every_rank_can", "matches_oracle"), _args([True, False], ["extend", "extend"], [0, 0])),
    Variant("own_flag", "each rank decides from its own flag", own_flag, "mutant",
            ("ranks_agree", "runs_only_if_every_rank_can", "matches_oracle"),
            _args([True, False], ["extend", "extend"], [0, 0])),
    Variant("modes_not_compared", "the ranks' forward modes not compared", modes_not_compared, "mutant",
            ("mode_of_busy_ranks", "matches_oracle"), _args([True, True], ["extend", "decode"], [0, 0])),
    Variant("first_rank_mode", "the agreed mode is rank 0's, idle or not", first_rank_mode, "mutant",
            ("mode_of_busy_ranks", "matches_oracle"), _args([True, True], ["idle", "extend"], [0, 0])),
    Variant("enable_ignored", "the enable switch not read", enable_ignored, "mutant",
            ("runs_only_if_every_rank_can", "matches_oracle"), _args([True], ["extend"], [0], False)),
    Variant("first_rank_split", "rank 0's split index on every rank", first_rank_split, "mutant",
            ("keeps_own_split", "matches_oracle"), _args([True, True], ["extend", "extend"], [0, 1])),
)
