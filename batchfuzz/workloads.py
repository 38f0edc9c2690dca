"""Workloads for the prefix-caching scheduler model
(``batchfuzz.scheduler_model``): the requests it is fed, drawn from one
description and two sources of randomness.

Choices come from a :class:`Source`: :func:`draw_small_step` draws a small
step from any source (the Hypothesis strategy
``batchfuzz.strategies.realizable_steps`` feeds it Hypothesis choices, which
shrink; :func:`sample_small_step` a numpy generator), and
:func:`sample_realizable_step` draws realistic large steps for the benchmark.
Every option list puts first what a counterexample should shrink to: fewer
steps, fewer and shorter requests, one KV group of block size 2, no sliding
window, ample token budget, pool and ``max_num_seqs``, fresh prompts before
shared ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from batchfuzz.reference._args import ceil_div, check_choice, check_int, interval_message
from batchfuzz.reference._step import Step
from batchfuzz.scheduler_model import EngineConfig, GroupSpec, Scheduled, SchedulerModel, emit_step

T = TypeVar("T")


class Source(Protocol):
    """Where choices come from: Hypothesis (shrinkable) or a numpy Generator."""

    def integers(self, lo: int, hi: int) -> int: ...

    def sampled(self, options: Sequence[T]) -> T: ...


class RngSource:
    """Choices drawn from a numpy Generator."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def integers(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, max(lo, hi) + 1))

    def sampled(self, options: Sequence[T]) -> T:
        return options[int(self.rng.integers(len(options)))]


class HypothesisSource:
    """Choices drawn through Hypothesis (the ``draw`` of ``st.composite`` or ``st.data()``):
    integers shrink to ``lo``, samples to the first option."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw

    def integers(self, lo: int, hi: int) -> int:
        from hypothesis import strategies as st

        return int(self.draw(st.integers(lo, max(lo, hi))))

    def sampled(self, options: Sequence[T]) -> T:
        from hypothesis import strategies as st

        return self.draw(st.sampled_from(list(options)))


@dataclass(frozen=True)
class Workload:
    """How requests arrive. Option lists are weighted by repetition; the first
    option is where Hypothesis shrinks to."""

    max_prompt_len: int
    max_output_len: int
    prompt_kinds: tuple[str, ...] = ("fresh", "parallel", "copy", "prefix", "parallel", "followup", "copy", "prefix", "parallel")
    length_shapes: tuple[str, ...] = ("any", "k*A+1", "k*A", "k*A+1")
    max_parallel: int = 4
    long_prompt_len: int = 0  # > 0: prompt lengths drawn up to this from a long tail
    num_roots: int = 0  # > 0: shared system prompts drawn up front (benchmark workloads)
    root_len: tuple[int, int] = (0, 0)


def _draw_len(src: Source, w: Workload, align: int, lo: int = 1, hi: int | None = None) -> int:
    hi = w.max_prompt_len if hi is None else hi
    if hi <= lo:
        return lo
    shape = src.sampled(w.length_shapes)
    if shape == "any" or align > hi:
        return src.integers(lo, hi)
    k = src.integers(max(0, (lo - 1) // align), max(0, (hi - 1) // align if shape == "k*A+1" else hi // align))
    n = k * align + (1 if shape == "k*A+1" else 0)
    return min(max(n, lo), hi)


class _Arrivals:
    """Draws arriving requests into a SchedulerModel."""

    def __init__(self, src: Source, model: SchedulerModel, w: Workload) -> None:
        self.src, self.model, self.w = src, model, w
        self.prompts: list[list[int]] = []
        self.roots = [model.fresh_tokens(src.integers(*w.root_len)) for _ in range(w.num_roots)]

    def _fresh_prompt(self) -> list[int]:
        align = self.model.cfg.hit_alignment
        limit = self.model.cfg.max_model_len - 1
        if self.roots and self.src.integers(0, 3) > 0:
            root = self.src.sampled(self.roots)
            n = _draw_len(self.src, self.w, align, 1, max(1, min(self.w.max_prompt_len, limit - len(root))))
            return (root + self.model.fresh_tokens(n))[:limit]
        return self.model.fresh_tokens(_draw_len(self.src, self.w, align, 1, min(self.w.max_prompt_len, limit)))

    def draw_prompt(self) -> tuple[list[int], int]:
        """A prompt and how many identical copies arrive together (parallel sampling)."""
        src, w, model = self.src, self.w, self.model
        kind = src.sampled(w.prompt_kinds)
        limit = model.cfg.max_model_len - 1
        copies = 1
        if kind in ("copy", "prefix") and self.prompts:
            parent = self.prompts[len(self.prompts) - 1 - src.integers(0, len(self.prompts) - 1)]  # recent first
            if kind == "copy":
                prompt = list(parent)
            else:
                align = model.cfg.hit_alignment
                cut = src.sampled(("block", "any", "whole"))
                if cut == "block":
                    keep = min(len(parent), align * src.integers(0, len(parent) // align))
                elif cut == "any":
                    keep = src.integers(1, len(parent))
                else:
                    keep = len(parent)
                room = min(w.max_prompt_len, limit) - keep
                suffix = _draw_len(src, w, align, 1, room) if room >= 1 else 0
                prompt = (parent[:keep] + model.fresh_tokens(suffix))[:limit]
        elif kind == "followup" and model.requests:
            parent_req = model.requests[len(model.requests) - 1 - src.integers(0, len(model.requests) - 1)]
            base = parent_req.tokens[: min(limit - 1, 2 * w.max_prompt_len)]
            room = min(w.max_prompt_len + len(base), limit) - len(base)
            prompt = base + model.fresh_tokens(max(1, min(room, _draw_len(src, w, 1, 1, max(1, room)))))
            prompt = prompt[:limit]
        else:
            prompt = self._fresh_prompt()
            if kind == "parallel":
                copies = src.integers(2, w.max_parallel)
        return prompt, copies

    def arrive(self, count: int, budget_reqs: list[int]) -> None:
        """``count`` arrival events (a parallel-sampling event brings several requests);
        ``budget_reqs[0]`` caps the number of requests added and is decremented."""
        for _ in range(count):
            if budget_reqs[0] <= 0:
                return
            prompt, copies = self.draw_prompt()
            copies = min(copies, budget_reqs[0])
            greedy = copies > 1 and self.src.integers(0, 1) == 1
            stream = self.model.new_stream() if greedy else None
            out_len = self.src.integers(1, self.w.max_output_len)
            for _ in range(copies):
                self.model.add_request(prompt, out_len, stream)
            budget_reqs[0] -= copies
            self.prompts.append(prompt)


def _finish_step(src: Source, model: SchedulerModel, arrivals: _Arrivals, budget_reqs: list[int]) -> Scheduled:
    """Schedule the final step; if it would be empty, run it and add a request."""
    sched = model.schedule()
    while not sched.entries:
        model.run(sched)
        budget_reqs[0] = max(budget_reqs[0], 1)
        arrivals.arrive(1, budget_reqs)
        sched = model.schedule()
    return sched


_BLOCK_SIZES = (2, 4, 8, 16, 1, 3, 32, 5, 12)


def _draw_config(src: Source, bounds: dict[str, Any]) -> EngineConfig:
    """An engine configuration within ``bounds`` (``check_bounds``'s)."""
    max_reqs, max_prompt_len, max_output_len = bounds["max_reqs"], bounds["max_prompt_len"], bounds["max_output_len"]
    min_block_size, max_block_size, max_token_budget = bounds["min_block_size"], bounds["max_block_size"], bounds["max_token_budget"]
    reorder_batch_threshold, reorder, shared_pool = bounds["reorder_batch_threshold"], bounds["reorder"], bounds["shared_pool"]
    max_groups, sliding, max_spec_tokens = bounds["max_groups"], bounds["sliding"], bounds["max_spec_tokens"]
    allowed = [b for b in _BLOCK_SIZES if min_block_size <= b <= max_block_size] or [min_block_size]
    b0 = src.sampled(allowed)
    groups = [GroupSpec(b0)]
    for _ in range(src.integers(1, max(1, max_groups)) - 1):
        # Related sizes (hybrid models) mostly, any allowed size sometimes.
        related = [b for b in (b0 * 2, b0 // 2, b0, b0 * 4, b0 // 4) if min_block_size <= b <= max_block_size and b >= 1]
        b = src.sampled(related + [src.sampled(allowed)]) if related else src.sampled(allowed)
        window = None
        if sliding and src.integers(0, 2) > 0:
            window = src.sampled((8, 1, 2, 4, 16, 32, 64, 3, 17))
            window = max(1, min(window, 4 * max_prompt_len))
        groups.append(GroupSpec(b, window))
    max_model_len = max_prompt_len + max_output_len + 1
    spec = min(max_spec_tokens, src.sampled((0, 0, 0, 1, 2, 3, 4))) if max_spec_tokens > 0 else 0
    # Backends that split decodes from prefills raise the threshold to 1 + drafts.
    thr = reorder_batch_threshold if reorder_batch_threshold is not None else src.sampled((1, 2, 4, 16, 1 + spec))
    order = reorder if reorder is not None else src.sampled(("stable", "swap"))
    pool_shared = shared_pool if shared_pool is not None else src.sampled((True, False))
    max_num_seqs = max_reqs if src.integers(0, 3) > 0 else src.integers(1, max_reqs)
    budget = max_token_budget - src.integers(0, max_token_budget - 1)
    if src.integers(0, 3) == 0:  # small budgets make chunked prefill common
        budget = min(budget, src.integers(1, max(1, max_prompt_len // 2)))
    min_b = min(g.block_size for g in groups)
    one_request = sum(ceil_div(max_model_len, g.block_size) for g in groups) + 1
    ample = one_request * (max_reqs + 2) + 2 * max_reqs * (max_prompt_len // min_b + 2)
    # Tight pools force preemption and eviction; the smallest still fits one longest request.
    if src.integers(0, 2) < 2:
        num_blocks = ample
    else:
        num_blocks = one_request + src.integers(0, one_request // 2)
    return EngineConfig(tuple(groups), num_blocks, pool_shared, budget, max_num_seqs, max_model_len, thr, order, spec)


_SMALL_BOUNDS: dict[str, Any] = {
    "max_reqs": 12, "max_prompt_len": 128, "max_output_len": 12, "min_block_size": 1, "max_block_size": 32,
    "max_groups": 3, "max_steps": 5, "sliding": True, "max_token_budget": 512, "reorder_batch_threshold": 1,
    "reorder": "stable", "shared_pool": None, "pad_tables": True, "max_spec_tokens": 3,
}


def check_bounds(bounds: dict[str, Any]) -> dict[str, Any]:
    """The bounds of a small step (see ``_SMALL_BOUNDS`` for names and defaults)
    merged with the defaults; TypeError for an unknown name, ValueError for a
    bad value, naming it."""
    unknown = set(bounds) - set(_SMALL_BOUNDS)
    if unknown:
        raise TypeError(f"unknown bounds {sorted(unknown)}; known: {sorted(_SMALL_BOUNDS)}")
    b = {**_SMALL_BOUNDS, **bounds}
    for name in ("max_reqs", "max_prompt_len", "max_output_len", "min_block_size", "max_groups", "max_steps",
                 "max_token_budget"):
        check_int(name, b[name], minimum=1)
    if interval_message("min_block_size", b["min_block_size"], "max_block_size", b["max_block_size"]):
        raise ValueError(interval_message("min_block_size", b["min_block_size"], "max_block_size", b["max_block_size"]))
    return b


def draw_small_step(src: Source, bounds: dict[str, Any]) -> tuple[Step, dict[str, Any]]:
    """One small realizable step, its choices from ``src`` (see ``check_bounds``)."""
    b = check_bounds(bounds)
    cfg = _draw_config(src, b)
    model = SchedulerModel(cfg)
    w = Workload(max_prompt_len=b["max_prompt_len"], max_output_len=b["max_output_len"])
    arrivals = _Arrivals(src, model, w)
    budget_reqs = [2 * b["max_reqs"]]
    num_steps = src.integers(1, b["max_steps"])
    for s in range(num_steps):
        # Arrival events per step; the emitted step mostly has some (same-step hits need them).
        count = src.integers(1 if s == 0 else 0, 3) if s < num_steps - 1 else src.sampled((2, 1, 3, 2, 0, 4))
        arrivals.arrive(count, budget_reqs)
        if s == num_steps - 1:
            break
        model.run(model.schedule())
    sched = _finish_step(src, model, arrivals, budget_reqs)
    pad = src.sampled(("tight", "plus one", "max_model_len")) if b["pad_tables"] else "tight"
    dtype = src.sampled((np.int64, np.int32))
    table_dtype = src.sampled((np.int32, np.int64))
    return emit_step(model, sched, pad, dtype, table_dtype)


def sample_small_step(rng: np.random.Generator | int, **bounds: Any) -> tuple[Step, dict[str, Any]]:
    """The same draw as ``batchfuzz.strategies.realizable_steps``, from a numpy Generator (seeded loops)."""
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    return draw_small_step(RngSource(rng), bounds)


# ---------------------------------------------------------------------------
# Plain generator: realistic large steps for the benchmark
# ---------------------------------------------------------------------------

PROFILES = ("decode-heavy", "prefill-heavy", "mixed")

# Per profile: token budget of the emitted step, share of max_num_seqs already
# running (decoding) before it, typical new prompt length (tokens).
_PROFILE_SHAPE = {
    "decode-heavy": (8192, 0.97, 1024),
    "mixed": (16384, 0.75, 1024),
    "prefill-heavy": (65536, 0.125, 512),
}


def default_groups(num_groups: int, base_block_size: int = 16) -> tuple[GroupSpec, ...]:
    """1: full attention B=16; 2: plus sliding window (B=32, window 1024);
    3: plus full attention with B=8."""
    if not 1 <= num_groups <= 3:
        raise ValueError(f"num_groups must be in 1..3, got {num_groups}")
    b = base_block_size
    return (GroupSpec(b), GroupSpec(2 * b, 1024), GroupSpec(max(1, b // 2)))[:num_groups]


def sample_realizable_step(
    rng: np.random.Generator | int,
    num_reqs: int = 256,
    max_blocks_per_req: int = 2048,
    profile: str = "mixed",
    num_groups: int = 1,
    groups: Sequence[GroupSpec] | None = None,
    reorder_batch_threshold: int = 1,
    num_waves: int = 8,
    dtype: Any = np.int32,
) -> tuple[Step, dict[str, Any]]:
    """A realistic large step from the same scheduler model (no Hypothesis).

    ``num_reqs`` is ``max_num_seqs``; ``max_model_len = max_blocks_per_req *
    B_0`` and every block table is ``cdiv(max_model_len, B_g)`` columns wide
    (the engine's persistent table width). History: ``num_waves`` waves of
    long-running requests (prompts sharing a few system prompts, parallel
    sampling, follow-up turns), each prefilled and then decoded for a drawn
    number of steps, so that context lengths differ; the history runs with an
    unlimited token budget (a budget is per step; this only shortens the
    simulation). Then one step with long prompts under the profile's budget
    (leaving chunked prefills), then new arrivals and the emitted step under
    the profile's budget:

    - ``decode-heavy``: ~97% of ``max_num_seqs`` already decoding, budget 8192;
    - ``mixed``: ~75% decoding, budget 16384;
    - ``prefill-heavy``: ~12% decoding, a burst of new prompts, budget 65536.

    The step schedules up to ``num_reqs`` requests (fewer when the budget runs out).
    """
    check_choice("profile", profile, PROFILES)
    if num_reqs < 1 or max_blocks_per_req < 2:
        raise ValueError(f"num_reqs must be >= 1 and max_blocks_per_req >= 2, got {num_reqs}, {max_blocks_per_req}")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    src = RngSource(rng)
    gs = tuple(groups) if groups is not None else default_groups(num_groups)
    arrivals = _large_arrivals(src, gs, profile, num_reqs, max_blocks_per_req, reorder_batch_threshold)
    _run_waves(arrivals, _PROFILE_SHAPE[profile][1], num_waves)
    sched = _large_final_schedule(arrivals)
    return emit_step(arrivals.model, sched, "max_model_len", dtype, dtype)


def _large_arrivals(src: Source, gs: tuple[GroupSpec, ...], profile: str, num_reqs: int, max_blocks_per_req: int,
                    reorder_batch_threshold: int) -> _Arrivals:
    """A large step's modelled engine, and the arrivals of its long-running requests."""
    budget, _running_share, prompt_len = _PROFILE_SHAPE[profile]
    max_model_len = max_blocks_per_req * gs[0].block_size
    prompt_len = max(1, min(prompt_len, max_model_len // 4))
    pool_blocks = sum(ceil_div(max_model_len, g.block_size) + 1 for g in gs) * (num_reqs + 8) * 2
    cfg = EngineConfig(gs, pool_blocks, True, budget, num_reqs, max_model_len, reorder_batch_threshold, "stable")
    model = SchedulerModel(cfg)
    w = Workload(max_prompt_len=prompt_len, max_output_len=max_model_len, prompt_kinds=(
        "fresh", "fresh", "prefix", "parallel", "copy", "followup", "prefix"),
        length_shapes=("any", "any", "any", "k*A+1"), max_parallel=4, num_roots=4,
        root_len=(min(16, prompt_len), max(min(16, prompt_len), prompt_len)))
    return _Arrivals(src, model, w)


def _run_waves(arrivals: _Arrivals, running_share: float, num_waves: int) -> None:
    """The history: waves of requests, each run for a drawn number of steps
    under an unlimited budget, until ``running_share`` of the seats run."""
    src, model = arrivals.src, arrivals.model
    num_reqs = model.cfg.max_num_seqs
    unlimited = 1 << 40
    old = max(0, min(num_reqs - 1, round(running_share * num_reqs)))
    for wave in range(num_waves):
        want = old * (wave + 1) // num_waves - len(model.running) - len(model.waiting)
        while want > 0:
            before = len(model.requests)
            arrivals.arrive(1, [want])
            want -= len(model.requests) - before
        for _ in range(src.integers(1, 24)):
            model.run(model.schedule(unlimited))


def _large_final_schedule(arrivals: _Arrivals) -> Scheduled:
    """A long prompt cut by the budget, then new arrivals: the emitted step's schedule."""
    src, model = arrivals.src, arrivals.model
    budget, max_model_len, num_reqs = model.cfg.token_budget, model.cfg.max_model_len, model.cfg.max_num_seqs
    prompt_len = arrivals.w.max_prompt_len
    # Long prompts cut by the budget: chunked prefills still running in the emitted step.
    long_len = min(max_model_len - 1, budget + src.integers(0, budget // 2))
    model.add_request(model.fresh_tokens(long_len), max_model_len)
    model.run(model.schedule())
    w_new = Workload(max_prompt_len=prompt_len, max_output_len=max_model_len, prompt_kinds=(
        "parallel", "prefix", "copy", "fresh", "followup", "prefix"), length_shapes=("any", "k*A+1", "k*A"),
        max_parallel=4)
    new_arrivals = _Arrivals(src, model, w_new)
    new_arrivals.prompts = list(arrivals.prompts)
    budget_reqs = [num_reqs - len(model.running) + num_reqs // 8]
    while budget_reqs[0] > 0:
        new_arrivals.arrive(1, budget_reqs)
    return _finish_step(src, model, new_arrivals, [1])
