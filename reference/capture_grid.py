"""Oracle of contract O, ``capture_grid``: the token counts of the CUDA graphs
an engine captures, resolved from its scheduler limits (docs/contracts.md,
contract O). What must hold of any grid is the contract's properties; this
oracle is one grid that holds them all, written to be read, not vLLM's.

The grid: with the unit ``u`` (``tp_size`` under sequence parallelism, else
1) and the cap ``c``, the largest multiple of ``u`` within
``min(max_num_batched_tokens, CEILING)``: ``u`` times every power of two up to
the cap, the largest uniform decode batch and the token budget (each where it
fits the cap and the unit), and the cap itself."""

from __future__ import annotations

from typing import Any

from batchfuzz.reference._args import ceil_div, check_int

ARGUMENTS = ("max_num_seqs", "max_num_batched_tokens", "decode_query_len", "tp_size", "sequence_parallel")

# The platform's default capture ceiling in tokens: 512 in every vLLM release 0.22.0 to 0.34.0 on GPUs other than
# data-centre Blackwell (the docstring of VllmConfig._set_cudagraph_sizes and CompilationConfig.max_cudagraph_capture_size).
CEILING = 512


def check_args(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
               sequence_parallel: Any) -> tuple[int, int, int, int, bool]:
    """Validate: ``max_num_seqs``, ``max_num_batched_tokens``, ``decode_query_len`` (1 + speculative tokens) and
    ``tp_size`` ints >= 1; ``sequence_parallel`` a bool."""
    s = check_int("max_num_seqs", max_num_seqs, minimum=1)
    b = check_int("max_num_batched_tokens", max_num_batched_tokens, minimum=1)
    q = check_int("decode_query_len", decode_query_len, minimum=1)
    t = check_int("tp_size", tp_size, minimum=1)
    if not isinstance(sequence_parallel, bool):
        raise TypeError(f"sequence_parallel must be a bool, got {type(sequence_parallel).__name__} {sequence_parallel!r:.60}")
    return s, b, q, t, sequence_parallel


def unit(tp_size: int, sequence_parallel: bool) -> int:
    """What every size must be a multiple of: sequence parallelism splits a graph's tokens evenly over the TP ranks."""
    return tp_size if sequence_parallel else 1


def decode_tokens(max_num_seqs: int, max_num_batched_tokens: int, decode_query_len: int) -> int:
    """The tokens of the largest uniform decode batch the scheduler can make: as many requests of ``q`` tokens as
    ``max_num_seqs`` and the token budget allow."""
    return min(max_num_seqs, max_num_batched_tokens // decode_query_len) * decode_query_len


def capture_grid(max_num_seqs: Any, max_num_batched_tokens: Any, decode_query_len: Any, tp_size: Any,
                 sequence_parallel: Any) -> list[int]:
    """The captured token counts, ascending (the module's docstring says which)."""
    s, b, q, t, sp = check_args(max_num_seqs, max_num_batched_tokens, decode_query_len, tp_size, sequence_parallel)
    u = unit(t, sp)
    cap = min(b, CEILING) // u * u
    if cap == 0:
        return []
    sizes = {cap}
    k = u
    while k <= cap:
        sizes.add(k)
        k *= 2
    for wanted in (decode_tokens(s, b, q), b):
        rounded = ceil_div(wanted, u) * u
        if 1 <= rounded <= cap:
            sizes.add(rounded)
    return sorted(sizes)
