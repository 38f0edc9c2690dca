"""Known buggy variants of contract G, batch order and decode/prefill
classification: the engine's threshold aggregation and its earlier
classification with uniform decodes (shipped), and mutants modelled on the
engine's history of this code (speculative rows sorted behind short rows, a
reorder that forgets part of a request's state, a threshold off by one)."""

from __future__ import annotations

import numpy as np

from batchfuzz.impl.batch_order_numpy import RowBatch, pipeline, regions, split
from batchfuzz.reference.batch_order import Counts4
from batchfuzz.registry import Variant

# ---------------------------------------------------------------- threshold aggregation


def _min_asked(thresholds: list[int | None], k: int) -> int | None:
    """The engine's aggregation (``calculate_reorder_batch_threshold``): the
    smallest threshold asked for, whatever the groups run as decodes."""
    asked = [b for b in thresholds if b is not None]
    return min(asked) if asked else None


def _max_asked(thresholds: list[int | None], k: int) -> int | None:
    asked = [b for b in thresholds if b is not None]
    return max(asked) if asked else None


def _none_as_one(thresholds: list[int | None], k: int) -> int | None:
    """A group asking for no reordering counted as threshold 1."""
    asked = [1 if b is None else b for b in thresholds]
    return min(asked) if asked else None


# ---------------------------------------------------------------- reorders


def _apply(batch: RowBatch, target: list[int]) -> None:
    wanted = [batch.req_ids[i] for i in target]
    for dst, want in enumerate(wanted):
        at = batch.req_id_to_index[want]
        if at != dst:
            batch.swap_states(dst, at)


def _q(batch: RowBatch, scheduled: dict[str, int]) -> np.ndarray:
    return np.array([scheduled[r] for r in batch.req_ids], dtype=np.int64)


def _two_regions(batch: RowBatch, scheduled: dict[str, int], t: int) -> None:
    """Rows with ``q <= t`` first, whatever they computed (two regions, not
    four): a short prefill chunk stays ahead of a speculative row."""
    q = _q(batch, scheduled)
    _apply(batch, np.argsort(q > t, kind="stable").tolist())


def _by_query_len(batch: RowBatch, scheduled: dict[str, int], t: int) -> None:
    """Rows sorted by scheduled tokens, short first."""
    _apply(batch, np.argsort(_q(batch, scheduled), kind="stable").tolist())


class _ForgetsPrompt(RowBatch):
    def swap_states(self, i1: int, i2: int) -> None:
        ids = self.req_ids
        ids[i1], ids[i2] = ids[i2], ids[i1]
        self.req_id_to_index[ids[i1]], self.req_id_to_index[ids[i2]] = i1, i2
        a = self.num_computed_tokens_cpu
        a[[i1, i2]] = a[[i2, i1]]


def _reorder_on(cls: type[RowBatch]):
    def reorder(batch: RowBatch, scheduled: dict[str, int], t: int) -> None:
        batch.__class__ = cls
        q = _q(batch, scheduled)
        _apply(batch, np.argsort(regions(batch.num_computed_tokens_cpu, q, batch.num_prompt_tokens, t), kind="stable").tolist())

    return reorder


class _Copies(RowBatch):
    """``swap_states`` that copies row ``i2`` over ``i1`` instead of exchanging them."""

    def swap_states(self, i1: int, i2: int) -> None:
        self.req_ids[i1] = self.req_ids[i2]
        self.req_id_to_index[self.req_ids[i1]] = i1
        for a in (self.num_computed_tokens_cpu, self.num_prompt_tokens):
            a[i1] = a[i2]


# ---------------------------------------------------------------- classifications


def _uniform_ignores_prefilling(q: np.ndarray, c: np.ndarray, p: np.ndarray, b: int, require_uniform: bool,
                                treat_short: bool) -> Counts4:
    """vLLM 0.22.0 and 0.23.0's ``split_decodes_and_prefills``: under
    ``require_uniform``, a batch of equal query lengths is all decodes even
    when short extends must count as prefills."""
    if require_uniform and q[0] <= b and bool((q == q[0]).all()):
        return len(q), 0, int(q.sum()), 0
    return split(q, c, p, b, require_uniform, treat_short)


def _threshold_exclusive(q: np.ndarray, c: np.ndarray, p: np.ndarray, b: int, require_uniform: bool, treat_short: bool) -> Counts4:
    """A decode needs ``q < b`` instead of ``q <= b``."""
    return split(q, c, p, b - 1, require_uniform, treat_short) if b > 1 else (0, len(q), 0, int(q.sum()))


min_without_refusal = pipeline(aggregate=_min_asked)
min_without_refusal.__doc__ = "The engine's aggregation: the smallest threshold, even below what a group runs as decodes."
uniform_ignores_prefilling = pipeline(split=_uniform_ignores_prefilling)
uniform_ignores_prefilling.__doc__ = _uniform_ignores_prefilling.__doc__
two_region_reorder = pipeline(reorder=_two_regions)
two_region_reorder.__doc__ = _two_regions.__doc__
reorder_by_query_len = pipeline(reorder=_by_query_len)
reorder_by_query_len.__doc__ = _by_query_len.__doc__
max_threshold = pipeline(aggregate=_max_asked)
max_threshold.__doc__ = "The largest threshold asked for instead of the smallest."
none_as_one = pipeline(aggregate=_none_as_one)
none_as_one.__doc__ = _none_as_one.__doc__
swap_forgets_prompt = pipeline(reorder=_reorder_on(_ForgetsPrompt))
swap_forgets_prompt.__doc__ = "swap_states exchanges the request ids and computed tokens but not the prompt lengths."
swap_copies_row = pipeline(reorder=_reorder_on(_Copies))
swap_copies_row.__doc__ = _Copies.__doc__
threshold_exclusive = pipeline(split=_threshold_exclusive)
threshold_exclusive.__doc__ = _threshold_exclusive.__doc__


def _step(c: list[int], q: list[int], p: list[int], thresholds: list[int | None], k: int) -> dict[str, object]:
    return {"num_computed_tokens": c, "num_scheduled_tokens": q, "num_prompt_tokens": p, "thresholds": thresholds,
            "num_speculative_tokens": k}


VARIANTS = (
    Variant("min_without_refusal", "the engine's threshold: the smallest asked for, even when a group runs (1 + k)-token "
            "speculative rows as decodes (shipped, every release of the matrix)", min_without_refusal, "shipped",
            ("threshold_matches_oracle", "spec_rows_are_decodes"), _step([0], [1], [1], [1, 2], 1)),
    Variant("uniform_ignores_prefilling", "require_uniform counts a uniform batch as all decodes even without "
            "treat_short_extends_as_decodes (shipped in vLLM 0.22.0 and 0.23.0)", uniform_ignores_prefilling, "shipped",
            ("split_counts_match_order",), _step([0], [1], [1], [1], 0)),
    Variant("two_region_reorder", "q <= t first whatever was computed: a short prefill chunk stays ahead of a speculative "
            "row, which a uniform split then counts as a prefill", two_region_reorder, "mutant",
            ("regions_in_order", "spec_rows_are_decodes"), _step([0, 1], [1, 1], [1, 1], [1], 0)),
    Variant("reorder_by_query_len", "rows sorted by scheduled tokens, short first", reorder_by_query_len, "mutant",
            ("regions_in_order",), _step([0, 1], [1, 1], [1, 1], [1], 0)),
    Variant("max_threshold", "the largest threshold asked for", max_threshold, "mutant",
            ("threshold_matches_oracle",), _step([0], [1], [1], [1, 2], 0)),
    Variant("none_as_one", "a group asking for no reordering counted as threshold 1", none_as_one, "mutant",
            ("threshold_matches_oracle",), _step([0], [1], [1], [None], 0)),
    Variant("swap_forgets_prompt", "swap_states leaves the prompt lengths in place", swap_forgets_prompt, "mutant",
            ("state_moves_with_request",), _step([0, 1], [1, 1], [1, 2], [1], 0)),
    Variant("swap_copies_row", "swap_states copies one row over the other", swap_copies_row, "mutant",
            ("is_permutation",), _step([0, 1], [1, 1], [1, 1], [1], 0)),
    Variant("threshold_exclusive", "a decode needs q < b instead of q <= b", threshold_exclusive, "mutant",
            ("split_counts_match_order",), _step([0], [1], [1], [1], 0)),
)
