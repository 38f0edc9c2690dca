"""Known buggy variants of contract F, per-microbatch attention metadata: what
vLLM's v1 ``_make_metadata_with_slice`` shipped up to 0.28.0 (a continuation's
cached computed-token count left unshifted, positions dropped) and mutants
modelled on the mistakes the engine's own comments warn about (plain loops:
they are judged, not fast)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.reference.slice_ubatch_metadata import UbatchMetadata, check_slice_args, request_starts
from batchfuzz.registry import Variant


def _slice(args: tuple[Any, ...], *, shift_computed: bool = True, keep_positions: bool = True, subtract_twice: bool = False,
           rebase: bool = True, step_max: bool = False, padding_as_split: bool = False,
           rows_from_zero: bool = False) -> list[UbatchMetadata]:
    step = check_slice_args(*args)
    starts = request_starts(step.nst, step.num_reqs_padded)
    out = []
    for (rs, re), (ts, te) in step.slices:
        qsl = [starts[rs] if not rebase else 0]
        seq_lens, computed = [], []
        for r in range(rs, re):
            begin, end = starts[r], starts[r + 1]
            before = max(0, min(end, ts) - begin)
            after = end - max(begin, te)
            if not (padding_as_split and r == re - 1):
                after = max(0, after)  # a last token in the padding is no split of the last request
            own = (end - begin) - before - after
            c = step.computed[r] if r < step.num_reqs else 0
            qsl.append(qsl[-1] + own)
            computed.append(c + (before if shift_computed else 0))
            full = c + (end - begin)
            seq_lens.append(full - after - (before if subtract_twice else 0))
        lens = [qsl[i + 1] - qsl[i] for i in range(len(qsl) - 1)]
        rows = step.block_table[0: re - rs] if rows_from_zero else step.block_table[rs:re]
        out.append(UbatchMetadata(
            query_start_loc=np.array(qsl, dtype=np.int64), seq_lens=np.array(seq_lens, dtype=np.int64),
            num_computed_tokens=np.array(computed, dtype=np.int64),
            positions=np.array(step.positions[ts:te], dtype=np.int64) if keep_positions else None,
            block_table=np.array(rows, dtype=np.int64).reshape(len(rows), len(step.block_table[0])),
            max_query_len=max(step.nst) if step_max else max(lens)))
    return out


def computed_not_shifted(*args: Any) -> list[UbatchMetadata]:
    """A continuation keeps the step's computed-token count: the v1 slice
    copies the cached ``_num_computed_tokens_cpu`` rows as they are (vLLM up to 0.28.0)."""
    return _slice(args, shift_computed=False)


def positions_dropped(*args: Any) -> list[UbatchMetadata]:
    """The microbatch's metadata has no positions: the v1 slice builds its
    ``CommonAttentionMetadata`` without them (vLLM up to 0.28.0)."""
    return _slice(args, keep_positions=False)


def seq_lens_subtract_twice(*args: Any) -> list[UbatchMetadata]:
    """A straddler's ``seq_len`` loses the tokens of every other microbatch,
    those run earlier included (derived from the microbatch's own query length)."""
    return _slice(args, subtract_twice=True)


def query_start_loc_not_rebased(*args: Any) -> list[UbatchMetadata]:
    """``query_start_loc`` keeps the step's offsets (trimmed, not rebased to 0)."""
    return _slice(args, rebase=False)


def max_query_len_of_step(*args: Any) -> list[UbatchMetadata]:
    """Every microbatch reports the whole step's ``max_query_len``."""
    return _slice(args, step_max=True)


def padding_as_split(*args: Any) -> list[UbatchMetadata]:
    """A last token in the padding is taken for a split of the last request:
    the 'tokens skipped' past the end come out negative and the padding joins that request."""
    return _slice(args, padding_as_split=True)


def block_rows_from_zero(*args: Any) -> list[UbatchMetadata]:
    """Every microbatch reads the first rows of the block table (not offset by its first request)."""
    return _slice(args, rows_from_zero=True)


def advances_computed(*args: Any) -> list[UbatchMetadata]:
    """The right metadata, but the caller's ``num_computed_tokens`` advanced in place."""
    out = _slice(args)
    args[1][...] += 1
    return out


def _canon(nst: list[int], computed: list[int], positions: list[int], table: list[list[int]], padded: int, padded_reqs: int,
           slices: list[tuple[tuple[int, int], tuple[int, int]]]) -> dict[str, Any]:
    """A canonical counterexample (plain lists leave dtypes free; the block table's is int32)."""
    return {"num_scheduled_tokens": nst, "num_computed_tokens": computed, "positions": positions,
            "block_table": np.array(table, dtype=np.int32), "num_tokens_padded": padded, "num_reqs_padded": padded_reqs,
            "ubatch_slices": slices}


# One token padded to two: the second microbatch is padding only; it holds request 0 with no query token,
# as a continuation whose every token ran in the first microbatch.
_PADDED = _canon([1], [0], [0, 0], [[0]], 2, 1, [((0, 1), (0, 1)), ((0, 1), (1, 2))])
# Two one-token requests, one per microbatch.
_TWO = _canon([1, 1], [0, 0], [0, 0], [[0], [0]], 2, 2, [((0, 1), (0, 1)), ((1, 2), (1, 2))])

VARIANTS = (
    Variant("computed_not_shifted", "a continuation keeps the step's computed-token count (v1 _make_metadata_with_slice "
            "slices _num_computed_tokens_cpu unshifted, vLLM 0.22.0 to 0.28.0)", computed_not_shifted, "shipped",
            ("continuation_computed", "matches_oracle"), _PADDED),
    Variant("positions_dropped", "the microbatch's metadata has no positions (v1 _make_metadata_with_slice, vLLM 0.22.0 to "
            "0.28.0)", positions_dropped, "shipped", ("positions_follow_tokens", "matches_oracle"), _PADDED),
    Variant("seq_lens_subtract_twice", "a straddler's seq_len derived from the microbatch's own query length (the tokens "
            "run earlier subtracted too)", seq_lens_subtract_twice, "mutant",
            ("seq_lens_follow_requests", "continuation_computed", "matches_oracle"), _PADDED),
    Variant("query_start_loc_not_rebased", "query_start_loc keeps the step's offsets", query_start_loc_not_rebased, "mutant",
            ("query_start_loc_rebased", "matches_oracle"), _TWO),
    Variant("max_query_len_of_step", "every microbatch reports the whole step's max_query_len", max_query_len_of_step, "mutant",
            ("max_query_len_right", "matches_oracle"), _PADDED),
    Variant("padding_as_split", "a last token in the padding taken for a split of the last request", padding_as_split, "mutant",
            ("tokens_conserved", "seq_lens_follow_requests", "matches_oracle"), _PADDED),
    Variant("block_rows_from_zero", "block-table rows not offset by the microbatch's first request", block_rows_from_zero,
            "mutant", ("block_table_rows_follow", "matches_oracle"), _canon([1, 1], [0, 0], [0, 0], [[0], [1]], 2, 2,
                                                                             [((0, 1), (0, 1)), ((1, 2), (1, 2))])),
    Variant("advances_computed", "right metadata, but advances the caller's num_computed_tokens in place", advances_computed,
            "mutant", ("inputs_unchanged",), _PADDED),
)
