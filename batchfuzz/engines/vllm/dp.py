"""vLLM's data-parallel coordination (contract I): rank functions run by batchfuzz.distributed."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from batchfuzz import bind, distributed
from batchfuzz.bind import Stub
from batchfuzz.engines import SourceError
from batchfuzz.engines.vllm._release import _STAND_INS, DP_UTILS, ENGINE, MRV2_CG_UTILS, MRV2_DP_UTILS, _Built, _Release, _release
from batchfuzz.impl._dp import per_rank_args, ranks_target
from batchfuzz.preconditions import assumes
from batchfuzz.reference.coordinate_dp import RankDecision

# ---------------------------------------------------------------- data-parallel coordination (F)


class _Collective:
    """The DP group's collective as the cut-out code reaches it: ``dist.all_reduce(tensor, group=...)`` and
    ``get_dp_group()`` (``cpu_all_reduce_``, ``all_reduce``, its groups), all calling the all-reduce of the rank
    function running now (``batchfuzz.distributed``: the real process group, or the in-process sum)."""

    def __init__(self) -> None:
        self.current: Callable[[torch.Tensor], None] | None = None

    def all_reduce(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        if self.current is None:
            raise RuntimeError("the DP all-reduce was called outside a rank function")
        self.current(tensor)

    def dp_group(self) -> Stub:
        def reduce_(tensor: torch.Tensor) -> torch.Tensor:
            self.all_reduce(tensor)
            return tensor

        # No rank has failed (dead_dp_ranks: the fault-tolerance path's record of failed ranks).
        return Stub("dp_group", device=torch.device("cpu"), device_group="dp-device-group", cpu_group="dp-cpu-group",
                    cpu_all_reduce_=reduce_, all_reduce=reduce_, dead_dp_ranks=set())


class _OnceLogger(logging.LoggerAdapter):
    """vLLM's logger as the coordination code calls it (``info_once``, ``debug_once``, ``warning_once``)."""

    def info_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.debug(msg, *args)

    debug_once = info_once
    warning_once = info_once


def _dp_loader(rel: _Release, collective: _Collective, **extra: Any) -> bind.Loader:
    stand_ins = dict(_STAND_INS)
    stand_ins["logger"] = _OnceLogger(logging.getLogger("batchfuzz.engines.vllm"), {})
    # The collective, the context switch that skips it (never set here), the host-sync guard and pinned memory: the
    # engine's runtime, not its decision.
    # One TP rank: the fault-tolerance barrier over its CPU group has no one to wait for.
    stand_ins.update(dist=Stub("torch.distributed", all_reduce=collective.all_reduce, barrier=_no_barrier),
                     get_dp_group=collective.dp_group, get_tp_group=_tp_group,
                     should_skip_dp_coordination=lambda: False, gpu_sync_allowed=contextlib.nullcontext, PIN_MEMORY=False)
    stand_ins.update(extra)
    return bind.Loader(rel.source, "vllm", stand_ins=stand_ins, files=rel.files)


def _no_barrier(*args: Any, **kwargs: Any) -> None:
    return None


def _tp_group() -> Stub:
    return Stub("tp_group", cpu_group="tp-cpu-group", world_size=1)


def _parallel_config(world: int, rank: int, config: Any, fault_tolerance: bool = False) -> Stub:
    n, (decode, prefill), _sizes, _ubatch = config
    return Stub("parallel_config", data_parallel_size=world, data_parallel_rank=rank, num_ubatches=n, ubatch_size=n,
                use_ubatching=True, enable_dbo=n == 2, dbo_decode_token_threshold=decode, dbo_prefill_token_threshold=prefill,
                disable_nccl_for_dp_synchronization=True, enable_fault_tolerance=fault_tolerance, tensor_parallel_size=1)


# A rank function, what was cut out, the steps it is checked on, the configuration values it assumed.
_RankBuilt = tuple[Callable[..., Any], str, Callable[..., bool], tuple[str, ...]]


def _v1_steps(*args: Any) -> bool:
    """v1's coordinator leaves graphs to its caller: the cases without microbatched graph sizes."""
    return args[9] is None


def _dispatching_steps(*args: Any) -> bool:
    """The new model runner's coordinator dispatches graphs itself: the cases with microbatched graph sizes."""
    return args[9] is not None


def _dispatching_steps_no_microbatching(*args: Any) -> bool:
    """A new model runner that never microbatches: dispatching cases where some rank does not allow it (the contract's
    answer then splits nothing either)."""
    return args[9] is not None and not np.asarray(args[2]).all()


def _rank_v1_coordinate(rel: _Release) -> _RankBuilt:
    collective = _Collective()
    loader = _dp_loader(rel, collective)
    piece = loader.file(DP_UTILS).piece("coordinate_batch_across_dp")
    coordinate = loader.load(piece)

    def rank(rank: int, world: int, all_reduce: Callable[[torch.Tensor], None], step: Any, config: Any) -> RankDecision:
        tokens, padded, allow, mode, uniform, _reqs = step
        collective.current = all_reduce
        try:
            should, across, synced = coordinate(num_tokens_unpadded=tokens, allow_microbatching=bool(allow),
                                                parallel_config=_parallel_config(world, rank, config),
                                                num_tokens_padded=padded, uniform_decode=uniform > 0, cudagraph_mode=mode)
        finally:
            collective.current = None
        counts = tuple(int(x) for x in bind.to_numpy(across).tolist())
        return RankDecision(bool(should), counts, int(synced), counts[rank])

    return rank, (f"{piece.label} with _synchronize_dp_ranks, _run_ar and the _post_process_* helpers it calls; "
                  "parallel_config: this rank of data_parallel_size ranks, ubatching on, the case's thresholds and "
                  "num_ubatches, CPU synchronisation (gloo); dist.all_reduce and get_dp_group() on the real process group; "
                  "should_skip_dp_coordination() False; result: (should_ubatch, num_tokens_after_padding, synced mode), "
                  "the descriptor's count num_tokens_after_padding[rank]"), _v1_steps, ()


class _GraphManager:
    """``CudaGraphManager.dispatch`` stood in by capture sizes: FULL graphs of uniform decodes and PIECEWISE graphs of
    any step at every capture size (the FULL_AND_PIECEWISE configuration), FULL microbatched graphs at the
    microbatched capture sizes; the smallest size that fits, else an eager descriptor of the count asked for."""

    def __init__(self, descriptor: Any, modes: Any, sizes: tuple[int, ...], ubatch_sizes: tuple[int, ...]) -> None:

        self.descriptor = descriptor
        self.modes = modes
        self.sizes = sizes
        self.ubatch_sizes = ubatch_sizes
        self.fields = {f.name for f in dataclasses.fields(descriptor)}

    def make(self, **kwargs: Any) -> Any:
        return self.descriptor(**{k: v for k, v in kwargs.items() if k in self.fields})

    def dispatch(self, num_reqs: int, num_tokens: int, uniform_token_count: int | None, num_active_loras: int = 0,
                 max_query_len: int | None = None, num_ubatches: int = 1) -> Any:
        if num_ubatches > 1:
            fit = next((s for s in self.ubatch_sizes if s >= num_tokens), None)
            if fit is not None:
                return self.make(cg_mode=self.modes.FULL, num_tokens=fit, num_reqs=num_reqs,
                                 uniform_token_count=uniform_token_count, num_active_loras=num_active_loras,
                                 num_ubatches=num_ubatches)
        else:
            fit = next((s for s in self.sizes if s >= num_tokens), None)
            if fit is not None:
                full = uniform_token_count is not None
                return self.make(cg_mode=self.modes.FULL if full else self.modes.PIECEWISE, num_tokens=fit,
                                 num_reqs=num_reqs if full else None, uniform_token_count=uniform_token_count,
                                 num_active_loras=num_active_loras)
        return self.make(cg_mode=self.modes.NONE, num_tokens=num_tokens, num_reqs=num_reqs,
                         num_active_loras=num_active_loras, num_ubatches=num_ubatches)


def _rank_mrv2_sync(rel: _Release) -> _RankBuilt:
    collective = _Collective()
    loader = _dp_loader(rel, collective)
    f = loader.file(MRV2_DP_UTILS)
    piece = f.piece("sync_cudagraph_and_dp_padding")
    sync = loader.load(piece)
    cg = loader.file(MRV2_CG_UTILS)
    descriptor = loader.load(cg.piece("BatchExecutionDescriptor"))
    modes = sync.__globals__.get("CUDAGraphMode")
    if modes is None:
        raise bind.Unbindable(f"{piece.label} no longer reads CUDAGraphMode")
    params = set(inspect.signature(sync).parameters)
    microbatching = {"parallel_config", "allow_ubatching", "uniform_decode"} <= params
    # 0.34.0 reads parallel_config.enable_fault_tolerance: every step is run with it off and on (no rank dead, one
    # TP rank), and the two decisions must agree (raised otherwise: a `raises` counterexample naming both).
    both_ft = microbatching and "enable_fault_tolerance" in f.text

    def once(rank: int, world: int, step: Any, config: Any, fault_tolerance: bool) -> RankDecision:
        tokens, padded, allow, mode, uniform, reqs = step
        _n, _thr, sizes, ubatch_sizes = config
        manager = _GraphManager(descriptor, modes, tuple(sizes), tuple(ubatch_sizes or ()))
        desired = manager.make(cg_mode=modes(mode), num_tokens=padded, num_reqs=reqs if mode == 2 else None,
                               uniform_token_count=uniform or None)
        kwargs: dict[str, Any] = {"max_query_len": None, "num_active_loras": 0}
        if microbatching:
            kwargs.update(parallel_config=_parallel_config(world, rank, config, fault_tolerance),
                          allow_ubatching=bool(allow), uniform_decode=uniform > 0)
        desc, state = sync(manager, desired, tokens, reqs, uniform or None, world, rank,
                           **{k: v for k, v in kwargs.items() if k in params})
        across = getattr(state, "num_tokens_across_dp", state)
        counts = tuple(int(x) for x in bind.to_numpy(across).tolist())
        return RankDecision(getattr(desc, "num_ubatches", 1) > 1, counts, int(desc.cg_mode.value), int(desc.num_tokens))

    def rank(rank: int, world: int, all_reduce: Callable[[torch.Tensor], None], step: Any, config: Any) -> RankDecision:
        collective.current = all_reduce
        try:
            off = once(rank, world, step, config, False)
            on = once(rank, world, step, config, True) if both_ft else off
        finally:
            collective.current = None
        if on != off:
            raise AssertionError(f"rank {rank}: parallel_config.enable_fault_tolerance=True (no rank dead) decided {on}, "
                                 f"False decided {off}")
        return off

    assumption = ("" if microbatching else "; this release's new model runner never microbatches: checked on steps where "
                  "some rank does not allow it")
    if both_ft:
        assumption += ("; every step run with parallel_config.enable_fault_tolerance False and True (no dead DP rank, "
                       "tensor_parallel_size 1: its TP barrier a no-op), the two decisions compared")
    return rank, (f"{piece.label}; the CUDA-graph manager stood in by one dispatching from the case's capture sizes "
                  f"(FULL for uniform decodes, PIECEWISE otherwise; FULL microbatched graphs at ubatch_capture_sizes); "
                  f"desired_batch_desc from this rank's padded count and mode; get_dp_group().cpu_all_reduce_ / "
                  f"dist.all_reduce on the real process group; max_query_len None; result: the descriptor (split = "
                  f"num_ubatches > 1, its cg_mode and num_tokens) and num_tokens_across_dp{assumption}"), \
        (_dispatching_steps if microbatching else _dispatching_steps_no_microbatching), \
        (("parallel_config.enable_fault_tolerance=False and =True",) if both_ft else ())


_RANK_BUILDERS: dict[str, Callable[[_Release], _RankBuilt]] = {
    f"{DP_UTILS}:coordinate_batch_across_dp": _rank_v1_coordinate,
    f"{MRV2_DP_UTILS}:sync_cudagraph_and_dp_padding": _rank_mrv2_sync,
}


def _bind_dp(function: str) -> Callable[[_Release], _Built]:
    def build(rel: _Release) -> _Built:
        rank, detail, steps, assumed = _RANK_BUILDERS[function](rel)  # cut out here: an absent or unbindable release says so now
        _probe_ranks(rank, function)
        target = assumes(steps)(ranks_target(f"{ENGINE}::{rel.source.ref}::{function}::coordinate_dp", "processes"))
        return target, detail + "; every rank a process of a gloo group (batchfuzz.distributed)", assumed

    return build


def _probe_ranks(rank: Callable[..., Any], function: str) -> None:
    """Dry-run the rank function in this process on two ranks (a split FULL step and a vetoed eager one): a name
    or attribute the stand-ins lack is Unbindable now (the rank's own exception, not the RankFailure around it)."""
    for args in (([4, 4], [4, 4], [1, 1], [2, 2], [1, 1], [4, 4], 2, (2, 2), [2, 4, 8], [4, 8]),
                 ([3, 4], [3, 4], [1, 0], [0, 0], [0, 0], [3, 4], 2, (2, 2), [2, 4, 8], None)):
        try:
            distributed.run_in_process(rank, per_rank_args(*args))
        except distributed.RankFailure as exc:
            cause = exc.__cause__
            if cause is None or bind.raised_in_engine(cause):
                continue  # the engine's own behaviour: the properties judge it
            if isinstance(cause, (AttributeError, NameError, TypeError, ImportError, KeyError, LookupError, bind.StandInReached)):
                raise bind.Unbindable(f"dry run of {function} as coordinate_dp failed: {type(cause).__name__}: {cause}") from exc


@functools.lru_cache(maxsize=64)
def _rank_function(source_ref: str, function: str) -> Callable[..., Any]:
    return _RANK_BUILDERS[function](_release(source_ref))[0]


def rank_function(ref: str) -> Callable[..., Any]:
    """The rank function (``batchfuzz.distributed``) of a coordination binding's ``Bound.ref``: one rank's call of
    the engine's own function, cut out of the release in the process that runs the rank."""
    parts = ref.split("::") if isinstance(ref, str) else []
    if len(parts) != 4 or parts[0] != ENGINE or parts[2] not in _RANK_BUILDERS:
        raise ValueError(f"ref must name a coordination binding 'vllm::SOURCE::FUNCTION::coordinate_dp', got {ref!r}")
    try:
        return _rank_function(parts[1], parts[2])
    except SourceError as exc:
        raise LookupError(f"cannot open the release of {ref!r}: {exc}") from exc
