"""The live engine's dummy runs checked under contracts A and B (docs/live-engine.md, "Dummy runs").

The CPU engine's warm-up, when it compiles, makes one dummy run: ``CPUModelRunner.warming_up_model``
calls ``profile_run``, which calls the runner's own ``_dummy_run(max_num_tokens, is_profile=True)``.
The live engine starts with ``enforce_eager`` and makes none, and compiling costs about a minute on
this CPU, so the started engine's runner runs ``_dummy_run`` here, with the warm-up's size read from
the runner: once as the warm-up does (``profile``: no attention metadata is built) and once with
``force_attention=True`` (``attention``: the layout a FULL-graph capture builds on a GPU). Two hooks on
the runner instance only read: ``_determine_batch_execution_and_padding`` is handed the token split
(contract A), ``_build_attention_metadata`` is called once the layout is in the persistent buffers
(contract B).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation
from batchfuzz.live_engine import LiveEngine
from batchfuzz.reference.make_dummy import DummyBatch, DummyBuffers

# How each dummy run is made: _dummy_run's keyword arguments.
RUNS = {"profile": {"is_profile": True}, "attention": {"force_attention": True}}
# Contract B's properties whose inputs a v1 dummy run gives. Left out: matches_oracle, index_arrays
# (v1 builds no idx_mapping or cu_num_logits), positions_and_input_ids_zero (v1 leaves them as the last
# step wrote them) and independent_of_stale_buffers (the engine's buffers, not the case's, are used).
LAYOUT_PROPERTIES = ("num_scheduled_tokens_is_split", "seq_lens_layout", "seq_lens_within_max_model_len",
                     "query_start_loc_layout", "query_start_loc_non_decreasing", "query_start_loc_diff",
                     "max_query_len_covers_batch")


@dataclass
class DummyRun:
    """What one ``_dummy_run`` built: the split it ran, and its layout where it built attention metadata."""

    run: str  # a key of RUNS
    num_tokens: int
    split: np.ndarray  # num_scheduled_tokens as the run used them
    query_start_loc: np.ndarray | None = None  # the whole persistent buffer, None: no attention metadata built
    seq_lens: np.ndarray | None = None  # the whole buffer the attention metadata reads
    max_query_len: int | None = None


@dataclass
class Verdict:
    run: str
    contract: str
    prop: str
    label: str  # safety or choice (registry.Property.label)
    failure: str  # '' where the property held


class _Hooks:
    """Wraps the two runner methods on the instance for one dummy run; restores what was there."""

    def __init__(self, runner: Any, capture: DummyRun) -> None:
        self.runner, self.capture, self.counts = runner, capture, None
        self.saved = {name: runner.__dict__.get(name) for name in ("_determine_batch_execution_and_padding",
                                                                  "_build_attention_metadata")}
        self.decide, self.build = runner._determine_batch_execution_and_padding, runner._build_attention_metadata
        runner._determine_batch_execution_and_padding, runner._build_attention_metadata = self.on_decide, self.on_build

    def on_decide(self, *args: Any, **kwargs: Any) -> Any:
        result = self.decide(*args, **kwargs)
        self.counts = kwargs["num_scheduled_tokens_np"]  # the run's own array: read when the run is over
        return result

    def on_build(self, *args: Any, **kwargs: Any) -> Any:
        rn, c = self.runner, self.capture
        c.query_start_loc, c.seq_lens = rn.query_start_loc.np.copy(), rn.seq_lens.cpu().numpy().copy()
        c.max_query_len = kwargs.get("max_query_len")
        return self.build(*args, **kwargs)

    def restore(self) -> None:
        for name, value in self.saved.items():
            if value is None:
                delattr(self.runner, name)
            else:
                setattr(self.runner, name, value)


def dummy_run(eng: LiveEngine, run: str, num_tokens: int | None = None) -> DummyRun:
    """The runner's own ``_dummy_run`` of ``num_tokens`` (the warm-up's ``max_num_tokens`` by default), captured."""
    n = eng.runner.max_num_tokens if num_tokens is None else num_tokens
    captured = DummyRun(run, n, np.zeros(0, dtype=np.int64))
    hooks = _Hooks(eng.runner, captured)
    try:
        eng.runner._dummy_run(n, **RUNS[run])
    finally:
        hooks.restore()
    if hooks.counts is None:
        raise RuntimeError(f"_dummy_run({n}) did not call _determine_batch_execution_and_padding (the hook is stale)")
    captured.split = np.asarray(hooks.counts).astype(np.int64).copy()
    return captured


def _verdict(run: str, contract: registry.Contract, name: str, target: Any, case: Case) -> Verdict:
    prop = contract.property(name)
    try:
        prop.check(target, case)
        failure = ""
    except PropertyViolation as exc:
        failure = str(exc)[:500]
    return Verdict(run, contract.name, name, prop.label, failure)


def check_dummy_run(d: DummyRun, max_model_len: int) -> list[Verdict]:
    """Contract A's properties on the run's split, and contract B's (:data:`LAYOUT_PROPERTIES`) on its layout."""
    r = int(d.split.size)
    a = registry.get("split_dummy_tokens")
    case_a = Case({"num_reqs": r, "num_tokens": d.num_tokens}, {"max_model_len": max_model_len})
    out = [_verdict(d.run, a, p.name, _SplitTarget(d), case_a) for p in a.properties]
    if d.query_start_loc is None:
        return out
    b = registry.get("make_dummy")
    assert d.seq_lens is not None
    buffers = DummyBuffers.zeros(d.seq_lens.size, d.num_tokens, np.int64)
    case_b = Case({"num_reqs": r, "num_tokens": d.num_tokens, "buffers": buffers}, {"max_model_len": max_model_len})
    return out + [_verdict(d.run, b, name, _LayoutTarget(d), case_b) for name in LAYOUT_PROPERTIES]


class _SplitTarget:
    """Contract A's signature over a captured run: the split it ran, for its own R and N only."""

    def __init__(self, d: DummyRun) -> None:
        self.d = d

    def __call__(self, num_reqs: int, num_tokens: int) -> np.ndarray:
        if (num_reqs, num_tokens) != (self.d.split.size, self.d.num_tokens):
            raise ValueError(f"captured for R={self.d.split.size}, N={self.d.num_tokens}, asked R={num_reqs}, N={num_tokens}")
        return self.d.split


class _LayoutTarget:
    """Contract B's signature over a captured run: its layout, written into the caller's buffers as the engine's
    were. Fields v1 does not build are left empty (the properties that read them are not run)."""

    def __init__(self, d: DummyRun) -> None:
        self.d = d

    def __call__(self, num_reqs: int, num_tokens: int, buffers: DummyBuffers) -> DummyBatch:
        d = self.d
        assert d.query_start_loc is not None and d.seq_lens is not None
        buffers.seq_lens[...] = d.seq_lens
        buffers.query_start_loc[...] = d.query_start_loc
        empty = np.zeros(0, dtype=np.int64)
        return DummyBatch(num_scheduled_tokens=d.split, seq_lens=d.seq_lens, query_start_loc=d.query_start_loc,
                          positions=empty, input_ids=empty, idx_mapping=empty, logits_indices=empty, cu_num_logits=empty,
                          max_query_len=d.max_query_len)


def check_dummy_runs(eng: LiveEngine, sizes: Sequence[int] | None = None) -> list[Verdict]:
    """Every run of :data:`RUNS` at each size (the warm-up's ``max_num_tokens`` by default), checked."""
    return [v for n in (sizes or (None,)) for run in RUNS
            for v in check_dummy_run(dummy_run(eng, run, n), eng.settings.max_model_len)]


class UnevenDummySplit:
    """Planted: the dummy run hands its split on with one token moved from its first request to its last
    (the total unchanged), as a remainder put on the last request would."""

    name = "_determine_batch_execution_and_padding"

    def __init__(self, runner: Any) -> None:
        self.original = runner._determine_batch_execution_and_padding

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        n = kwargs["num_scheduled_tokens_np"]
        if len(n) > 1 and n[0] > 1:
            n[0] -= 1
            n[-1] += 1
        return self.original(*args, **kwargs)


@contextmanager
def planted_uneven_split(eng: LiveEngine) -> Iterator[None]:
    """:class:`UnevenDummySplit` on ``eng``'s runner instance for the duration (the installed vLLM is not edited)."""
    plant = UnevenDummySplit(eng.runner)
    setattr(eng.runner, plant.name, plant)
    try:
        yield
    finally:
        delattr(eng.runner, plant.name)
