"""Contract E steps from the engine's own scheduler (docs/engine-steps.md).

A *workload* (:class:`EngineWorkload`: the engine's settings and the
requests, each with its arrival step, prompt token ids and the output
tokens it will sample) is drawn from a ``workloads.Source`` (Hypothesis
choices, which shrink, or a numpy generator) by :func:`draw_workload`, then
run through vLLM's real scheduler (``batchfuzz.vllm_scheduler``) by
:func:`engine_step`, which returns the last scheduled step as the model
runner lays it out, as a contract E ``Step`` with its labels. Shrinking
works on the workload (fewer steps and requests, shorter prompts and
outputs, block size 2, ample budget, pool and ``max_num_seqs``, no chunking
threshold), so a counterexample is the smallest workload, and the step it
shows is one vLLM produced.

:func:`model_step` feeds the same workload to batchfuzz's scheduler model
(``batchfuzz.scheduler_model``) and :func:`differences` compares the two
steps (conformance of the model; docs/contracts.md lists the known
differences by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from batchfuzz.reference._args import ceil_div
from batchfuzz.reference._step import Step
from batchfuzz.workloads import Source

# Labels of an engine step (scheduler-level input classes, as the model's).
SAME_STEP_HIT = "same-step hit"
READER_BEFORE_WRITER = "same-step hit, reader before writer"
FULLY_CACHED = "fully cached prompt (q == 1, c > 0)"
PREFIX_HIT = "prefix hit"
DECODE = "decode"
CHUNKED_PREFILL = "chunked prefill"
PREEMPTION = "preempted and resumed"
REORDERED = "decodes moved to the front"

BLOCK_SIZES = (2, 4, 1, 8, 16, 3)
# Weighted by repetition; the first is where Hypothesis shrinks to. Identical
# prompts arriving together (parallel sampling) and lengths k*B + 1 make the
# same-step hits contract E is about.
PROMPT_KINDS = ("fresh", "parallel", "copy", "prefix", "parallel", "copy", "parallel")
LENGTH_SHAPES = ("any", "k*B+1", "k*B", "k*B+1", "k*B+1")


@dataclass(frozen=True)
class EngineRequest:
    arrival: int  # the step at whose start it is submitted
    prompt: tuple[int, ...]
    outputs: tuple[int, ...]  # the tokens it samples; len = max_tokens


@dataclass(frozen=True)
class EngineWorkload:
    """What the engine is configured with and what it is fed."""

    block_size: int
    num_blocks: int  # the KV cache's blocks, the null block 0 included
    token_budget: int
    max_num_seqs: int
    max_model_len: int
    long_prefill_token_threshold: int
    reorder_batch_threshold: int | None
    num_steps: int
    requests: tuple[EngineRequest, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and ints (a reproduction prints it)."""
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "requests"}
        d["requests"] = [[r.arrival, list(r.prompt), list(r.outputs)] for r in self.requests]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineWorkload:
        if not isinstance(d, dict):
            raise TypeError(f"workload must be a dict (EngineWorkload.to_dict()), got {type(d).__name__}")
        reqs = tuple(EngineRequest(int(a), tuple(int(t) for t in p), tuple(int(t) for t in o)) for a, p, o in d["requests"])
        return cls(**{**{k: v for k, v in d.items() if k != "requests"}, "requests": reqs})


DEFAULT_BOUNDS: dict[str, int] = {"max_reqs": 6, "max_events": 4, "max_prompt_len": 24, "max_output_len": 4, "max_steps": 4}


def check_bounds(bounds: dict[str, Any]) -> dict[str, int]:
    """``bounds`` merged with :data:`DEFAULT_BOUNDS`; TypeError for an unknown
    name, ValueError for a value that is not an int >= 1, naming it."""
    unknown = set(bounds) - set(DEFAULT_BOUNDS)
    if unknown:
        raise TypeError(f"unknown bounds {sorted(unknown)}; known: {sorted(DEFAULT_BOUNDS)}")
    b = {**DEFAULT_BOUNDS, **bounds}
    for name, value in b.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    return b


def _length(src: Source, block_size: int, hi: int) -> int:
    """A prompt length in [1, hi]; block-aligned shapes (k*B, k*B + 1) are common: they make hits."""
    shape = src.sampled(LENGTH_SHAPES)
    if shape == "any" or block_size > hi:
        return src.integers(1, hi)
    k = src.integers(0 if shape == "k*B+1" else 1, (hi - 1) // block_size if shape == "k*B+1" else hi // block_size)
    return max(1, min(hi, k * block_size + (1 if shape == "k*B+1" else 0)))


class _Tokens:
    """Fresh token ids, never repeated within a workload."""

    def __init__(self) -> None:
        self.next = 1

    def fresh(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out


def draw_workload(src: Source, bounds: dict[str, Any] | None = None) -> EngineWorkload:
    """A small workload (see :func:`check_bounds`). Shrinks towards one step,
    arrivals in the emitted (last) step,
    one fresh short prompt with one output token, block size 2, ample token
    budget, pool and ``max_num_seqs``, no long-prefill threshold, reorder
    threshold 1."""
    b = check_bounds(bounds or {})
    block_size = src.sampled(BLOCK_SIZES)
    num_steps = src.integers(1, b["max_steps"])
    max_model_len = b["max_prompt_len"] + b["max_output_len"] + 1
    tokens = _Tokens()
    events = _draw_arrivals(src, b, block_size, num_steps, tokens)
    requests: list[EngineRequest] = []
    for arrival, prompt, copies, greedy in sorted(events, key=lambda e: e[0]):
        n_out = src.integers(1, b["max_output_len"])
        shared = tokens.fresh(n_out)
        for _ in range(copies):
            requests.append(EngineRequest(arrival, tuple(prompt), tuple(shared if greedy else tokens.fresh(n_out))))
    max_num_seqs = b["max_reqs"] - src.integers(0, b["max_reqs"] - 1)
    ample_budget = max_num_seqs * max_model_len
    budget = ample_budget - src.integers(0, ample_budget - 1)
    if src.integers(0, 2) == 2:  # small budgets make chunked prefill common
        budget = min(budget, src.integers(1, max(1, b["max_prompt_len"] // 2)))
    budget = max(budget, max_num_seqs)  # the engine requires max_num_batched_tokens >= max_num_seqs
    one_request = ceil_div(max_model_len, block_size)
    ample_blocks = one_request * (len(requests) + 1) + 1
    num_blocks = ample_blocks
    if src.integers(0, 2) == 2:  # tight pools preempt; the smallest still holds one longest request
        num_blocks = one_request + 1 + src.integers(0, one_request)
    threshold = 0 if src.integers(0, 2) < 2 else src.integers(1, b["max_prompt_len"])
    reorder = src.sampled((1, None))
    return EngineWorkload(block_size, num_blocks, budget, max_num_seqs, max_model_len, threshold, reorder, num_steps,
                          tuple(requests))


def _draw_arrivals(src: Source, b: dict[str, Any], block_size: int, num_steps: int,
                   tokens: _Tokens) -> list[tuple[int, list[int], int, bool]]:
    """The arrival events: (step, prompt, copies, greedy: the copies share their outputs)."""
    prompts: list[list[int]] = []
    events: list[tuple[int, list[int], int, bool]] = []
    num_reqs = 0
    for _ in range(src.integers(1, b["max_events"])):
        if num_reqs >= b["max_reqs"]:
            break
        arrival = num_steps - 1 - src.integers(0, num_steps - 1)  # in the emitted step first: same-step hits need it
        kind = src.sampled(PROMPT_KINDS)
        copies = 1
        if kind in ("copy", "prefix") and prompts:
            parent = prompts[len(prompts) - 1 - src.integers(0, len(prompts) - 1)]
            if kind == "copy":
                prompt = list(parent)
            else:
                keep = min(len(parent), src.sampled((block_size * src.integers(0, len(parent) // block_size),
                                                     src.integers(1, len(parent)))))
                room = b["max_prompt_len"] - keep
                prompt = parent[:keep] + tokens.fresh(_length(src, block_size, room) if room >= 1 else 0)
        else:
            prompt = tokens.fresh(_length(src, block_size, b["max_prompt_len"]))
            if kind == "parallel":
                copies = src.integers(2, 4)
        copies = min(copies, b["max_reqs"] - num_reqs)
        events.append((arrival, prompt, copies, copies > 1 and src.integers(0, 1) == 1))
        prompts.append(prompt)
        num_reqs += copies
    return events


def sample_workload(rng: np.random.Generator | int, **bounds: Any) -> EngineWorkload:
    """:func:`draw_workload` from a numpy Generator (seeded loops, the benchmark)."""
    from batchfuzz.workloads import RngSource

    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    return draw_workload(RngSource(rng), bounds)


# ---------------------------------------------------------------- step sources and domains

# Where scheduled steps come from (``--steps SOURCE``, ``realizable_steps(source=...)``).
STEP_SOURCES = ("model", "engine")


def steps_domain(contract: Any, source: str, domain: str | None = None) -> str:
    """The domain of ``contract`` that step source ``source`` feeds: the one
    rule behind ``--steps SOURCE`` of ``check`` and ``fuzz``. A contract over
    scheduled steps declares it in its strategies module as
    ``STEP_SOURCE_DOMAINS`` (source -> domain; contract E: model -> ``engine``,
    engine -> ``engine-steps``; contract D: engine -> ``engine-steps``).
    ValueError, its message naming ``--steps`` and the value, where the
    contract has no such domain, ``domain`` (an explicit ``--domain``) is
    another one, or the source is the engine and vLLM's scheduler cannot be
    imported here."""
    import importlib

    if source not in STEP_SOURCES:
        raise ValueError(f"--steps must be one of {', '.join(map(repr, STEP_SOURCES))}, got {source!r}")
    module = importlib.import_module(contract.inputs.module) if contract.inputs is not None else None
    fed: dict[str, str] = dict(getattr(module, "STEP_SOURCE_DOMAINS", {}))
    if source not in fed:
        has = f"its step sources: {', '.join(fed)}" if fed else "it is not a contract over scheduled steps"
        raise ValueError(f"--steps {source}: contract {contract.name!r} has no domain of scheduled steps from {source!r} ({has})")
    name = fed[source]
    if domain is not None and domain != name:
        raise ValueError(f"--steps {source} is the domain {name!r} of contract {contract.name!r}; --domain {domain!r} contradicts it")
    if source == "engine":
        from batchfuzz import vllm_scheduler

        why = vllm_scheduler.import_error()
        if why is not None:
            raise ValueError(f"--steps engine: {why}")
    return name


# ---------------------------------------------------------------- running a workload


@dataclass
class LaidOutStep:
    """A scheduled step in batch order, keyed by request (for comparisons)."""

    req_ids: list[str]
    num_computed_tokens: list[int]
    num_scheduled_tokens: list[int]
    blocks: list[list[int]]  # per row, the blocks covering its c + q positions
    new: list[bool]
    step_index: int
    preempted: bool = False


def _settings(w: EngineWorkload) -> Any:
    from batchfuzz.vllm_scheduler import SchedulerSettings

    return SchedulerSettings(w.block_size, w.num_blocks, w.token_budget, w.max_num_seqs, w.max_model_len,
                             w.long_prefill_token_threshold, w.reorder_batch_threshold)


def run_engine(w: EngineWorkload) -> tuple[LaidOutStep, np.ndarray]:
    """Step vLLM's scheduler through ``w``; the last step that schedules
    something (at most ``w.num_steps``), and the model runner's whole block table for it."""
    from batchfuzz.vllm_scheduler import Engine

    engine = Engine(_settings(w))
    last: tuple[LaidOutStep, np.ndarray] | None = None
    for s in range(w.num_steps):
        for k, r in enumerate(w.requests):
            if r.arrival == s:
                engine.add_request(str(k), list(r.prompt), list(r.outputs))
        out, step = engine.schedule()
        if step.req_ids:
            n = len(step.req_ids)
            blocks = [[int(x) for x in step.block_table[i, : ceil_div(int(step.num_computed_tokens[i] + step.num_scheduled_tokens[i]),
                                                                      w.block_size)]] for i in range(n)]
            preempted = any(engine.scheduler.requests[rid].num_preemptions > 0 for rid in step.req_ids)
            laid = LaidOutStep(list(step.req_ids), [int(x) for x in step.num_computed_tokens],
                               [int(x) for x in step.num_scheduled_tokens], blocks,
                               [rid in step.new_req_ids for rid in step.req_ids], s, preempted)
            last = (laid, step.block_table)
        if s == w.num_steps - 1:
            break
        engine.run(out)
    if last is None:
        raise ValueError("the workload schedules nothing (a request must arrive at step 0)")
    return last


def _labels(laid: LaidOutStep, prompt_lens: list[int], block_size: int) -> list[str]:
    c, q = laid.num_computed_tokens, laid.num_scheduled_tokens
    n = len(c)
    written: dict[int, int] = {}  # block -> first row writing it this step
    for i in range(n):
        for col in range(c[i] // block_size, ceil_div(c[i] + q[i], block_size)):
            written.setdefault(laid.blocks[i][col], i)
    hits = [(i, written[blk]) for i in range(n) if laid.new[i] and c[i] > 0
            for blk in laid.blocks[i][: c[i] // block_size] if written.get(blk, i) != i]
    out: list[str] = []
    if hits:
        out.append(SAME_STEP_HIT)
        if any(rd < wr for rd, wr in hits):
            out.append(READER_BEFORE_WRITER)
    if any(laid.new[i] and q[i] == 1 and c[i] > 0 for i in range(n)):
        out.append(FULLY_CACHED)
    if any(laid.new[i] and c[i] > 0 for i in range(n)):
        out.append(PREFIX_HIT)
    if any(c[i] >= prompt_lens[i] for i in range(n)):
        out.append(DECODE)
    if any(c[i] < prompt_lens[i] and (c[i] + q[i] < prompt_lens[i] or not laid.new[i]) for i in range(n)):
        out.append(CHUNKED_PREFILL)
    if laid.preempted:
        out.append(PREEMPTION)
    return out


def engine_step(w: EngineWorkload) -> tuple[Step, dict[str, Any]]:
    """The contract E step vLLM's scheduler produces for ``w``: rows in the
    model runner's batch order, ``c`` and the block table from its ``InputBatch``
    (int32, the table the engine's width), ``q`` from the ``SchedulerOutput``;
    and its info (labels, the workload, the step's index, request ids)."""
    laid, table = run_engine(w)
    prompt_lens = [len(w.requests[int(rid)].prompt) for rid in laid.req_ids]
    step = Step(np.array(laid.num_computed_tokens, dtype=np.int32), np.array(laid.num_scheduled_tokens, dtype=np.int32),
                [np.ascontiguousarray(table, dtype=np.int32)], [w.block_size])
    info = {"labels": _labels(laid, prompt_lens, w.block_size), "workload": w.to_dict(), "step_index": laid.step_index,
            "req_ids": [int(r) for r in laid.req_ids], "reorder_batch_threshold": w.reorder_batch_threshold}
    return step, info


def engine_step_args(workload: dict[str, Any] | EngineWorkload, recorded: dict[str, Any] | None = None) -> dict[str, Any]:
    """The arguments of the step vLLM's scheduler produces on ``workload``
    (what a reproduction calls): contract E's four canonical arguments; with
    ``recorded`` (a case's arguments), ``recorded`` with those of its
    arguments that come from the step taken from the engine, the rest (a
    contract D case's padding) as recorded."""
    w = workload if isinstance(workload, EngineWorkload) else EngineWorkload.from_dict(workload)
    step, _ = engine_step(w)
    args: dict[str, Any] = {"num_computed_tokens": step.num_computed_tokens, "num_scheduled_tokens": step.num_scheduled_tokens,
                            "block_tables": list(step.block_tables), "block_sizes": list(step.block_sizes)}
    if recorded is None:
        return args
    return {k: args.get(k, v) for k, v in recorded.items()}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b, strict=True)))
    return bool(np.array_equal(np.asarray(a), np.asarray(b)))


def same_args(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two argument dicts hold the same values (arrays by value, not dtype; lists element by element)."""
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- the model on the same workload


def run_model(w: EngineWorkload) -> LaidOutStep:
    """The same workload through ``batchfuzz.scheduler_model`` (one full-attention
    group, the engine's pool less its null block, the engine's four-region reorder)."""
    from batchfuzz.scheduler_model import EngineConfig, GroupSpec, SchedulerModel

    cfg = EngineConfig((GroupSpec(w.block_size),), w.num_blocks - 1, True, w.token_budget, w.max_num_seqs, w.max_model_len,
                       w.reorder_batch_threshold or 0, "regions" if w.reorder_batch_threshold else "stable",
                       long_prefill_token_threshold=w.long_prefill_token_threshold, admit_whole_sequence=True)
    model = SchedulerModel(cfg)
    model.fresh_tokens(max((t for r in w.requests for t in (*r.prompt, *r.outputs)), default=0))  # ours come first
    streams: dict[tuple[int, ...], int] = {}
    reqs: dict[int, int] = {}  # model rid -> workload index
    last: LaidOutStep | None = None
    for s in range(w.num_steps):
        for k, r in enumerate(w.requests):
            if r.arrival == s:
                if r.outputs not in streams:
                    streams[r.outputs] = model.new_stream()
                    model.set_outputs(streams[r.outputs], r.outputs)
                reqs[model.add_request(r.prompt, len(r.outputs), streams[r.outputs]).rid] = k
        sched = model.schedule()
        if sched.entries:
            order, _ = model.batch_order(sched)
            q_of = {req.rid: n for req, n in sched.entries}
            last = LaidOutStep([str(reqs[r.rid]) for r in order], [sched.computed[r.rid] for r in order],
                               [q_of[r.rid] for r in order], [list(r.blocks[0]) for r in order],
                               [r.rid in sched.new for r in order], s, model.any_preemption)
        else:
            model.batch_order(sched)
        if s == w.num_steps - 1:
            break
        model.run(sched)
    if last is None:
        raise ValueError("the workload schedules nothing (a request must arrive at step 0)")
    return last


def _renaming(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]]) -> bool:
    """Whether the block lists are equal up to a one-to-one renaming of block ids."""
    fwd: dict[int, int] = {}
    back: dict[int, int] = {}
    if [len(x) for x in a] != [len(x) for x in b]:
        return False
    for x, y in zip((v for row in a for v in row), (v for row in b for v in row), strict=True):
        if fwd.setdefault(x, y) != y or back.setdefault(y, x) != x:
            return False
    return True


def differences(engine: LaidOutStep, model: LaidOutStep) -> list[str]:
    """How the model's step differs from the engine's, by aspect (empty: they agree):
    ``step`` (which step was emitted), ``requests`` (who is scheduled), ``tokens``
    (c and q per request), ``batch order``, ``block tables`` (up to renaming)."""
    out: list[str] = []
    if engine.step_index != model.step_index:
        out.append(f"step: engine emits step {engine.step_index}, model {model.step_index}")
        return out
    if set(engine.req_ids) != set(model.req_ids):
        out.append(f"requests: engine schedules {sorted(engine.req_ids, key=int)}, model {sorted(model.req_ids, key=int)}")
        return out
    e = {r: (engine.num_computed_tokens[i], engine.num_scheduled_tokens[i]) for i, r in enumerate(engine.req_ids)}
    m = {r: (model.num_computed_tokens[i], model.num_scheduled_tokens[i]) for i, r in enumerate(model.req_ids)}
    bad = sorted((r for r in e if e[r] != m[r]), key=int)
    if bad:
        out.append("tokens: " + ", ".join(f"request {r} (c, q) engine {e[r]}, model {m[r]}" for r in bad))
    if engine.req_ids != model.req_ids:
        out.append(f"batch order: engine {engine.req_ids}, model {model.req_ids}")
    rows_m = {r: model.blocks[i] for i, r in enumerate(model.req_ids)}
    if not bad and not _renaming(engine.blocks, [rows_m[r] for r in engine.req_ids]):
        out.append(f"block tables: engine {engine.blocks}, model {[rows_m[r] for r in engine.req_ids]} (rows in the engine's order)")
    return out


# ---------------------------------------------------------------- conformance of the model, as a search

# The nightly work item of the conformance property (batchfuzz.fuzz): the model's
# steps checked against vLLM's scheduler, reported as contract/target/property.
CONFORMANCE_SUBJECT = "scheduler_model"
CONFORMANCE_AGAINST = "vllm-scheduler"
CONFORMANCE = "conformance"
CONFORMANCE_SPEC = ("on one workload, batchfuzz's scheduler model and vLLM's scheduler schedule the same requests with "
                    "the same computed and scheduled tokens, in the same batch order, with the same block tables up to "
                    "renaming (docs/contracts.md, contract E, \"Conformance of the model\")")


def conformance(workload: dict[str, Any] | EngineWorkload) -> list[str]:
    """How the scheduler model's step differs from vLLM's scheduler's on ``workload`` (:func:`differences`; empty: they agree)."""
    w = workload if isinstance(workload, EngineWorkload) else EngineWorkload.from_dict(workload)
    engine, _ = run_engine(w)
    return differences(engine, run_model(w))


@dataclass
class ConformanceResult:
    """One search of the conformance property: examples run and, when the two
    schedulers differ, the smallest workload found and how they differ there."""

    examples: int = 0
    seconds: float = 0.0
    workload: dict[str, Any] | None = None
    differences: list[str] = field(default_factory=list)
    first_failure_example: int | None = None
    out_of_time: bool = False  # the time ended first (with a workload: while shrinking it)

    def reproduction(self) -> str:
        """A test that fails while the model differs from the installed vLLM's scheduler on the workload."""
        return "\n".join([
            f"# batchfuzz reproduction: {CONFORMANCE_SUBJECT} against {CONFORMANCE_AGAINST} (the installed vLLM), {CONFORMANCE}",
            f"# {'; '.join(self.differences)}",
            "from batchfuzz.engine_steps import conformance",
            f"workload = {self.workload!r}",
            "found = conformance(workload)",
            "assert found == [], found"])


class _OutOfTime(Exception):
    pass


class _Differs(Exception):
    pass


def conformance_search(run_settings: Any, *, seed: int | None = None, deadline: float | None = None,
                       generate_until: float | None = None, should_stop: Any = None) -> ConformanceResult:
    """Search workloads (:func:`draw_workload`, shrinking as it says) for one
    on which :func:`conformance` finds a difference, under ``run_settings``
    (a Hypothesis ``settings``; its database keeps what it finds). No new
    workload starts after ``generate_until`` or ``deadline`` (``time.time()``)
    or once ``should_stop()``; a difference found is shrunk until ``deadline``."""
    import time

    from hypothesis import given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis import strategies as st
    from hypothesis.errors import HypothesisException

    from batchfuzz.workloads import HypothesisSource

    result = ConformanceResult()
    failing: list[tuple[EngineWorkload, list[str]]] = []

    def body(data: Any) -> None:
        w = draw_workload(HypothesisSource(data.draw))  # drawn first: a replayed example draws what it drew before
        now = time.time()
        if (deadline is not None and now > deadline) or (should_stop is not None and should_stop()) or \
                (generate_until is not None and now > generate_until and result.examples and not failing):
            raise _OutOfTime
        result.examples += 1
        found = conformance(w)
        if found:
            if result.first_failure_example is None:
                result.first_failure_example = result.examples
            failing.append((w, found))
            raise _Differs

    body._hypothesis_internal_add_digest = repr((CONFORMANCE_SUBJECT, CONFORMANCE_AGAINST, CONFORMANCE)).encode()  # type: ignore[attr-defined]
    test = given(st.data())(body)
    if seed is not None and not run_settings.derandomize:
        test = hypothesis_seed(seed)(test)
    test = settings(run_settings, report_multiple_bugs=False)(test)
    start = time.perf_counter()
    try:
        test()
    except _OutOfTime:
        result.out_of_time = True
    except _Differs:
        pass
    except HypothesisException:
        if not failing:
            raise
    finally:
        result.seconds = time.perf_counter() - start
    if failing:
        w, found = failing[-1]  # Hypothesis replays its smallest failing workload last
        result.workload, result.differences = w.to_dict(), found
    return result
