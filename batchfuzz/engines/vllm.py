"""vLLM's own batch-layout functions as batchfuzz targets.

Each binding cuts one function (or the statements of a method that do one
job) out of a vLLM release's source text with ``batchfuzz.bind`` and runs it
unchanged over stand-ins of the engine objects it reads, on a machine with no
GPU and none of vLLM's dependencies (only numpy and torch on the CPU). A
release comes from a wheel (read as a zip), a source checkout or the
installed distribution (``ReleaseSource``). docs/vllm-code.md describes the
functions release by release.

The bindings (paths inside the release, under ``vllm/v1/worker/``):

- ``gpu/input_batch.py:InputBatch.make_dummy`` (MRV2) as ``split_dummy_tokens``
  (its ``num_scheduled_tokens``) and as ``make_dummy`` (stale ``DummyBuffers``
  copied into the engine's own ``InputBuffers``, built by its ``__init__``,
  and back);
- ``gpu/model_runner.py:GPUModelRunner._dummy_run`` (MRV2) as
  ``split_dummy_tokens``: the statements writing ``num_tokens_per_request``;
- ``gpu/lora_utils.py:create_lora_capture_hook`` as ``split_dummy_tokens``: the
  counts its hook passes to ``runner.maybe_select_dummy_loras``;
- ``gpu_model_runner.py:GPUModelRunner._dummy_run`` (v1) as
  ``split_dummy_tokens`` (the statements writing ``num_scheduled_tokens_list``)
  and as ``pad_query_start_loc`` (the statements writing
  ``self.query_start_loc``, whose ``.np`` is the contract's ``out``);
- ``ubatch_utils.py:maybe_create_ubatch_slices`` as ``split_ubatches``, after
  the refusal its caller applies (``dp_utils.py:_post_process_ubatch`` on one
  data-parallel rank's votes);
- ``gpu_model_runner.py:GPUModelRunner._allow_microbatching`` (v1, 0.28.0 and
  later) as ``allow_microbatching``, on a stand-in input batch and block tables.

A function a release lacks is "absent"; one whose code no longer fits its
binding (a name no one provides, a signature or attribute that changed, a
fragment that is not there) is "unbindable" with the reason. ``bindings``
lists all of them for a release; ``resolve(ref)`` rebuilds one in a fresh
process. Every binding is checked under its contract's ``engine`` domain
(docs/contracts.md): the inputs the engine's callers really produce (the v1
query_start_loc fill only ever sees R >= 1 and a buffer whose [0] is 0).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from batchfuzz import bind
from batchfuzz import engines as _engines
from batchfuzz.bind import Record, Recorder, Stub
from batchfuzz.engines import Bound, SourceError
from batchfuzz.preconditions import domain
from batchfuzz.reference.make_dummy import DummyBatch, DummyBuffers

ENGINE = "vllm"
# The releases of the published matrix (docs/vllm-matrix.json; batchfuzz engine vllm --all-releases).
RELEASES = ("0.22.0", "0.23.0", "0.26.0", "0.27.0", "0.28.0", "0.33.0")

INPUT_BATCH = "vllm/v1/worker/gpu/input_batch.py"
MRV2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
LORA_UTILS = "vllm/v1/worker/gpu/lora_utils.py"
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
UBATCH_UTILS = "vllm/v1/worker/ubatch_utils.py"
DP_UTILS = "vllm/v1/worker/dp_utils.py"


class ReleaseSource(_engines.ReleaseSource):
    """A vLLM release's files: ``from_wheel``, ``from_dir``, ``installed``, ``from_ref``."""

    distribution = "vllm"
    package = "vllm"


# Names the cut-outs read that no file of theirs defines in a form that can
# be cut out (a logger made at import time).
_STAND_INS: dict[str, Any] = {"logger": logging.getLogger("batchfuzz.engines.vllm")}


class _Release:
    """One release: its source and the files parsed so far (shared by every binding)."""

    def __init__(self, source: _engines.ReleaseSource) -> None:
        self.source = source
        self.files: dict[str, bind.SourceFile] = {}

    def loader(self) -> bind.Loader:
        return bind.Loader(self.source, "vllm", stand_ins=_STAND_INS, files=self.files)


# ---------------------------------------------------------------- MRV2 InputBatch.make_dummy (A, B)


def _make_dummy_parts(rel: _Release) -> tuple[Callable[..., Any], Callable[..., Any], str]:
    loader = rel.loader()
    f = loader.file(INPUT_BATCH)
    piece = f.piece("InputBatch.make_dummy")
    if piece.kind != "classmethod":
        raise bind.Unbindable(f"{piece.label} is no longer a classmethod")
    init_piece = f.piece("InputBuffers.__init__")
    detail = f"{piece.label}; buffers from {init_piece.label} on the CPU; cls = a Record of its keyword arguments"
    return loader.load(piece), loader.load(init_piece), detail


def _input_buffers(init: Callable[..., Any], max_num_reqs: int, max_num_tokens: int) -> Stub:
    """The engine's own InputBuffers, built by its ``__init__`` on the CPU."""
    buffers = Stub("InputBuffers")
    init(buffers, max_num_reqs=max_num_reqs, max_num_tokens=max_num_tokens, device=torch.device("cpu"))
    return buffers


def _split_args(num_reqs: Any, num_tokens: Any) -> tuple[int, int]:
    r = bind.count("num_reqs", num_reqs, 1)
    n = bind.count("num_tokens", num_tokens, 1)
    if r > n:
        raise ValueError(f"num_reqs must be <= num_tokens, got num_reqs={r}, num_tokens={n}")
    return r, n


def _bind_make_dummy_split(rel: _Release) -> tuple[Callable[..., Any], str]:
    make_dummy, init, detail = _make_dummy_parts(rel)

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r, n = _split_args(num_reqs, num_tokens)
        batch = make_dummy(Record, r, n, _input_buffers(init, r, n))
        return np.asarray(batch.num_scheduled_tokens).copy()

    return split_dummy_tokens, detail + "; result: its num_scheduled_tokens"


_BUFFER_FIELDS = ("seq_lens", "query_start_loc", "positions", "input_ids")


def _bind_make_dummy_layout(rel: _Release) -> tuple[Callable[..., Any], str]:
    make_dummy, init, detail = _make_dummy_parts(rel)

    def make_dummy_layout(num_reqs: Any, num_tokens: Any, buffers: DummyBuffers) -> DummyBatch:
        r, n = _split_args(num_reqs, num_tokens)
        if not isinstance(buffers, DummyBuffers):
            raise TypeError(f"buffers must be a DummyBuffers, got {type(buffers).__name__}")
        if r > buffers.max_num_reqs or n > buffers.max_num_tokens:
            raise ValueError(f"buffers of capacity max_num_reqs={buffers.max_num_reqs}, max_num_tokens={buffers.max_num_tokens} "
                             f"cannot hold num_reqs={r}, num_tokens={n}")
        engine = _input_buffers(init, buffers.max_num_reqs, buffers.max_num_tokens)
        for name in _BUFFER_FIELDS:  # the stale contents, in the engine's own dtypes
            theirs, ours = getattr(engine, name), bind.int_array(f"buffers.{name}", getattr(buffers, name), minimum=None)
            if tuple(theirs.shape) != ours.shape:
                raise bind.Unbindable(f"the engine's InputBuffers.{name} has shape {tuple(theirs.shape)}, buffers.{name} {ours.shape}")
            theirs.copy_(torch.from_numpy(bind.cast_exact(f"buffers.{name}", ours, bind.to_numpy(theirs).dtype)))
        batch = make_dummy(Record, r, n, engine)
        for name in _BUFFER_FIELDS:  # and back: the caller's buffers are the persistent ones
            getattr(buffers, name)[...] = bind.to_numpy(getattr(engine, name))
        return DummyBatch(
            num_scheduled_tokens=np.asarray(batch.num_scheduled_tokens).copy(),
            seq_lens=bind.to_numpy(engine.seq_lens).copy(), query_start_loc=bind.to_numpy(engine.query_start_loc).copy(),
            positions=bind.to_numpy(batch.positions).copy(), input_ids=bind.to_numpy(batch.input_ids).copy(),
            idx_mapping=bind.to_numpy(batch.idx_mapping).copy(), logits_indices=bind.to_numpy(batch.logits_indices).copy(),
            cu_num_logits=bind.to_numpy(batch.cu_num_logits).copy(),
        )

    return make_dummy_layout, detail + "; seq_lens and query_start_loc: the whole buffers"


# ---------------------------------------------------------------- the two _dummy_run splits and the LoRA hook (A)


def _bind_mrv2_dummy_run(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(MRV2_RUNNER).fragment("GPUModelRunner._dummy_run", bind.Writes("num_tokens_per_request"), ("self", "num_tokens"))
    run = loader.load(piece)

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r, n = _split_args(num_reqs, num_tokens)
        runner = Stub("GPUModelRunner", max_num_reqs=r, speculator=None)
        return np.asarray(run(runner, n)["num_tokens_per_request"])

    return split_dummy_tokens, f"{piece.label}; self.max_num_reqs = num_reqs (so R = min(N, max_num_reqs) = R), no speculator"


def _bind_lora_hook(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(LORA_UTILS).piece("create_lora_capture_hook")
    create = loader.load(piece)

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r, n = _split_args(num_reqs, num_tokens)
        select = Recorder("runner.maybe_select_dummy_loras")
        hook = create(Stub("lora_config", max_loras=1), Stub("runner", maybe_select_dummy_loras=select))
        if hook is None:
            raise bind.Unbindable("create_lora_capture_hook returned no hook for a LoRA config")
        hook(num_active_loras=1, num_reqs=r, num_tokens=n)
        return np.asarray(select.last.arg(1, "num_scheduled_tokens")).copy()

    return split_dummy_tokens, f"{piece.label}; the counts the hook passes to runner.maybe_select_dummy_loras"


def _bind_v1_dummy_run(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(V1_RUNNER).fragment("GPUModelRunner._dummy_run", bind.Writes("num_scheduled_tokens_list"), ("self", "num_tokens"))
    run = loader.load(piece)

    def split_dummy_tokens(num_reqs: Any, num_tokens: Any) -> np.ndarray:
        r, n = _split_args(num_reqs, num_tokens)
        runner = Stub("GPUModelRunner", uniform_decode_query_len=1, scheduler_config=Stub("scheduler_config", max_num_seqs=r))
        return np.asarray(run(runner, n)["num_scheduled_tokens_list"])

    return split_dummy_tokens, (f"{piece.label}; scheduler_config.max_num_seqs = num_reqs, a mixed (not uniform-decode, "
                                "not create_mixed_batch) dummy run")


# ---------------------------------------------------------------- the v1 dummy run's query_start_loc fill (C)


def _bind_v1_query_start_loc(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    f = loader.file(V1_RUNNER)
    piece = f.fragment("GPUModelRunner._dummy_run", bind.Writes("self.query_start_loc"),
                       ("self", "num_reqs", "num_reqs_padded", "num_scheduled_tokens"))
    run = loader.load(piece)
    methods = {}
    if f.has("GPUModelRunner._get_cumsum_and_arange"):
        methods["_get_cumsum_and_arange"] = loader.load(f.piece("GPUModelRunner._get_cumsum_and_arange"))

    def pad_query_start_loc(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
        nst = bind.int_array("num_scheduled_tokens", num_scheduled_tokens)
        r, p = nst.size, bind.count("num_reqs_padded", num_reqs_padded)
        if p < r:
            raise ValueError(f"num_reqs_padded must be >= len(num_scheduled_tokens) = {r}, got {p}")
        if out is None:
            buf = np.zeros(p + 1, dtype=np.int32)  # a fresh persistent buffer (int32, as the engine's)
        else:
            buf = bind.int_array("out", out, minimum=None)
            if buf.size < p + 1:
                raise ValueError(f"out has {buf.size} entries, needs at least num_reqs_padded + 1 = {p + 1}")
        total = int(nst.sum())
        runner = Stub("GPUModelRunner", query_start_loc=bind.cpu_gpu_buffer(buf),
                      query_pos=bind.cpu_gpu_buffer(np.zeros(max(total, 1), dtype=np.int64)),
                      arange_np=np.arange(max(total, 1) + 1, dtype=np.int64), methods=methods)
        run(runner, r, p, nst)
        return buf[: p + 1]

    helpers = " and GPUModelRunner._get_cumsum_and_arange" if methods else ""
    return pad_query_start_loc, (f"{piece.label}{helpers}; num_reqs = len(nst), num_reqs_padded = P, "
                                 "self.query_start_loc.np = out; result: out[:P+1]")


# ---------------------------------------------------------------- ubatch split with the DP refusal (D)


def _bind_ubatch_slices(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(UBATCH_UTILS).piece("maybe_create_ubatch_slices")
    refusal = loader.file(DP_UTILS).piece("_post_process_ubatch")
    create, vote = loader.load(piece), loader.load(refusal)

    def split_ubatches(num_scheduled_tokens: Any, num_tokens_padded: Any, num_reqs_padded: Any, num_ubatches: Any
                       ) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
        nst = bind.int_array("num_scheduled_tokens", num_scheduled_tokens, minimum=1)
        n_padded = bind.count("num_tokens_padded", num_tokens_padded, 1)
        r_padded = bind.count("num_reqs_padded", num_reqs_padded, 1)
        n = bind.count("num_ubatches", num_ubatches, 2)
        total = int(nst.sum())
        if nst.size == 0 or n_padded < total or n_padded < n or r_padded < nst.size:
            raise ValueError(f"need len(num_scheduled_tokens) >= 1, num_tokens_padded >= sum = {total} and >= num_ubatches = {n}, "
                             f"num_reqs_padded >= {nst.size}; got num_tokens_padded={n_padded}, num_reqs_padded={r_padded}")
        # One data-parallel rank's all-reduced votes: tokens, padded tokens, wants to split, graph mode.
        votes = torch.tensor([[total], [n_padded], [1], [0]], dtype=torch.int32)
        should_ubatch = vote(votes, n)
        _, padded = create(should_ubatch, nst, n_padded, r_padded, n)
        return bind.slice_pairs(padded)

    return split_ubatches, (f"{piece.label}, should_ubatch from {refusal.label} on one rank's votes; result: the padded "
                            "UBatchSlices as ((rs, re), (ts, te))")


# ---------------------------------------------------------------- the v1 microbatch veto (E)


def _input_batch(num_computed_tokens: np.ndarray, block_tables: list[Stub]) -> Stub:
    """The v1 persistent input batch as ``_allow_microbatching`` reads it: the
    computed-token counts per batch row and ``block_table.block_tables``, one
    ``bind.block_table`` per KV-cache group."""
    return Stub("InputBatch", num_computed_tokens_cpu=num_computed_tokens,
                block_table=Stub("MultiGroupBlockTable", block_tables=block_tables))


def _bind_allow_microbatching(rel: _Release) -> tuple[Callable[..., Any], str]:
    loader = rel.loader()
    piece = loader.file(V1_RUNNER).piece("GPUModelRunner._allow_microbatching")
    allow = loader.load(piece)

    def allow_microbatching(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> Any:
        c = bind.int_array("num_computed_tokens", num_computed_tokens)
        q = bind.int_array("num_scheduled_tokens", num_scheduled_tokens)
        if c.size != q.size:
            raise ValueError(f"num_computed_tokens has {c.size} entries, num_scheduled_tokens {q.size}")
        if not isinstance(block_tables, list | tuple) or not isinstance(block_sizes, list | tuple) or len(block_tables) != len(block_sizes):
            raise TypeError("block_tables and block_sizes must be lists of the same length (one per KV-cache group)")
        groups = []
        for g, (table, size) in enumerate(zip(block_tables, block_sizes, strict=True)):
            t = bind.table(f"block_tables[{g}]", table, q.size)
            groups.append(bind.block_table(bind.count(f"block_sizes[{g}]", size, 1), bind.cast_exact(f"block_tables[{g}]", t, np.int32)))
        runner = Stub("GPUModelRunner", parallel_config=Stub("parallel_config", use_ubatching=True), reorder_batch_threshold=1,
                      input_batch=_input_batch(bind.cast_exact("num_computed_tokens", c, np.int32), groups))
        return allow(runner, int(q.size), bind.cast_exact("num_scheduled_tokens", q, np.int32))

    return allow_microbatching, (f"{piece.label}; ubatching on, reorder_batch_threshold = 1, int32 persistent arrays with "
                                 "one row per request")


def allow_microbatching_on_steps(source: _engines.ReleaseSource) -> Callable[..., Callable[[], bool]]:
    """The release's own ``GPUModelRunner._allow_microbatching`` (v1, 0.28.0
    and later) for timing it (``batchfuzz bench --vllm-wheel``):
    returns ``prepare(num_reqs, c, q, tables, block_sizes,
    reorder_batch_threshold)``, which builds the stand-in runner (int32
    persistent arrays, ubatching on) once and returns a zero-argument callable
    running the engine's function unchanged on it. Raises ``bind.Absent`` or
    ``bind.Unbindable`` as the bindings do."""
    loader = _Release(source).loader()
    allow = loader.load(loader.file(V1_RUNNER).piece("GPUModelRunner._allow_microbatching"))

    def prepare(num_reqs: int, c: np.ndarray, q: np.ndarray, tables: list[np.ndarray], block_sizes: list[int],
                reorder_batch_threshold: int = 1) -> Callable[[], bool]:
        groups = [bind.block_table(int(b), np.ascontiguousarray(t, dtype=np.int32)) for t, b in zip(tables, block_sizes, strict=True)]
        runner = Stub("GPUModelRunner", parallel_config=Stub("parallel_config", use_ubatching=True),
                      reorder_batch_threshold=int(reorder_batch_threshold),
                      input_batch=_input_batch(np.ascontiguousarray(c, dtype=np.int32), groups))
        return functools.partial(allow, runner, int(num_reqs), np.ascontiguousarray(q, dtype=np.int32))

    return prepare


# ---------------------------------------------------------------- the table of bindings


@dataclass(frozen=True)
class _Spec:
    function: str
    contract: str
    build: Callable[[_Release], tuple[Callable[..., Any], str]]
    probe: tuple[Any, ...]


def _probe_buffers() -> DummyBuffers:
    return DummyBuffers.zeros(4, 6)


SPECS: tuple[_Spec, ...] = (
    _Spec(f"{INPUT_BATCH}:InputBatch.make_dummy", "split_dummy_tokens", _bind_make_dummy_split, (3, 5)),
    _Spec(f"{INPUT_BATCH}:InputBatch.make_dummy", "make_dummy", _bind_make_dummy_layout, (3, 5, "buffers")),
    _Spec(f"{MRV2_RUNNER}:GPUModelRunner._dummy_run", "split_dummy_tokens", _bind_mrv2_dummy_run, (3, 5)),
    _Spec(f"{LORA_UTILS}:create_lora_capture_hook", "split_dummy_tokens", _bind_lora_hook, (3, 5)),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._dummy_run", "split_dummy_tokens", _bind_v1_dummy_run, (3, 5)),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._dummy_run", "pad_query_start_loc", _bind_v1_query_start_loc,
          (np.array([2, 1], dtype=np.int32), 3, "out")),
    _Spec(f"{UBATCH_UTILS}:maybe_create_ubatch_slices", "split_ubatches", _bind_ubatch_slices,
          (np.array([3, 2], dtype=np.int32), 6, 3, 2)),
    _Spec(f"{V1_RUNNER}:GPUModelRunner._allow_microbatching", "allow_microbatching", _bind_allow_microbatching,
          (np.array([0, 2]), np.array([3, 2]), [np.array([[1, 2], [1, 3]])], [2])),
)


def _probe_args(spec: _Spec) -> tuple[Any, ...]:
    fresh = {"buffers": _probe_buffers, "out": lambda: np.zeros(5, dtype=np.int32)}
    return tuple(fresh[a]() if isinstance(a, str) else a for a in spec.probe)


def _ref(source: _engines.ReleaseSource, spec: _Spec) -> str:
    return f"{ENGINE}::{source.ref}::{spec.function}::{spec.contract}"


def _bind_one(rel: _Release, spec: _Spec) -> Bound:
    release = f"vllm {rel.source.version}"
    try:
        target, detail = spec.build(rel)
        bind.probe(target, *_probe_args(spec), what=f"{spec.function} as {spec.contract}")
    except bind.Absent as exc:
        return Bound(release, spec.function, spec.contract, "absent", reason=str(exc))
    except bind.Unbindable as exc:
        return Bound(release, spec.function, spec.contract, "unbindable", reason=str(exc))
    target.__name__ = spec.contract
    target.__qualname__ = f"vllm_{rel.source.version.replace('.', '_')}.{spec.function.split(':')[-1]}[{spec.contract}]"
    # The engine's code is checked on the inputs the engine's callers produce.
    target = domain("engine")(target)
    return Bound(release, spec.function, spec.contract, "bound", target=target, ref=_ref(rel.source, spec), detail=detail)


def bindings(source: _engines.ReleaseSource) -> list[Bound]:
    """Every binding of this module for one release, in SPECS order."""
    if not isinstance(source, _engines.ReleaseSource):
        raise TypeError(f"source must be a ReleaseSource, got {type(source).__name__}")
    rel = _Release(source)
    return [_bind_one(rel, spec) for spec in SPECS]


@functools.lru_cache(maxsize=16)
def _release(source_ref: str) -> _Release:
    return _Release(ReleaseSource.from_ref(source_ref))


@functools.lru_cache(maxsize=256)
def _resolved(source_ref: str, function: str, contract: str) -> Bound:
    spec = next((s for s in SPECS if s.function == function and s.contract == contract), None)
    if spec is None:
        raise LookupError(f"batchfuzz.engines.vllm has no binding of {function} to {contract}")
    return _bind_one(_release(source_ref), spec)


def resolve(ref: str) -> Callable[..., Any]:
    """The target of a ``Bound.ref``; the release's files and compiled
    bindings are cached per process. LookupError when it is not bound."""
    if not isinstance(ref, str):
        raise TypeError(f"ref must be a str, got {type(ref).__name__}")
    parts = ref.split("::")
    if len(parts) != 4 or parts[0] != ENGINE:
        raise ValueError(f"ref must be 'vllm::SOURCE::FUNCTION::CONTRACT', got {ref!r}")
    try:
        bound = _resolved(parts[1], parts[2], parts[3])
    except SourceError as exc:
        raise LookupError(f"cannot open the release of {ref!r}: {exc}") from exc
    if bound.target is None:
        raise LookupError(f"{bound.function} as {bound.contract} is {bound.status} in {bound.release}: {bound.reason}")
    return bound.target
