"""Plain data types shared by oracles, implementations and strategies."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np


@dataclass
class DummyBuffers:
    """Persistent per-step buffers of a model runner (contract B).

    ``seq_lens`` has ``max_num_reqs`` entries, ``query_start_loc`` has
    ``max_num_reqs + 1``, ``positions`` and ``input_ids`` have ``max_num_tokens``.
    They may hold any stale values from earlier steps. Each may be int32 or int64.
    """

    seq_lens: Any
    query_start_loc: Any
    positions: Any
    input_ids: Any

    @property
    def max_num_reqs(self) -> int:
        return int(self.seq_lens.shape[0])

    @property
    def max_num_tokens(self) -> int:
        return int(self.positions.shape[0])

    @classmethod
    def zeros(cls, max_num_reqs: int, max_num_tokens: int, dtype: Any = np.int32) -> DummyBuffers:
        return cls(
            seq_lens=np.zeros(max_num_reqs, dtype=dtype),
            query_start_loc=np.zeros(max_num_reqs + 1, dtype=dtype),
            positions=np.zeros(max_num_tokens, dtype=dtype),
            input_ids=np.zeros(max_num_tokens, dtype=dtype),
        )

    def copy(self) -> DummyBuffers:
        return DummyBuffers(**{f.name: getattr(self, f.name).copy() for f in fields(self)})


@dataclass
class DummyBatch:
    """What ``make_dummy`` returns (contract B).

    ``seq_lens`` and ``query_start_loc`` are the whole persistent buffers;
    ``positions`` and ``input_ids`` are their first ``num_tokens`` entries.
    """

    num_scheduled_tokens: Any
    seq_lens: Any
    query_start_loc: Any
    positions: Any
    input_ids: Any
    idx_mapping: Any
    logits_indices: Any
    cu_num_logits: Any


DUMMY_BATCH_FIELDS = tuple(f.name for f in fields(DummyBatch))


@dataclass
class Step:
    """One scheduler step as contract E sees it (SPEC.md, contract E).

    ``num_computed_tokens[r]`` (c) and ``num_scheduled_tokens[r]`` (q) per
    request in batch order; ``block_tables[g]`` is group g's (R, W_g) table;
    ``block_sizes[g]`` its block size. Block id 0 is the null block.
    """

    num_computed_tokens: Any
    num_scheduled_tokens: Any
    block_tables: list[Any]
    block_sizes: list[int]

    @property
    def num_reqs(self) -> int:
        return len(self.num_scheduled_tokens)
