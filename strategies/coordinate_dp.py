"""Strategies for contract I, data-parallel coordination (docs/contracts.md, contract I).

A case is one step on each of ``R`` ranks (``2 <= R <= 8``) plus the shared
configuration: ``num_ubatches`` (2 half the time, 3 or 4 otherwise), the
microbatching thresholds, the capture sizes, and the microbatched graphs'
capture sizes (None: a coordinator that leaves graphs to its caller, v1).

Domains:

- ``spec``: every input of the precondition: any real and padded counts
  (padded at least real), votes, modes and uniform-decode lengths, any
  sorted capture sizes.
- ``engine``: what the engine's callers produce. Every rank's uniform-decode
  length is 0 (a mixed step) or the configuration's ``U`` (``1 +`` speculative
  tokens, the same on every rank), and a uniform decode of ``q`` requests has
  ``U * q`` tokens (a mixed step at least one token per request); a rank runs
  eagerly (mode 0, padded count = real count) or is padded to the smallest
  capture size that fits, with mode FULL for a uniform decode and PIECEWISE
  otherwise (the FULL_AND_PIECEWISE dispatch), and eagerly when no capture
  size fits; the microbatched graphs' sizes are a subset of the capture
  sizes.

Shrinks towards two ranks, ``n = 2``, few tokens, no padding, every rank
allowing microbatching, the smallest thresholds (``n``) and no microbatched
graphs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference._args import INT_DTYPES
from batchfuzz.reference.coordinate_dp import FULL, MAX_RANKS, NONE, PIECEWISE, smallest_fitting
from batchfuzz.strategies._engine import pad_to_capture_size
from batchfuzz.strategies._exhaustive import ScopeSpec, check_scope
from batchfuzz.strategies._validate import check_choice, check_integer

DOMAINS = ("spec", "engine")
NUM_UBATCHES = (2, 2, 3, 4)
# Capture-size lists small enough that steps reach past them: coarse lists,
# powers of two, the default list cut at 64.
CAPTURE_SIZES = ([2, 4, 8], [4, 8], [1, 2, 4, 8, 16, 32, 64], [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64])


# The per-rank arguments, in the contract's order: one list each, a value per rank.
RANK_ARGS = ("num_tokens", "num_tokens_padded", "allow_microbatching", "cudagraph_mode", "uniform_decode_len", "num_reqs")


def _ranks(*lists: list[int]) -> dict[str, list[int]]:
    """The per-rank lists given in :data:`RANK_ARGS` order, by argument name."""
    return dict(zip(RANK_ARGS, lists, strict=True))


def _args(ranks: dict[str, list[int]], n: int, thresholds: tuple[int, int], sizes: list[int],
          ubatch_sizes: list[int] | None, dtype: Any = np.int32) -> dict[str, Any]:
    """A case's arguments: the per-rank lists as arrays of ``dtype``, then the configuration."""
    return {**{name: np.array(ranks[name], dtype=dtype) for name in RANK_ARGS},
            "num_ubatches": n, "ubatch_thresholds": thresholds, "capture_sizes": list(sizes),
            "ubatch_capture_sizes": None if ubatch_sizes is None else list(ubatch_sizes)}


def engine_rank(tokens: int, uniform: int, eager: bool, sizes: list[int]) -> tuple[int, int]:
    """``(padded, mode)`` of one rank as the engine's dispatch pads it: eager
    at its own count, or the smallest capture size that fits with FULL for a
    uniform decode and PIECEWISE otherwise (eager when none fits)."""
    fit = None if eager else pad_to_capture_size(tokens, sizes)
    if fit is None:
        return tokens, NONE
    return fit, FULL if uniform > 0 else PIECEWISE


@st.composite
def _config(draw: st.DrawFn) -> tuple[int, tuple[int, int], list[int]]:
    n = draw(st.sampled_from(NUM_UBATCHES))
    decode = n + draw(st.integers(0, 8))
    prefill = n + draw(st.integers(0, 16))
    sizes = draw(st.sampled_from(CAPTURE_SIZES))
    return n, (decode, prefill), sizes


def _ubatch_sizes(draw: st.DrawFn, sizes: list[int]) -> list[int] | None:
    """None (a coordinator that leaves graphs to its caller) or some of ``sizes`` (mostly at least one)."""
    if draw(st.booleans()):
        return None
    return sorted(draw(st.sets(st.sampled_from(sizes), min_size=draw(st.sampled_from([1, 1, 1, 0])), max_size=len(sizes))))


@st.composite
def _spec_case(draw: st.DrawFn, max_ranks: int, max_tokens: int) -> Case:
    r = draw(st.integers(2, max_ranks))
    n, thresholds, sizes = draw(_config())
    # Steps of similar sizes (a base and a spread), so that splits happen.
    base = draw(st.integers(1, max_tokens))
    spread = draw(st.sampled_from([0, base // 2, base, 2 * base]))
    tokens = [base + draw(st.integers(0, spread)) for _ in range(r)]
    padded = [t + draw(st.sampled_from([0, 0, 1, 2, max_tokens])) for t in tokens]
    # Free, or a step every rank wants to microbatch with FULL graphs of one uniform length.
    microbatch = draw(st.booleans())
    allow = [1] * r if microbatch or draw(st.booleans()) else \
        draw(st.lists(st.sampled_from([1, 1, 1, 0]), min_size=r, max_size=r))
    modes = [2] * r if microbatch else draw(st.lists(st.sampled_from([0, 1, 2]), min_size=r, max_size=r))
    if microbatch and draw(st.booleans()):
        modes[draw(st.integers(0, r - 1))] = draw(st.sampled_from([0, 1]))  # one rank that cannot run FULL
    uniform = [draw(st.integers(0, 3))] * r if microbatch or draw(st.booleans()) else \
        draw(st.lists(st.integers(0, 3), min_size=r, max_size=r))
    reqs = draw(st.lists(st.integers(1, 8), min_size=r, max_size=r))
    # Microbatched graph sizes: any, or at the boundaries: the largest padded count (and one more), twice the fewest
    # real tokens, and the smallest size at which the fewest-token rank's last microbatch holds no real token.
    first_empty = -(-min(tokens) // (n - 1)) * n
    edges = [max(padded), max(padded) + 1, 2 * min(tokens), first_empty]
    if not microbatch and draw(st.booleans()):
        ubatch_sizes = None
    elif microbatch and draw(st.booleans()):
        ubatch_sizes = [draw(st.sampled_from(edges))]
    else:
        ubatch_sizes = sorted(draw(st.sets(st.one_of(st.sampled_from(edges), st.integers(1, 2 * max_tokens)),
                                           min_size=int(microbatch), max_size=4)))
    dtype = draw(st.sampled_from(INT_DTYPES))
    return Case(_args(_ranks(tokens, padded, allow, modes, uniform, reqs), n, thresholds, sizes, ubatch_sizes, dtype), {"kind": "spec"})


@st.composite
def _engine_case(draw: st.DrawFn, max_ranks: int, max_tokens: int) -> Case:
    r = draw(st.integers(2, max_ranks))
    n, thresholds, sizes = draw(_config())
    u = draw(st.sampled_from([1, 1, 2, 3]))
    # Microbatching on for every rank, off for every rank (the configuration's), or each rank's own vote.
    allows = draw(st.sampled_from(["all", "none", "each"]))
    base = draw(st.integers(1, 8))
    spread = draw(st.integers(0, 8))
    extra = draw(st.integers(0, max_tokens))
    kinds = draw(st.sampled_from(["any", "decode", "mixed"]))  # the ranks' kinds of step: each its own, or all alike
    may_be_eager = draw(st.booleans())
    tokens, padded, allow, modes, uniform, reqs = [], [], [], [], [], []
    for _ in range(r):
        decode = draw(st.booleans()) if kinds == "any" else kinds == "decode"
        q = base + draw(st.integers(0, spread))
        t = q * u if decode else q + draw(st.integers(0, extra))
        eager = may_be_eager and draw(st.sampled_from([False, False, True]))
        p, m = engine_rank(t, u if decode else 0, eager, sizes)
        tokens.append(t)
        padded.append(p)
        modes.append(m)
        uniform.append(u if decode else 0)
        reqs.append(q)
        allow.append(draw(st.sampled_from([1, 0])) if allows == "each" else int(allows == "all"))
    ubatch_sizes = _ubatch_sizes(draw, sizes)
    dtype = draw(st.sampled_from(INT_DTYPES))
    return Case(_args(_ranks(tokens, padded, allow, modes, uniform, reqs), n, thresholds, sizes, ubatch_sizes, dtype), {"kind": "engine"})


def cases(domain: str = "spec", *, max_ranks: int = MAX_RANKS, max_tokens: int = 40) -> st.SearchStrategy[Case]:
    """Contract I cases of ``domain``. Shrinks as the module docstring says."""
    check_choice("domain", domain, DOMAINS)
    ranks = check_integer("max_ranks", max_ranks, min_value=2, max_value=MAX_RANKS)
    tokens = check_integer("max_tokens", max_tokens, min_value=1)
    return (_spec_case if domain == "spec" else _engine_case)(ranks, tokens)


def _lists(case: Case) -> dict[str, list[int]]:
    a = case.args
    return {k: [int(v) for v in np.asarray(a[k]).tolist()]
            for k in RANK_ARGS}


def in_domain(case: Case, domain: str) -> bool:
    a = case.args
    v = _lists(case)
    r = len(v["num_tokens"])
    if not 2 <= r <= MAX_RANKS or any(len(x) != r for x in v.values()):
        return False
    n, thresholds, sizes, ubatch_sizes = a["num_ubatches"], a["ubatch_thresholds"], a["capture_sizes"], a["ubatch_capture_sizes"]
    if not (isinstance(n, int) and n >= 2 and len(thresholds) == 2 and min(thresholds) >= n):
        return False
    if list(sizes) != sorted(set(sizes)) or not sizes or min(sizes) < 1:
        return False
    if ubatch_sizes is not None and list(ubatch_sizes) != sorted(set(ubatch_sizes)):
        return False
    ok = all(t >= 1 and p >= t and al in (0, 1) and m in (0, 1, 2) and u >= 0 and q >= 1
             for t, p, al, m, u, q in zip(*v.values(), strict=True))
    if not ok or domain == "spec":
        return ok
    if ubatch_sizes is not None and not set(ubatch_sizes) <= set(sizes):
        return False
    lengths = {u for u in v["uniform_decode_len"] if u > 0}
    if len(lengths) > 1:
        return False
    for t, p, m, u, q in zip(v["num_tokens"], v["num_tokens_padded"], v["cudagraph_mode"], v["uniform_decode_len"],
                             v["num_reqs"], strict=True):
        if (u > 0 and t != u * q) or (u == 0 and t < q):
            return False
        if m == NONE:
            if p != t:
                return False
        elif (p, m) != engine_rank(t, u, False, list(sizes)):
            return False
    return True


def size(case: Case) -> tuple[int, ...]:
    """The order of contract I cases: ranks, real tokens, padded tokens,
    ``n``, then the graph configuration (no microbatched graphs first, then
    fewer), the thresholds, the votes against, and the modes."""
    a = case.args
    v = _lists(case)
    ub = a["ubatch_capture_sizes"]
    return (len(v["num_tokens"]), sum(v["num_tokens"]), sum(v["num_tokens_padded"]), a["num_ubatches"],
            0 if ub is None else 1 + len(ub), sum(a["ubatch_thresholds"]), len(a["capture_sizes"]),
            sum(1 - x for x in v["allow_microbatching"]), sum(v["cudagraph_mode"]), sum(v["uniform_decode_len"]),
            sum(v["num_reqs"]))


_Ranks = dict[str, list[int]]


@dataclass(frozen=True)
class _Config:
    """The case being reduced and its configuration: what a reduction keeps
    unless it says otherwise (``dataclasses.replace`` for a lower one)."""

    case: Case
    n: int
    thresholds: tuple[int, int]
    sizes: list[int]
    ub: list[int] | None

    def make(self, w: _Ranks) -> Case:
        """The ranks ``w`` under this configuration, with the case's context."""
        return Case(_args(w, self.n, self.thresholds, self.sizes, self.ub), dict(self.case.context))


def reductions(case: Case) -> Iterator[Case]:
    """Smaller cases built from ``case`` (``batchfuzz.reduce`` keeps those in
    the domain): the first two ranks restated small, a rank dropped, a rank's
    counts lowered (its padding recomputed as the engine pads, or dropped),
    fewer ubatches, lower thresholds, fewer microbatched graph sizes."""
    a = case.args
    v = _lists(case)
    decode, prefill = a["ubatch_thresholds"]
    cfg = _Config(case, a["num_ubatches"], (decode, prefill), list(a["capture_sizes"]), a["ubatch_capture_sizes"])
    yield from sorted(_restated(v, cfg), key=size)
    if len(v["num_tokens"]) > 2:
        for k in range(len(v["num_tokens"])):
            yield cfg.make({key: x[:k] + x[k + 1:] for key, x in v.items()})
    for k in range(len(v["num_tokens"])):
        yield from _smaller_rank(v, k, cfg)
    yield from _uniform_ranks(v, cfg)
    yield from _lower_config(v, cfg)
    yield from _every_rank_fewer(v, cfg)
    yield from _fewer_graphs(v, cfg)


def _smaller_rank(v: _Ranks, k: int, cfg: _Config) -> Iterator[Case]:
    """Rank ``k`` with fewer requests or tokens (padded again), a lower mode
    (the padding kept), or no padding (eager)."""
    t, u = v["num_tokens"][k], v["uniform_decode_len"][k]
    for q in sorted({1, v["num_reqs"][k] // 2, v["num_reqs"][k] - 1}):
        if 1 <= q < v["num_reqs"][k]:
            w = {key: list(x) for key, x in v.items()}
            w["num_reqs"][k] = q
            if u > 0:
                w["num_tokens"][k] = q * u
            _repadded(w, k, cfg.sizes)
            yield cfg.make(w)
    for t2 in sorted({max(1, v["num_reqs"][k]), t // 2, t - 1}):
        if 1 <= t2 < t and u == 0:
            w = {key: list(x) for key, x in v.items()}
            w["num_tokens"][k] = t2
            w["num_reqs"][k] = min(w["num_reqs"][k], t2)
            _repadded(w, k, cfg.sizes)
            yield cfg.make(w)
    if v["cudagraph_mode"][k] != NONE:
        w = {key: list(x) for key, x in v.items()}
        w["cudagraph_mode"][k] -= 1  # a lower mode, the padding kept
        yield cfg.make(w)
    if v["num_tokens_padded"][k] > t:
        w = {key: list(x) for key, x in v.items()}
        w["num_tokens_padded"][k] = t
        w["cudagraph_mode"][k] = NONE
        yield cfg.make(w)


def _uniform_ranks(v: _Ranks, cfg: _Config) -> Iterator[Case]:
    """Every rank eager (unpadded), every rank allowing microbatching, every rank a mixed step."""
    for key, value in (("cudagraph_mode", NONE), ("allow_microbatching", 1), ("uniform_decode_len", 0)):
        if any(x != value for x in v[key]):
            w = {k: list(x) for k, x in v.items()}
            w[key] = [value] * len(v[key])
            if key == "cudagraph_mode":
                w["num_tokens_padded"] = list(w["num_tokens"])
            yield cfg.make(w)


def _lower_config(v: _Ranks, cfg: _Config) -> Iterator[Case]:
    """One ubatch fewer (thresholds lowered with it), then each threshold lowered."""
    n, (decode, prefill) = cfg.n, cfg.thresholds
    if n > 2:
        yield replace(cfg, n=n - 1, thresholds=(max(n - 1, decode - 1), max(n - 1, prefill - 1))).make(v)
    for thr in ((n, prefill), (decode, n), (max(n, decode - 1), prefill), (decode, max(n, prefill - 1))):
        if thr != (decode, prefill):
            yield replace(cfg, thresholds=thr).make(v)


def _every_rank_fewer(v: _Ranks, cfg: _Config) -> Iterator[Case]:
    """Every rank one token (or half its tokens) fewer, its padding kept,
    then padded again: keeps the ranks' balance, which a split needs."""
    for lower in (lambda t: t - 1, lambda t: t // 2):
        w = {key: list(x) for key, x in v.items()}
        if all(u == 0 for u in w["uniform_decode_len"]) and all(lower(t) >= 1 for t in w["num_tokens"]):
            for k in range(len(v["num_tokens"])):
                w["num_tokens"][k] = lower(w["num_tokens"][k])
                w["num_reqs"][k] = min(w["num_reqs"][k], w["num_tokens"][k])
                w["num_tokens_padded"][k] = w["num_tokens"][k] + v["num_tokens_padded"][k] - v["num_tokens"][k]
            yield cfg.make(w)
            for k in range(len(v["num_tokens"])):
                _repadded(w, k, cfg.sizes)
            yield cfg.make(w)


def _fewer_graphs(v: _Ranks, cfg: _Config) -> Iterator[Case]:
    """No microbatched graphs, one fewer, or one at a boundary of this step (as the strategy draws them)."""
    ub = cfg.ub
    if ub is not None:
        yield replace(cfg, ub=None).make(v)
        for k in range(len(ub)):
            yield replace(cfg, ub=ub[:k] + ub[k + 1:]).make(v)
        fewest, most = min(v["num_tokens"]), max(v["num_tokens_padded"])
        for edge in sorted({most, most + 1, 2 * fewest, -(-fewest // (cfg.n - 1)) * cfg.n}):
            if [edge] != ub:
                yield replace(cfg, ub=[edge]).make(v)


def _restated(v: _Ranks, cfg: _Config) -> Iterator[Case]:
    """The step's first two ranks (their votes, kinds and eagerness kept) restated with at most 6 real tokens each,
    padded again as the engine pads, at ``n`` or 2 microbatches (thresholds kept or lowered to ``n``), with the
    microbatched graphs kept or one at a boundary of the restated step: the small steps that keep a bug's shape
    when several counts must shrink together (a split needs the ranks' balance, a graph size its step)."""
    total = sum(v["num_tokens"])
    for a in range(1, 7):
        for b in range(1, 7):
            if a + b >= total:
                continue
            base = {key: list(x[:2]) for key, x in v.items()}
            if any(u > 0 and t % u for u, t in zip(base["uniform_decode_len"], (a, b), strict=True)):
                continue
            for k, t in enumerate((a, b)):
                u = base["uniform_decode_len"][k]
                base["num_tokens"][k] = t
                base["num_reqs"][k] = t // u if u > 0 else min(base["num_reqs"][k], t)
            # Padded as the engine pads, with the padding it had, or with none (modes kept).
            repadded = {key: list(x) for key, x in base.items()}
            for k in range(2):
                _repadded(repadded, k, cfg.sizes)
            offset = {key: list(x) for key, x in base.items()}
            offset["num_tokens_padded"] = [t + max(0, p - q) for t, p, q in
                                           zip(base["num_tokens"], v["num_tokens_padded"], v["num_tokens"], strict=False)]
            exact = {key: list(x) for key, x in base.items()}
            exact["num_tokens_padded"] = list(base["num_tokens"])
            for w in (repadded, offset, exact):
                yield from _restated_configs(w, cfg)


def _restated_configs(w: _Ranks, cfg: _Config) -> Iterator[Case]:
    """``w`` at ``n`` or 2 microbatches, thresholds kept or lowered, its graphs kept or one at a boundary."""
    for n2 in sorted({2, cfg.n}):
        for thr in sorted({(n2, n2), cfg.thresholds} if n2 == cfg.n else {(n2, n2)}):
            graphs: list[list[int] | None] = [cfg.ub]
            if cfg.ub is not None:
                fewest, most = min(w["num_tokens"]), max(w["num_tokens_padded"])
                graphs += [[e] for e in sorted({most, most + 1, 2 * fewest, -(-fewest // (n2 - 1)) * n2})]
            for g in graphs:
                yield replace(cfg, n=n2, thresholds=thr, ub=g).make(w)


def _repadded(w: _Ranks, k: int, sizes: list[int]) -> None:
    """Rank ``k`` of ``w`` padded again as the engine pads it, keeping it eager if it was."""
    t, u, m = w["num_tokens"][k], w["uniform_decode_len"][k], w["cudagraph_mode"][k]
    if m == NONE:
        w["num_tokens_padded"][k] = t
    else:
        fit = smallest_fitting(sizes, t)
        w["num_tokens_padded"][k] = fit if fit is not None else t
        w["cudagraph_mode"][k] = (FULL if u > 0 else PIECEWISE) if fit is not None else NONE


# ---------------------------------------------------------------- bounded-exhaustive scopes

_SCOPE_SIZES = [2, 4, 8]


def _scope(max_tokens: int, ns: tuple[int, ...], ubatch_options: tuple[list[int] | None, ...]) -> list[Case]:
    ranks = [(t, t + pad, m) for t in range(1, max_tokens + 1) for pad in (0, 1) for m in (NONE, PIECEWISE, FULL)]
    out = []
    for n in ns:
        for a0 in ranks:
            for a1 in ranks:
                for allow in ((1, 1), (1, 0)):
                    for ub in ubatch_options:
                        pair = (a0, a1)
                        per_rank = _ranks([x[0] for x in pair], [x[1] for x in pair], list(allow),
                                          [x[2] for x in pair], [0, 0], [1, 1])
                        out.append(Case(_args(per_rank, n, (n, n), _SCOPE_SIZES, ub), {"kind": "exhaustive"}))
    out.sort(key=size)
    return out


_SCOPE_ARGS = {"small": (6, (2, 3), (None, [2], [4])), "ci": (2, (2,), (None, [4]))}

SCOPES = {
    "small": ScopeSpec("two ranks of one request each, 1 <= tokens <= 6 a rank, padded by 0 or 1, each rank in every "
                       "graph mode, mixed steps; both ranks allowing microbatching or rank 1 vetoing; n in {2, 3} with "
                       "both thresholds n; capture sizes [2, 4, 8]; microbatched graphs none (v1), [2] or [4]; in size "
                       "order (tokens, padding, n, graphs, votes, modes)", "spec", 15552),
    "ci": ScopeSpec("as small with tokens <= 2, n = 2 and microbatched graphs none or [4]", "spec", 576),
}


def scope_cases(scope: str = "small") -> Iterator[Case]:
    """Every contract I case of ``scope`` (``SCOPES``), smallest first in :func:`size`'s order."""
    max_tokens, ns, options = _SCOPE_ARGS[check_scope(scope, SCOPES)]
    yield from _scope(max_tokens, ns, options)
