"""Strategies for contract K, the padding of a CUDA-graph replay (docs/contracts.md, contract K).

Domains:

- ``spec``: every valid call: 1 to 6 captured batch sizes (strictly
  increasing, 1 to 16), ``R`` from 0 to the largest, 1 to 4 tokens per
  request, sequence lengths, positions and cache slots from 0, a fill value
  0 to 3, persistent buffers of the largest size or up to 2 rows longer
  holding any int32 value (negative ones too);
- ``engine``: what SGLang's runners replay: ``R >= 1`` requests of sequence
  length >= 1 (a replayed decode or verify step, ``can_run`` having checked
  ``R`` against the largest captured size), a fill value of 0 or 1 (what
  the attention backends' ``get_cuda_graph_seq_len_fill_value`` give), and
  persistent buffers of exactly the largest captured size (allocated once
  for ``max_bs``) holding what an earlier replay wrote: values >= 0, often
  the real rows of a larger earlier step.

Shrinks towards fewer requests, fewer tokens per request, fewer and smaller
captured sizes, the fill value 0, and stale buffers of zeros.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference.pad_graph_replay import ARGUMENTS
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope

DOMAINS = ("spec", "engine")
MAX_CAPTURE = 16
ARRAYS = ("capture_bs", "seq_lens", "positions", "out_cache_loc", "seq_lens_buf", "positions_buf", "out_cache_loc_buf")


def case_of(capture_bs: Any, seq_lens: Any, num_tokens_per_bs: int = 1, seq_len_fill_value: int = 1, *,
            positions: Any = None, out_cache_loc: Any = None, stale: int | tuple[Any, Any, Any] = 0) -> Case:
    """A case; ``positions`` and ``out_cache_loc`` default to ``0, 1, ...``
    and ``100, 101, ...``; ``stale`` is every buffer entry's value, or the
    three buffers themselves (sized for ``capture_bs[-1]`` when an int)."""
    sizes = [int(x) for x in capture_bs]
    r, t = len(seq_lens), int(num_tokens_per_bs)
    pos = list(range(r * t)) if positions is None else positions
    loc = [100 + j for j in range(r * t)] if out_cache_loc is None else out_cache_loc
    max_bs = sizes[-1] if sizes else 0
    bufs = stale if isinstance(stale, tuple) else ([stale] * max_bs, [stale] * (max_bs * t), [stale] * (max_bs * t))
    arrays = (sizes, seq_lens, pos, loc, *bufs)
    values: dict[str, Any] = {k: np.asarray(v, dtype=np.int32) for k, v in zip(ARRAYS, arrays, strict=True)}
    values["num_tokens_per_bs"] = t
    values["seq_len_fill_value"] = int(seq_len_fill_value)
    return Case({k: values[k] for k in ARGUMENTS})


@st.composite
def _cases(draw: st.DrawFn, domain: str) -> Case:
    engine = domain == "engine"
    sizes = sorted(draw(st.sets(st.integers(1, MAX_CAPTURE), min_size=1, max_size=6)))
    max_bs = sizes[-1]
    r = draw(st.integers(1 if engine else 0, max_bs))
    t = draw(st.integers(1, 4))
    fill = draw(st.integers(0, 1) if engine else st.integers(0, 3))
    low = 1 if engine else 0
    lens = draw(st.lists(st.integers(low, 4096), min_size=r, max_size=r))
    pos = draw(st.lists(st.integers(0, 4096), min_size=r * t, max_size=r * t))
    loc = draw(st.lists(st.integers(0, 1 << 20), min_size=r * t, max_size=r * t))
    extra = 0 if engine else draw(st.integers(0, 2))
    stale_value = st.integers(0, 1 << 20) if engine else st.integers(-(1 << 31), (1 << 31) - 1)
    bufs = []
    for rows in (max_bs + extra, (max_bs + extra) * t, (max_bs + extra) * t):
        if draw(st.booleans()):  # an earlier, larger step's rows: distinct values everywhere
            bufs.append(draw(st.lists(stale_value, min_size=rows, max_size=rows)))
        else:  # one stale value throughout (shrinks to all zeros)
            bufs.append([draw(stale_value)] * rows)
    return case_of(sizes, lens, t, fill, positions=pos, out_cache_loc=loc, stale=(bufs[0], bufs[1], bufs[2]))


def cases(domain: str) -> st.SearchStrategy[Case]:
    """Cases of ``domain``: sizes, ``R``, ``T``, fill value, rows, then the stale buffers (see the module's shrink order)."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, got {domain!r}")
    return _cases(domain)


def _ints(case: Case, key: str) -> list[int]:
    return [int(x) for x in case.args[key]]


def in_domain(case: Case, domain: str) -> bool:
    a = case.args
    sizes, lens = _ints(case, "capture_bs"), _ints(case, "seq_lens")
    t, fill = a["num_tokens_per_bs"], a["seq_len_fill_value"]
    if not sizes or min(sizes) < 1 or any(b <= c for c, b in itertools.pairwise(sizes)) or t < 1 or fill < 0:
        return False
    max_bs, r = sizes[-1], len(lens)
    if r > max_bs or len(a["positions"]) != r * t or len(a["out_cache_loc"]) != r * t:
        return False
    if min(lens + _ints(case, "positions") + _ints(case, "out_cache_loc") + [0]) < 0:
        return False
    rows = (max_bs, max_bs * t, max_bs * t)
    bufs = [_ints(case, k) for k in ARRAYS[4:]]
    if any(len(b) < n for b, n in zip(bufs, rows, strict=True)):
        return False
    if domain == "engine":
        return (r >= 1 and min(lens) >= 1 and fill in (0, 1) and all(len(b) == n for b, n in zip(bufs, rows, strict=True))
                and all(min(b + [0]) >= 0 for b in bufs))
    return True


def size(case: Case) -> tuple[int, ...]:
    """Fewer requests, fewer tokens per request, a smaller largest size, fewer
    sizes, a smaller fill value, then smaller values and stale entries."""
    a = case.args
    sizes, lens = _ints(case, "capture_bs"), _ints(case, "seq_lens")
    stale = sum(abs(v) for k in ARRAYS[4:] for v in _ints(case, k))
    return (len(lens), a["num_tokens_per_bs"], sizes[-1] if sizes else 0, len(sizes), a["seq_len_fill_value"],
            sum(lens) + sum(_ints(case, "positions")) + sum(_ints(case, "out_cache_loc")), stale)


def _rebuilt(case: Case, **changes: Any) -> Case:
    a = case.args
    values: dict[str, Any] = {k: _ints(case, k) for k in ARRAYS}
    values["num_tokens_per_bs"], values["seq_len_fill_value"] = a["num_tokens_per_bs"], a["seq_len_fill_value"]
    values.update(changes)
    return case_of(values["capture_bs"], values["seq_lens"], values["num_tokens_per_bs"], values["seq_len_fill_value"],
                   positions=values["positions"], out_cache_loc=values["out_cache_loc"],
                   stale=(values["seq_lens_buf"], values["positions_buf"], values["out_cache_loc_buf"]))


def reductions(case: Case) -> Iterator[Case]:
    """Drop the last request, one token per request, a captured size (the buffers
    cut to the new largest), the fill value to 0, zero a buffer's stale rows."""
    a = case.args
    sizes, lens = _ints(case, "capture_bs"), _ints(case, "seq_lens")
    t = a["num_tokens_per_bs"]
    pos, loc = _ints(case, "positions"), _ints(case, "out_cache_loc")
    bufs = {k: _ints(case, k) for k in ARRAYS[4:]}
    if lens:
        yield _rebuilt(case, seq_lens=lens[:-1], positions=pos[: -t], out_cache_loc=loc[: -t])
    if t > 1:
        keep = [j for j in range(len(pos)) if j % t < t - 1]
        yield _rebuilt(case, num_tokens_per_bs=t - 1, positions=[pos[j] for j in keep], out_cache_loc=[loc[j] for j in keep],
                       positions_buf=bufs["positions_buf"][: len(bufs["seq_lens_buf"]) * (t - 1)],
                       out_cache_loc_buf=bufs["out_cache_loc_buf"][: len(bufs["seq_lens_buf"]) * (t - 1)])
    for i in range(len(sizes)):
        rest = sizes[:i] + sizes[i + 1:]
        if rest and rest[-1] >= len(lens):
            m = rest[-1]
            yield _rebuilt(case, capture_bs=rest, seq_lens_buf=bufs["seq_lens_buf"][:m],
                           positions_buf=bufs["positions_buf"][: m * t], out_cache_loc_buf=bufs["out_cache_loc_buf"][: m * t])
    if a["seq_len_fill_value"] > 0:
        yield _rebuilt(case, seq_len_fill_value=0)
    for k, buf in bufs.items():
        if any(buf):
            yield _rebuilt(case, **{k: [0] * len(buf)})


# ------------------------------------------------------------------ exhaustive scopes

# The captured sizes each scope draws its subsets from.
_SCOPE_SIZES = {"small": (1, 2, 3), "ci": (1, 2)}


def _scope_all(scope: str) -> list[Case]:
    pool = _SCOPE_SIZES[scope]
    out = []
    for k in range(1, len(pool) + 1):
        for sizes in itertools.combinations(pool, k):
            max_bs = sizes[-1]
            for r, t, fill in itertools.product(range(max_bs + 1), (1, 2), (0, 1)):
                rows = list(range(1, r * t + 1))
                for lens, stale in itertools.product(itertools.product((0, 1), repeat=r), itertools.product((0, 1), repeat=3)):
                    bufs = ([stale[0]] * max_bs, [stale[1]] * (max_bs * t), [stale[2]] * (max_bs * t))
                    out.append(case_of(sizes, list(lens), t, fill, positions=rows, out_cache_loc=rows, stale=bufs))
    return sorted(out, key=size)


def _scope_count(scope: str) -> int:
    """How many cases :func:`_scope_all` enumerates, counted without building
    them (listing the contracts must be quick; tests/test_exhaustive.py checks
    the two agree): the sets whose largest size is the i-th of the pool are
    2**i; each has T, fill and the 3 stale buffers (2**5) times 2**R lengths."""
    pool = _SCOPE_SIZES[scope]
    return sum(2 ** i * 2 ** 5 * (2 ** (largest + 1) - 1) for i, largest in enumerate(pool))


SCOPES = {
    "small": ScopeSpec("every nonempty set of captured sizes from {1, 2, 3}, R from 0 to the largest, T 1 or 2, fill value 0 or "
                       "1, sequence lengths 0 or 1 each, token rows 1, 2, ..., each stale buffer all 0 or all 1; in size's "
                       "order", "spec", _scope_count("small")),
    "ci": ScopeSpec("as small with the captured sizes from {1, 2}", "spec", _scope_count("ci")),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract K case of ``scope`` (``SCOPES``), smallest first in :func:`size`'s order."""
    yield from _scope_all(check_scope(scope, SCOPES))
