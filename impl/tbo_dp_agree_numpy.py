"""numpy implementation of contract M, ``tbo_dp_agree``: the forward modes
as codes, the idle ranks masked out, agreement as one ``np.unique`` of the
rest and every rank's flag as ``np.all``."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.tbo_dp_agree import FORWARD_MODES, IDLE, check_args


def tbo_dp_agree(can_run_tbo: Any, forward_modes: Any, split_seq_index: Any,
                 enable_two_batch_overlap: Any) -> list[tuple[int | None, str | None]]:
    can, modes, idx, enabled = check_args(can_run_tbo, forward_modes, split_seq_index, enable_two_batch_overlap)
    codes = np.array([FORWARD_MODES.index(m) for m in modes])
    voting = np.unique(codes[codes != FORWARD_MODES.index(IDLE)])
    if not (enabled and bool(np.all(np.array(can))) and voting.size == 1):
        return [(None, None)] * len(can)
    mode = FORWARD_MODES[int(voting[0])]
    return [(int(s), mode) for s in np.array(idx)]
