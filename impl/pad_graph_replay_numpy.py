"""numpy implementation of contract K, ``pad_graph_replay``: the graph size
by ``searchsorted`` over the captured sizes, the padded rows written with
slice fills into copies of the persistent buffers, then the step's rows
copied over them, as a runner writes its buffers."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.pad_graph_replay import check_args


def pad_graph_replay(capture_bs: Any, seq_lens: Any, positions: Any, out_cache_loc: Any, num_tokens_per_bs: Any,
                     seq_len_fill_value: Any, seq_lens_buf: Any, positions_buf: Any, out_cache_loc_buf: Any
                     ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    sizes, lens, pos, loc, t, fill = check_args(capture_bs, seq_lens, positions, out_cache_loc, num_tokens_per_bs,
                                                seq_len_fill_value, seq_lens_buf, positions_buf, out_cache_loc_buf)
    r = len(lens)
    bs = int(np.asarray(sizes)[np.searchsorted(np.asarray(sizes), r, side="left")])
    out = []
    for buf, real, pad, rows in ((seq_lens_buf, lens, fill, bs), (positions_buf, pos, 0, bs * t), (out_cache_loc_buf, loc, 0, bs * t)):
        work = np.array(buf[:rows], dtype=np.int64)
        work[len(real):] = pad
        work[: len(real)] = real
        out.append(work)
    return bs, out[0], out[1], out[2]
