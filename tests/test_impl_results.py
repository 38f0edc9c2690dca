"""Result dtypes and shapes of impl/ functions that the contract properties
cannot see: the properties compare values, not dtypes (docs/contracts.md,
common rules, "Decision: result dtypes"), and they reach the device forms
through the registry's numpy bindings, which slice the result themselves.
Each test here kills a mutant that survived the properties (docs/mutation.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batchfuzz.impl import pad_query_start_loc_torch, split_dummy_tokens_numpy


@pytest.mark.parametrize(("num_reqs", "num_tokens"), [(1, 1), (3, 5), (4, 8), (256, 496)])
def test_input_batch_builder_is_int32(num_reqs: int, num_tokens: int) -> None:
    """The engine's dummy input-batch builder fills an int32 array (the dtype
    of the engine's persistent ``num_scheduled_tokens``), not numpy's default int."""
    out = split_dummy_tokens_numpy.input_batch_builder(num_reqs, num_tokens)
    assert out.dtype == np.int32, out.dtype
    assert int(out.sum()) == num_tokens


@pytest.mark.parametrize(("counts", "num_reqs_padded", "capacity"), [([3], 1, 8), ([2, 0, 5], 4, 6), ([], 2, 3)])
def test_query_start_loc_graph_returns_p_plus_one_entries(counts: list[int], num_reqs_padded: int, capacity: int) -> None:
    """The CUDA-graph form returns ``out[:P+1]`` of a persistent ``out`` larger
    than that (the binding returns its own slice, so the properties never see
    the returned view), and leaves the rest of ``out`` as it was."""
    p = num_reqs_padded
    staging = torch.full((p,), 987654, dtype=torch.int64)  # stale past R
    staging[: len(counts)] = torch.tensor(counts, dtype=torch.int64)
    out = torch.full((capacity,), -1, dtype=torch.int32)
    q = pad_query_start_loc_torch.pad_query_start_loc_graph(staging, torch.tensor(len(counts)), p, out)
    total = sum(counts)
    expected = [0, *np.cumsum(counts).tolist(), *[total] * (p - len(counts))]
    assert q.tolist() == expected
    assert out[p + 1 :].tolist() == [-1] * (capacity - p - 1)
