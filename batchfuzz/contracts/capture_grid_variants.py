"""Known buggy variants of contract O, the CUDA-graph capture grid: mutants of
the oracle's grid (the cap not clipped at the token budget, a zero size, a
size appended out of order, sequence parallelism ignored, the sequence
parallel filter applied after a cap below ``tp_size`` as vLLM 0.22.0 to
0.28.0 do, the off-stride budget dropped, a ceiling that ignores ``q``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from batchfuzz.reference.capture_grid import CEILING, check_args, decode_tokens, unit
from batchfuzz.reference.capture_grid import capture_grid as oracle
from batchfuzz.registry import Variant


def _powers(cap: int, u: int) -> list[int]:
    """``u`` times every power of two up to ``cap``."""
    out, k = [], u
    while k <= cap:
        out.append(k)
        k *= 2
    return out


def _grid(cap: int, u: int, wanted: Iterable[int]) -> list[int]:
    """The oracle's shape over a given cap: powers of two of the unit, the cap, and each wanted size rounded up."""
    extra = {-(-w // u) * u for w in wanted}
    return sorted({*_powers(cap, u), *([cap] if cap >= 1 else []), *(w for w in extra if 1 <= w <= cap)})


def budget_unclipped(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                     sequence_parallel: Any) -> list[int]:
    """The cap ``min(2 S q, ceiling)`` not clipped at the token budget."""
    s, b, q, t, sp = check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
    u = unit(t, sp)
    return _grid(min(2 * s * q, CEILING) // u * u, u, (decode_tokens(s, b, q), b))


def zero_head(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
              sequence_parallel: Any) -> list[int]:
    """A graph of 0 tokens at the head of the grid."""
    return [0, *oracle(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)]


def appended_unsorted(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                      sequence_parallel: Any) -> list[int]:
    """The decode batch's size appended after the powers of two and the cap, not sorted in."""
    s, b, q, t, sp = check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
    u = unit(t, sp)
    cap = min(b, CEILING) // u * u
    base = _grid(cap, u, ())
    d = -(-decode_tokens(s, b, q) // u) * u
    return base + ([d] if 1 <= d <= cap and d not in base else [])


def sp_ignored(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
               sequence_parallel: Any) -> list[int]:
    """The grid without sequence parallelism's unit: sizes the TP ranks cannot split evenly."""
    s, b, q, _t, _sp = check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
    return oracle(s, b, q, 1, False)


def sp_filter_after_cap(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                        sequence_parallel: Any) -> list[int]:
    """The grid up to ``min(2 S q, ceiling, B)``, then the sizes that are not multiples of the unit dropped: nothing
    is left when that cap is below ``tp_size`` (how vLLM 0.22.0 to 0.28.0 filter for sequence parallelism)."""
    s, b, q, t, sp = check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
    u = unit(t, sp)
    return [v for v in _grid(min(2 * s * q, CEILING, b), 1, (decode_tokens(s, b, q), b)) if v % u == 0]


def budget_dropped(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                   sequence_parallel: Any) -> list[int]:
    """Only the powers of two and the decode batch: an off-stride token budget is never captured."""
    s, b, q, t, sp = check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
    u = unit(t, sp)
    cap = min(b, CEILING) // u * u
    d = -(-decode_tokens(s, b, q) // u) * u
    return sorted({*_powers(cap, u), *([d] if 1 <= d <= cap else [])})


def ceiling_ignores_q(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                      sequence_parallel: Any) -> list[int]:
    """The cap ``min(B, 2 S, ceiling)``, counting one token per decode request whatever ``q``."""
    s, b, _q, t, sp = check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
    u = unit(t, sp)
    return _grid(min(b, 2 * s, CEILING) // u * u, u, ())


def _args(s: int, b: int, q: int = 1, t: int = 1, sp: bool = False) -> dict[str, Any]:
    return {"max_num_seqs": s, "max_num_batched_tokens": b, "decode_query_len": q, "tp_size": t, "sequence_parallel": sp}


VARIANTS = (
    Variant("budget_unclipped", "the cap min(2 S q, 512) not clipped at the token budget", budget_unclipped, "mutant",
            ("within_token_budget",), _args(1, 1)),
    Variant("zero_head", "a 0-token graph at the head", zero_head, "mutant", ("positive",), _args(1, 1)),
    Variant("appended_unsorted", "the decode batch's size appended out of order", appended_unsorted, "mutant",
            ("ascending_unique",), _args(3, 4)),
    Variant("sp_ignored", "sizes not multiples of tp_size under sequence parallelism", sp_ignored, "mutant",
            ("multiples_under_sp",), _args(1, 1, 1, 2, True)),
    Variant("sp_filter_after_cap", "the sequence-parallel filter empties a grid capped below tp_size",
            sp_filter_after_cap, "mutant", ("non_empty", "decode_batch_covered"), _args(1, 4, 1, 4, True)),
    Variant("budget_dropped", "an off-stride token budget never captured", budget_dropped, "mutant",
            ("budget_captured",), _args(1, 3, 2)),
    Variant("ceiling_ignores_q", "the cap min(B, 2 S, 512), one token per decode request", ceiling_ignores_q, "mutant",
            ("decode_batch_covered", "budget_captured"), _args(1, 3, 3)),
)
