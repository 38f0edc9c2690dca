"""A bundled buggy function for ``batchfuzz demo`` (the README's quick start):
what a counterexample looks like, shown on a function written the way an
engine developer writes one, without any code of the user's.

``split_tokens`` splits a dummy batch of ``num_tokens`` tokens over
``num_reqs`` requests (contract A, ``split_dummy_tokens``, docs/contracts.md)
and gives the whole remainder of the division to the last request: the bug
that shipped in vLLM (one request longer than ``max_model_len``). Checked
against the contract, it fails on ``split_tokens(3, 5)``, which gives
``[1, 1, 3]`` where the contract's answer is ``[1, 2, 2]``.
"""

from __future__ import annotations


def split_tokens(num_reqs: int, num_tokens: int) -> list[int]:
    """Tokens per request, every request at least one: the quotient each, the
    remainder to the last request (the bug: it should go one each to the last
    ``num_tokens % num_reqs`` requests)."""
    if not 1 <= num_reqs <= num_tokens:
        raise ValueError(f"need 1 <= num_reqs <= num_tokens, got num_reqs={num_reqs}, num_tokens={num_tokens}")
    counts = [num_tokens // num_reqs] * num_reqs
    counts[-1] += num_tokens % num_reqs
    return counts
