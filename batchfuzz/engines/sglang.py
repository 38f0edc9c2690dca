"""SGLang's own functions bound to batchfuzz's contracts (an engine module
in the shape ``batchfuzz.plugins.EngineModule`` declares).

Read from a release's files (a wheel, a source checkout, the installed
distribution) without importing SGLang or its dependencies:

- the two-batch-overlap split (contract J, ``tbo_split``):
  ``compute_split_seq_index`` then ``compute_split_token_index``, and
  whether the child preparer takes the two-chunk mode (the statement of
  ``TboForwardBatchPreparer.prepare_raw`` that writes ``is_enable_two_chunk``), as
  ``TboForwardBatchPreparer`` and ``TboDPAttentionPreparer`` call them, with
  the helpers they read (``_split_extend_seqs``,
  ``_is_two_chunk_split_enabled``, ``_split_array_by_balanced_sum``,
  ``_split_array_by_cum_less_than_half``, or the older
  ``_split_array_by_half_sum``) and the release's own ``ForwardMode`` cut out
  of the same tree. The module lives in ``sglang/srt/two_batch_overlap.py``
  up to 0.5.3 and in ``sglang/srt/batch_overlap/two_batch_overlap.py`` from
  0.5.8: one spec per path, so a release has one of the two bound and the
  other absent.

Stand-ins: ``get_tbo_token_distribution_threshold`` (a server argument read
from global state) returns the case's ``threshold``. The number of tokens
per sequence is what ``get_token_num_per_seq`` gives (1 for decode, the
draft token count for target-verify, 0 for idle, None for extend), and
``extend_lens`` is the step's per-request lengths for extend and None
otherwise, as the callers pass them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchfuzz import bind
from batchfuzz import engines as _engines
from batchfuzz.engines import Bound
from batchfuzz.preconditions import domain
from batchfuzz.reference.tbo_split import check_args

ENGINE = "sglang"
# The releases of the published matrix (docs/sglang-matrix.json; batchfuzz engine sglang --all-releases):
# two before the move of two_batch_overlap.py into batch_overlap/ (0.5.8), three after.
RELEASES = ("0.4.9", "0.5.3", "0.5.8", "0.5.14", "0.5.23")

TBO_OLD = "sglang/srt/two_batch_overlap.py"
TBO_NEW = "sglang/srt/batch_overlap/two_batch_overlap.py"
FORWARD_BATCH_INFO = "sglang/srt/model_executor/forward_batch_info.py"


class ReleaseSource(_engines.ReleaseSource):
    """An SGLang release's files: ``from_wheel``, ``from_dir``, ``installed``, ``from_ref``."""

    distribution = "sglang"
    package = "sglang"


class _Release:
    """One release: its source and the files parsed so far (shared by every binding)."""

    def __init__(self, source: _engines.ReleaseSource) -> None:
        self.source = source
        self.files: dict[str, bind.SourceFile] = {}

    def loader(self, **stand_ins: Any) -> bind.Loader:
        return bind.Loader(self.source, "sglang", stand_ins=stand_ins, files=self.files)


def _bind_tbo_split(rel: _Release, path: str) -> tuple[Callable[..., Any], str]:
    threshold = [0.48]  # what the stand-in for the server argument returns; set per call
    loader = rel.loader(get_tbo_token_distribution_threshold=lambda: threshold[0])
    tbo = loader.file(path)
    seq_index = loader.load(tbo.piece("compute_split_seq_index"))
    token_index = loader.load(tbo.piece("compute_split_token_index"))
    forward_mode_cls: Any = loader.load(loader.file(FORWARD_BATCH_INFO).piece("ForwardMode"))
    try:  # a release before the two-chunk mode (0.4.9) has no _is_two_chunk_split_enabled
        tbo.piece("_is_two_chunk_split_enabled")
    except bind.Absent:
        two_chunk_of = None
    else:  # the child preparer's own decision
        two_chunk_of = loader.load(tbo.fragment("TboForwardBatchPreparer.prepare_raw", bind.Writes("is_enable_two_chunk"),
                                                given=("batch",)))
    modes = {"extend": forward_mode_cls.EXTEND, "decode": forward_mode_cls.DECODE,
             "target_verify": forward_mode_cls.TARGET_VERIFY, "idle": forward_mode_cls.IDLE}

    def tbo_split(forward_mode: Any, seq_lens: Any, thr: Any) -> tuple[Any, Any, bool]:
        mode, lens, threshold[0] = check_args(forward_mode, seq_lens, thr)
        per_seq = {"extend": None, "decode": 1, "target_verify": lens[0] if lens else 1, "idle": 0}[mode]
        extend_lens = list(lens) if mode == "extend" else None
        fm = modes[mode]
        s = seq_index(forward_mode=fm, num_tokens=sum(lens), extend_lens=extend_lens, token_num_per_seq=per_seq)
        t = token_index(split_seq_index=s, forward_mode=fm, extend_seq_lens=extend_lens, token_num_per_seq=per_seq)
        if two_chunk_of is None:
            return s, t, False
        batch = bind.Stub("ForwardBatch", forward_mode=fm, extend_seq_lens_cpu=extend_lens)
        return s, t, bool(two_chunk_of(batch)["is_enable_two_chunk"])

    detail = (f"{path}: compute_split_seq_index then compute_split_token_index over the release's ForwardMode "
              f"({FORWARD_BATCH_INFO}); two_chunk from the statement of TboForwardBatchPreparer.prepare_raw that writes "
              "is_enable_two_chunk" + (" (absent: this release has no two-chunk mode, False)" if two_chunk_of is None else "")
              + "; get_tbo_token_distribution_threshold stood in by the case's threshold; token_num_per_seq as "
              "get_token_num_per_seq gives it")
    return tbo_split, detail


@dataclass(frozen=True)
class _Spec:
    function: str
    contract: str
    build: Callable[[_Release], tuple[Callable[..., Any], str]]
    probe: tuple[Any, ...]


_TBO_PROBE = ("extend", np.array([3, 1], dtype=np.int32), 0.48)

SPECS = (
    _Spec(f"{TBO_OLD}:compute_split_token_index", "tbo_split", functools.partial(_bind_tbo_split, path=TBO_OLD), _TBO_PROBE),
    _Spec(f"{TBO_NEW}:compute_split_token_index", "tbo_split", functools.partial(_bind_tbo_split, path=TBO_NEW), _TBO_PROBE),
)


def _ref(source: _engines.ReleaseSource, spec: _Spec) -> str:
    return f"{ENGINE}::{source.ref}::{spec.function}::{spec.contract}"


def _bind_one(rel: _Release, spec: _Spec) -> Bound:
    release = f"sglang {rel.source.version}"
    try:
        target, detail = spec.build(rel)
        bind.probe(target, *spec.probe, what=f"{spec.function} as {spec.contract}")
    except bind.Absent as exc:
        return Bound(release, spec.function, spec.contract, "absent", reason=str(exc))
    except bind.Unbindable as exc:
        return Bound(release, spec.function, spec.contract, "unbindable", reason=str(exc))
    target.__name__ = spec.contract
    target.__qualname__ = f"sglang_{rel.source.version.replace('.', '_')}.{spec.function.split(':')[-1]}[{spec.contract}]"
    target = domain("engine")(target)  # checked on the inputs SGLang's callers produce
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


@functools.lru_cache(maxsize=64)
def _resolved(source_ref: str, function: str, contract: str) -> Bound:
    spec = next((s for s in SPECS if s.function == function and s.contract == contract), None)
    if spec is None:
        raise LookupError(f"batchfuzz.engines.sglang has no binding of {function} to {contract}")
    return _bind_one(_release(source_ref), spec)


def resolve(ref: str) -> Callable[..., Any]:
    """The target of a ``Bound.ref``; LookupError when it is not bound."""
    return _engines.resolve_bound(ref, ENGINE, _resolved)
