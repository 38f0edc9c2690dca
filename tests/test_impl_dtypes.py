"""Result dtypes of impl/ that docs/contracts.md fixes but the contract
properties cannot see (they compare values, not dtypes; common rules,
"Decision: result dtypes"). Each test here kills a mutant that survived the
properties (docs/mutation.md)."""

from __future__ import annotations

import numpy as np
import pytest

from batchfuzz.impl import split_dummy_tokens_numpy


@pytest.mark.parametrize(("num_reqs", "num_tokens"), [(1, 1), (3, 5), (4, 8), (256, 496)])
def test_input_batch_builder_is_int32(num_reqs: int, num_tokens: int) -> None:
    """The engine's dummy input-batch builder fills an int32 array (the dtype
    of the engine's persistent ``num_scheduled_tokens``), not numpy's default int."""
    out = split_dummy_tokens_numpy.input_batch_builder(num_reqs, num_tokens)
    assert out.dtype == np.int32, out.dtype
    assert int(out.sum()) == num_tokens
