"""Code that runs on every data-parallel rank, run as ranks: real processes
joined by ``torch.distributed``, or in this process.

A *rank function* is ``fn(rank, world_size, all_reduce, *args)``: the code
one rank runs, given its own arguments, calling ``all_reduce(tensor)`` (an
in-place sum over the ranks of a small integer tensor) where the engine runs
its collective. :func:`run_ranks` runs one call per rank and returns every
rank's answer in rank order, in one of two modes:

- ``processes`` (:class:`RankPool`): ``world_size`` real processes joined by
  a gloo process group on the CPU (NCCL over one GPU per rank where CUDA is
  present and asked for), the all-reduce real. The processes are forked once
  and reused across calls (a call costs a few pipe messages, not a process
  start): one pool of ``max_ranks`` processes holds a group over the first
  ``k`` ranks for every ``2 <= k <= max_ranks``. The rendezvous is a
  ``FileStore`` in a private temporary directory (no port); the group's own
  connections are TCP sockets on 127.0.0.1 only (gloo's, or NCCL's
  bootstrap: the rank processes pin both to the loopback interface, whatever
  ``GLOO_SOCKET_IFNAME`` or ``NCCL_SOCKET_IFNAME`` the caller set).
- ``in_process`` (:func:`run_in_process`): every rank in this process, the
  all-reduce replaced by a sum over the ranks' tensors. Ranks run one after
  the other up to their next collective (the stand-in records the tensor and
  stops the rank), the tensors are summed, and the ranks are replayed with
  the sums of the collectives so far: the same answers as the real
  collective, with no process and no wait.

A rank that crashes (its process dies), raises, or does not answer is a
:class:`RankFailure` naming the rank and what happened, never a hung run:
the pool waits on every rank's pipe and process at once, up to a deadline;
after a failure every process of the pool is killed and waited for, and the
next call forks a fresh pool. Processes of a pool die with the process that
started them (``PR_SET_PDEATHSIG``, and end of input on their pipe).
Rank functions are named by reference (:func:`rank_function`), so a fresh
process can rebuild them: ``"MODULE:QUALNAME"`` or a binding's ref of an
engine module (``"vllm::..."``, its ``rank_function``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import datetime
import functools
import importlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from batchfuzz import engine_registry

if TYPE_CHECKING:  # imported where ranks run: registering contract I's variants does not load torch
    import torch

RankFn = Callable[..., Any]
MODES = ("processes", "in_process")
MAX_RANKS = 8
# Rank phases, in the pool's shared array: what each rank is doing now.
IDLE, RUNNING, IN_COLLECTIVE, DONE = 0, 1, 2, 3
_COLLECTIVE_GRACE_S = 60.0
# After a rank raised, how long the others' processes are watched for a crash that caused it (a peer that died
# mid-collective makes the survivors raise): the crash is the verdict then.
_CRASH_GRACE_S = 1.0
_PHASE_WORDS = {IDLE: "idle", RUNNING: "running its own code", IN_COLLECTIVE: "inside the all-reduce", DONE: "done"}


class RankFailure(AssertionError):
    """A rank crashed, raised, or did not answer: ``rank`` names it (the first
    such rank), ``kind`` is ``"crash"``, ``"error"`` or ``"timeout"``, and the
    message says what happened to every rank."""

    def __init__(self, rank: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.rank = rank
        self.kind = kind


def rank_function(ref: str) -> RankFn:
    """The rank function ``ref`` names: ``"MODULE:QUALNAME"``, or an engine
    binding's ref (``"ENGINE::..."``, resolved by the ``rank_function`` of the
    engine the registry, ``batchfuzz.engine_registry``, has under that name)."""
    if not isinstance(ref, str) or not ref:
        raise TypeError(f"ref must be a non-empty str, got {ref!r}")
    if "::" in ref:
        engine = ref.split("::", 1)[0]
        if not engine.isidentifier():
            raise ValueError(f"ref names no engine module: {ref!r}")
        module = engine_registry.engine(engine)
        if not callable(getattr(module, "rank_function", None)):
            raise LookupError(f"engine {engine!r} ({module.__name__}) has no rank_function: {ref!r} names no rank function")
        found: RankFn = module.rank_function(ref)
        return found
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"ref must be 'MODULE:QUALNAME' or an engine binding's ref, got {ref!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref!r} is not callable")
    return obj


def _check_world(per_rank_args: Sequence[Sequence[Any]], max_ranks: int) -> int:
    world = len(per_rank_args)
    if not 2 <= world <= max_ranks:
        raise ValueError(f"per_rank_args must have one entry per rank, 2 <= ranks <= {max_ranks}, got {world}")
    return world


# ---------------------------------------------------------------- in this process


class _Pause(BaseException):
    """Stops a rank at a collective it has no sum for yet (a BaseException, so
    engine code's ``except Exception`` does not swallow it)."""


class _Replay:
    """One rank's all-reduce in this process: the sums of the collectives so
    far, in order, then (at the first collective without one) the rank's
    tensor recorded and the rank stopped."""

    def __init__(self, rank: int, sums: list[torch.Tensor]) -> None:
        self.rank = rank
        self.sums = sums
        self.calls = 0
        self.contribution: torch.Tensor | None = None

    def __call__(self, tensor: torch.Tensor, *_: Any, **__: Any) -> None:
        if self.calls < len(self.sums):
            done = self.sums[self.calls]
            if tuple(done.shape) != tuple(tensor.shape) or done.dtype != tensor.dtype:
                raise RankFailure(self.rank, "timeout", f"rank {self.rank}'s all-reduce #{self.calls} has shape "
                                                        f"{tuple(tensor.shape)} {tensor.dtype}, the other ranks' "
                                                        f"{tuple(done.shape)} {done.dtype}: the collective would never complete")
            tensor.copy_(done.to(tensor.device))
            self.calls += 1
            return
        self.contribution = tensor.detach().cpu().clone()
        raise _Pause()


def run_in_process(fn: RankFn, per_rank_args: Sequence[Sequence[Any]], *, max_collectives: int = 64) -> list[Any]:
    """Every rank's answer, ranks run in this process; the all-reduce is the
    sum over the ranks' tensors (see the module docstring). A rank that
    raises is a :class:`RankFailure` of kind ``"error"``; ranks that disagree
    on how many collectives they run, or on a tensor's shape or dtype, are one
    of kind ``"timeout"`` (on real processes they would wait for ever)."""
    import torch

    world = _check_world(per_rank_args, MAX_RANKS)
    sums: list[torch.Tensor] = []
    for _round in range(max_collectives + 1):
        pending: list[torch.Tensor | None] = []
        answers: list[Any] = []
        for rank in range(world):
            all_reduce = _Replay(rank, sums)
            try:
                answers.append(fn(rank, world, all_reduce, *per_rank_args[rank]))
                pending.append(None)
            except _Pause:
                answers.append(None)
                pending.append(all_reduce.contribution)
            except RankFailure:
                raise
            except Exception as exc:
                raise RankFailure(rank, "error", f"rank {rank} raised {type(exc).__name__}: {exc}") from exc
        waiting = [r for r, t in enumerate(pending) if t is not None]
        if not waiting:
            return answers
        if len(waiting) != world:
            finished = [r for r in range(world) if r not in waiting]
            raise RankFailure(waiting[0], "timeout", f"ranks {waiting} wait in all-reduce #{len(sums)} that ranks {finished} "
                                                     "never join (they returned): the collective would never complete")
        tensors = [t for t in pending if t is not None]
        first = tensors[0]
        for r, t in enumerate(tensors):
            if tuple(t.shape) != tuple(first.shape) or t.dtype != first.dtype:
                raise RankFailure(r, "timeout", f"rank {r}'s all-reduce #{len(sums)} has shape {tuple(t.shape)} {t.dtype}, "
                                                f"rank 0's {tuple(first.shape)} {first.dtype}: the collective would never complete")
        total = torch.zeros_like(first)
        for t in tensors:
            total += t
        sums.append(total)
    raise RankFailure(0, "timeout", f"the ranks ran more than {max_collectives} collectives")


# ---------------------------------------------------------------- real processes


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the pipe's end of input still ends the rank
        pass


def _loopback_interface() -> str:
    """The name of the loopback network interface (``lo`` on Linux)."""
    import socket

    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in ("lo", "lo0") if n in names), "lo")


# Process groups a rank process inherited by fork, kept referenced: destroying one would shut down or join the
# parent's threads, which a forked child does not have.
_INHERITED: list[Any] = []


def _forget_inherited_groups() -> None:
    """Make a forked rank process's torch.distributed uninitialized again. The
    pool forks from whatever process runs it; one that had joined a process
    group (a job process that ran vLLM's engine, world size 1) would otherwise
    make every rank's ``init_process_group`` refuse a second default group."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_initialized():
        return
    world = c10d._world
    _INHERITED.extend(world.pg_map)
    c10d._update_default_pg(None)
    for table in (world.pg_map, world.pg_names, world.pg_group_ranks, world.pg_backend_config, world.pg_to_tag,
                  world.tags_to_pg, world.pg_coalesce_state):
        table.clear()
    c10d._unregister_all_process_groups()
    world.group_count = 0


def _rank_main(rank: int, max_ranks: int, store_path: str, backend: str, timeout_s: float,
               conn: mpc.Connection, phases: Any, parent: int) -> None:
    _die_with_parent()
    if os.getppid() != parent:
        os._exit(0)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # gloo (and NCCL's bootstrap) listen on the interface these name, else wherever the host name resolves:
    # loopback, whatever the caller's environment says (a cluster's GLOO_SOCKET_IFNAME=eth0).
    os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = _loopback_interface()
    _forget_inherited_groups()
    store = dist.FileStore(store_path, max_ranks)
    # The collective's own timeout is past the pool's deadline (the pool judges first and then stops every rank);
    # it only ends ranks whose pool is gone.
    limit = datetime.timedelta(seconds=timeout_s + _COLLECTIVE_GRACE_S)
    dist.init_process_group(backend, store=store, rank=rank, world_size=max_ranks, timeout=limit)
    groups = {k: dist.new_group(ranks=list(range(k)), timeout=limit) for k in range(2, max_ranks + 1)}
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    conn.send(("ready", rank))
    functions: dict[str, RankFn] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if message is None:
            break
        call_id, ref, world, args = message
        all_reduce = functools.partial(_group_all_reduce, rank=rank, group=groups[world], device=device, phases=phases)

        phases[rank] = RUNNING
        try:
            if ref not in functions:
                functions[ref] = rank_function(ref)
            reply = (call_id, "ok", functions[ref](rank, world, all_reduce, *args))
        except Exception as exc:
            reply = (call_id, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-3)}")
        phases[rank] = DONE
        try:
            conn.send(reply)
        except Exception as exc:  # an answer that cannot be pickled
            conn.send((call_id, "error", f"the answer could not be sent back: {type(exc).__name__}: {exc}"))
    dist.destroy_process_group()
    conn.close()
    os._exit(0)


def _group_all_reduce(tensor: torch.Tensor, *_: Any, rank: int, group: Any, device: torch.device, phases: Any,
                      **__: Any) -> None:
    """A rank's all-reduce over the real process group (its phase marked while inside)."""
    import torch.distributed as dist

    phases[rank] = IN_COLLECTIVE
    if tensor.device == device:
        dist.all_reduce(tensor, group=group)
    else:
        moved = tensor.to(device)
        dist.all_reduce(moved, group=group)
        tensor.copy_(moved.to(tensor.device))
    phases[rank] = RUNNING


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


class _Child:
    """A forked rank process: its pid, a pid file descriptor that becomes
    readable when it ends (``sentinel``), its exit status once reaped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.sentinel = os.pidfd_open(pid)
        self.exitcode: int | None = None

    def _reap(self, block: bool) -> None:
        if self.exitcode is not None:
            return
        try:
            got, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            self.exitcode = -signal.SIGKILL
            return
        if got == self.pid:
            self.exitcode = os.waitstatus_to_exitcode(status)

    def is_alive(self) -> bool:
        self._reap(block=False)
        return self.exitcode is None

    def kill(self) -> None:
        if self.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def join(self) -> None:
        self._reap(block=True)
        if self.sentinel >= 0:
            os.close(self.sentinel)
            self.sentinel = -1


class RankPool:
    """``max_ranks`` rank processes joined by one process group, reused
    across calls (see the module docstring). ``timeout_s`` bounds one call
    (and is the process group's collective timeout). Not thread-safe; one
    call at a time."""

    def __init__(self, max_ranks: int = MAX_RANKS, *, backend: str = "gloo", timeout_s: float = 20.0,
                 start_timeout_s: float = 120.0) -> None:
        if isinstance(max_ranks, bool) or not isinstance(max_ranks, int) or not 2 <= max_ranks <= MAX_RANKS:
            raise ValueError(f"max_ranks must be an int in [2, {MAX_RANKS}], got {max_ranks!r}")
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
        import torch

        if backend == "nccl" and not torch.cuda.is_available():
            raise ValueError("backend 'nccl' needs CUDA, and torch sees no CUDA device")
        if not timeout_s > 0 or not start_timeout_s > 0:
            raise ValueError(f"timeout_s and start_timeout_s must be > 0, got {timeout_s!r}, {start_timeout_s!r}")
        self.max_ranks = max_ranks
        self.backend = backend
        self.timeout_s = float(timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self._procs: list[_Child] = []
        self._conns: list[mpc.Connection] = []
        self._phases: Any = None
        self._dir: str | None = None
        self._calls = 0
        self.owner = os.getpid()  # the process that started it: only it may close it
        self.starts = 0  # how many times the processes were started (a failure restarts them)

    # -- lifetime

    def phase(self, rank: int) -> str:
        """What rank ``rank`` is doing now: idle, running its own code, inside the all-reduce, done."""
        return _PHASE_WORDS.get(self._phases[rank], "?") if self._phases is not None else "not started"

    def pids(self) -> list[int]:
        """The process ids of the live pool (empty when it is not started)."""
        return [p.pid for p in self._procs]

    def _start(self) -> None:
        # Plain fork (not multiprocessing.Process): the pool is often started inside a daemonic worker process of
        # batchfuzz.execution, which multiprocessing does not let have children.
        ctx = mp.get_context("fork")
        self._dir = tempfile.mkdtemp(prefix="batchfuzz-ranks-")
        store = os.path.join(self._dir, "store")
        self._phases = ctx.Array("i", self.max_ranks, lock=False)
        parent = os.getpid()
        for rank in range(self.max_ranks):
            mine, theirs = mp.Pipe()
            pid = os.fork()
            if pid == 0:  # the rank process
                try:
                    mine.close()
                    for other in self._conns:
                        other.close()
                    _rank_main(rank, self.max_ranks, store, self.backend, self.timeout_s, theirs, self._phases, parent)
                finally:
                    os._exit(1)
            theirs.close()
            self._procs.append(_Child(pid))
            self._conns.append(mine)
        self.starts += 1
        deadline = time.monotonic() + self.start_timeout_s
        for rank, conn in enumerate(self._conns):
            while not conn.poll(max(0.0, min(0.2, deadline - time.monotonic()))):
                if not self._procs[rank].is_alive() or time.monotonic() > deadline:
                    what = _describe_exit(self._procs[rank].exitcode) if not self._procs[rank].is_alive() else "did not start in time"
                    self.close()
                    raise RuntimeError(f"rank process {rank} of the pool {what} while joining the process group")
            conn.recv()

    def close(self) -> None:
        """Stop every process of the pool and wait for it (a started pool is
        closed by its owner, or by this process's end)."""
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()
        for proc in self._procs:
            proc.kill()
        for proc in self._procs:
            proc.join()
        self._procs, self._conns = [], []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one call

    def run(self, ref: str, per_rank_args: Sequence[Sequence[Any]]) -> list[Any]:
        """Every rank's answer to the rank function ``ref`` (see
        :func:`rank_function`), rank ``r`` called with ``per_rank_args[r]``."""
        world = _check_world(per_rank_args, self.max_ranks)
        if not self._procs:
            self._start()
        self._calls += 1
        call_id = self._calls
        for rank in range(world):
            self._phases[rank] = IDLE
        for rank in range(world):
            self._conns[rank].send((call_id, ref, world, tuple(per_rank_args[rank])))
        answers: dict[int, Any] = {}
        errors: dict[int, str] = {}
        deadline = time.monotonic() + self.timeout_s
        waiting = set(range(world))
        while waiting:
            ready = mpc.wait([self._conns[r] for r in waiting] + [self._procs[r].sentinel for r in waiting],
                             timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            for rank in sorted(waiting):
                conn = self._conns[rank]
                if conn in ready or conn.poll():
                    try:
                        got_id, status, value = conn.recv()
                    except (EOFError, OSError):
                        continue  # its process ended: the sentinel says how
                    if got_id != call_id:
                        continue
                    waiting.discard(rank)
                    if status == "ok":
                        answers[rank] = value
                    else:
                        errors[rank] = value
            dead = [r for r in sorted(waiting) if not self._procs[r].is_alive()]
            if dead:
                self._fail(world, "crash", dead[0], {r: _describe_exit(self._procs[r].exitcode) for r in dead}, answers, errors)
            if errors:
                # A peer that died mid-collective makes the survivors raise: blame the death when there is one.
                others = [r for r in sorted(waiting) if self._procs[r].is_alive()]
                if others:
                    mpc.wait([self._procs[r].sentinel for r in others], timeout=_CRASH_GRACE_S)
                dead = [r for r in sorted(waiting) if not self._procs[r].is_alive()]
                if dead:
                    self._fail(world, "crash", dead[0], {r: _describe_exit(self._procs[r].exitcode) for r in dead},
                               answers, errors)
                # The others may wait in a collective the failed rank never joins.
                first = min(errors)
                self._fail(world, "error", first, {r: "raised " + errors[r].strip().splitlines()[0] for r in errors}, answers, errors)
        if waiting:
            phases = {r: _PHASE_WORDS.get(self._phases[r], "?") for r in sorted(waiting)}
            outside = [r for r in sorted(waiting) if self._phases[r] != IN_COLLECTIVE]
            first = outside[0] if outside else min(waiting)
            self._fail(world, "timeout", first, {r: f"no answer within {self.timeout_s:g} s ({phases[r]})" for r in sorted(waiting)},
                       answers, errors)
        return [answers[r] for r in range(world)]

    def _fail(self, world: int, kind: str, rank: int, what: dict[int, str], answers: dict[int, Any], errors: dict[int, str]) -> None:
        lines = [f"rank {rank} {'crashed' if kind == 'crash' else 'raised' if kind == 'error' else 'hung'}"
                 f" ({world} ranks):"]
        for r in range(world):
            if r in what:
                lines.append(f"  rank {r}: {what[r]}")
            elif r in answers:
                lines.append(f"  rank {r}: answered {answers[r]!r:.200}")
            else:
                lines.append(f"  rank {r}: {_PHASE_WORDS.get(self._phases[r], '?')} (stopped with the pool)")
        self.close()
        raise RankFailure(rank, kind, "\n".join(lines))


# ---------------------------------------------------------------- one entry point

_POOL: RankPool | None = None
_POOL_LOCK = threading.Lock()


def shared_pool(max_ranks: int = MAX_RANKS, *, timeout_s: float = 20.0) -> RankPool:
    """This process's pool of rank processes (started on first use, grown to
    ``max_ranks`` when a call needs more ranks; closed at exit), on the
    backend ``$BATCHFUZZ_DP_BACKEND`` names (``gloo``, the default, or
    ``nccl``: one GPU per rank)."""
    global _POOL
    backend = os.environ.get("BATCHFUZZ_DP_BACKEND", "") or "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"BATCHFUZZ_DP_BACKEND must be 'gloo' or 'nccl', got {backend!r}")
    with _POOL_LOCK:
        if _POOL is not None and (_POOL.max_ranks < max_ranks or _POOL.timeout_s != timeout_s or _POOL.backend != backend
                                  or _POOL.owner != os.getpid()):
            if _POOL.owner == os.getpid():
                _POOL.close()
            _POOL = None
        if _POOL is None:
            _POOL = RankPool(max_ranks, backend=backend, timeout_s=timeout_s)
        return _POOL


def _close_shared() -> None:
    if _POOL is not None and _POOL.owner == os.getpid():
        _POOL.close()


atexit.register(_close_shared)


def run_ranks(ref: str, per_rank_args: Sequence[Sequence[Any]], *, mode: str = "processes", timeout_s: float = 20.0) -> list[Any]:
    """Every rank's answer to the rank function ``ref``, in ``mode``
    (``"processes"``: the shared :class:`RankPool`; ``"in_process"``:
    :func:`run_in_process`). Raises :class:`RankFailure` for a rank that
    crashed, raised or did not answer."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "in_process":
        return run_in_process(rank_function(ref), per_rank_args)
    world = _check_world(per_rank_args, MAX_RANKS)
    return shared_pool(max(world, _pool_size()), timeout_s=timeout_s).run(ref, per_rank_args)


def _pool_size() -> int:
    """The pool's size: ``$BATCHFUZZ_DP_RANKS`` (2..8, default 8), so that a
    run over steps of different rank counts starts its processes once."""
    raw = os.environ.get("BATCHFUZZ_DP_RANKS", "")
    if not raw:
        return MAX_RANKS
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"BATCHFUZZ_DP_RANKS must be an int in [2, {MAX_RANKS}], got {raw!r}") from None
    if not 2 <= value <= MAX_RANKS:
        raise ValueError(f"BATCHFUZZ_DP_RANKS must be an int in [2, {MAX_RANKS}], got {raw!r}")
    return value
