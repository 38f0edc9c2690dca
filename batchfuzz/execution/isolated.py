"""The isolated executor: the target runs in a worker process (forked from
the fork server), replaced after each crash or timeout, so that a segfault,
an exit or a hang costs only the worker (docs/fuzz-loop.md, "Where the
target runs")."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.execution.executor import Executor
from batchfuzz.execution.fork_server import forget_fork_server, process_context, without_main_module
from batchfuzz.execution.outcome import CRASH, TIMEOUT, Outcome
from batchfuzz.execution.processes import OUTPUT_TAIL_BYTES, _process_state, _started_by, _Tail
from batchfuzz.execution.worker import WorkerSpec, _serve
from batchfuzz.targets import TargetError, TargetRef, parse

# Seconds a worker gets to start (imports included) before it counts as hung.
START_TIMEOUT_S = 120.0


class LoadTimeout(TargetError):
    """A worker that did not start, or a target that did not load, in time:
    slowness (a loaded machine, a slow release to bind) or a hang at import,
    not a wrong target."""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "killed"
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class Isolated(Executor):
    """The target runs in a worker process, replaced after each crash or timeout.

    ``load_timeout_s`` bounds loading the target in a fresh worker (its
    module's import: a module that hangs at import is a usage error saying
    so); batchfuzz's own start of the worker is bounded by ``START_TIMEOUT_S``
    and counted in ``startup_s``, which the commands do not charge to a
    budget. ``orphans`` counts the processes the target left behind that had
    to be ended with its worker."""

    keeps_cases = True  # a case reaches the worker pickled
    overlaps = True  # the target runs in the worker while the caller goes on

    def __init__(self, contract: registry.Contract, ref: TargetRef | str, *, device: str | None = None,
                 env: dict[str, str] | None = None, load_timeout_s: float = START_TIMEOUT_S) -> None:
        self.contract = contract
        # The worker's environment: the caller's now (the fork server's may be older), plus ``env``.
        self.env = {**os.environ, **(env or {})}
        self.ref = parse(ref) if isinstance(ref, str) else ref
        self.name = self.ref.spec
        self.device = device or self.ref.device
        self.load_timeout_s = load_timeout_s
        self.crashes = 0
        self.started = 0
        self.startup_s = 0.0
        self.orphans = 0
        self._proc: Any = None
        self._pid = 0
        self._conn: Any = None
        self._tail: _Tail | None = None
        self._info: dict[str, Any] | None = None
        self._sent: tuple[float, int] | None = None  # a submitted case's (perf_counter, output mark), until collected
        self._unsent = False

    def _start(self) -> None:
        ctx = process_context()
        parent, child = ctx.Pipe()
        out_r, out_w = ctx.Pipe(duplex=False)
        t0 = time.perf_counter()
        spec = WorkerSpec(self.contract.name, self.ref.spec, self.device, list(sys.path), os.getpid(), self.env)
        self._proc = self._fork(ctx, (child, out_w, spec))
        child.close()
        out_w.close()
        self._pid = self._proc.pid
        self._tail = _Tail(out_r, OUTPUT_TAIL_BYTES)
        self._conn = parent
        self.started += 1
        try:
            self._await_load(t0)
        except (EOFError, OSError):
            code = self._reap()
            raise TargetError(f"the worker for {self.name} died while loading the target ({_describe_exit(code)}): "
                              f"{self._tail_text()}") from None

    def _fork(self, ctx: Any, args: tuple[Any, ...]) -> Any:
        """A worker process, started; from a fresh fork server where the last one is gone (a target killed it)."""
        try:
            return _started(ctx.Process(target=_serve, args=args, daemon=True))
        except (OSError, EOFError) as exc:
            if ctx.get_start_method() != "forkserver":
                raise
            forget_fork_server()
            try:
                return _started(ctx.Process(target=_serve, args=args, daemon=True))
            except (OSError, EOFError):
                raise TargetError(f"cannot start a worker for {self.name}: {exc}") from None

    def _await_load(self, t0: float) -> None:
        """Wait for the worker to be up (``START_TIMEOUT_S``), then for the
        target to load (``load_timeout_s``): ``LoadTimeout`` past either."""
        if not self._conn.poll(START_TIMEOUT_S):
            self._kill()
            raise LoadTimeout(f"the worker for {self.name} did not start within {START_TIMEOUT_S:g}s")
        self._conn.recv()  # up: what follows is the target's own loading
        self.startup_s += time.perf_counter() - t0
        if not self._conn.poll(self.load_timeout_s):
            tail = self._tail.text() if self._tail else ""
            self._kill()
            raise LoadTimeout(f"loading {self.name} did not finish within {self.load_timeout_s:g}s (its module hangs "
                              f"at import, or takes longer than that)" + (f": {tail}" if tail else ""))
        self._info = self._conn.recv()

    def describe(self) -> dict[str, Any]:
        if self._proc is None:
            self._start()
        assert self._info is not None
        return dict(self._info)

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None, *, scores: bool = False) -> Outcome:
        self.submit(prop_name, case, scores=scores)
        return self.collect(timeout_s)

    def submit(self, prop_name: str, case: Case, *, scores: bool = False) -> None:
        """Send the case to the worker (started first if there is none) and return at once."""
        if self._sent is not None:
            raise RuntimeError(f"submit: the outcome of the case sent to {self.name} before was not collected")
        if self._proc is None or not self._proc.is_alive():
            self._reap()
            self._start()
        if self._info and self._info.get("error"):
            raise TargetError(self._info["error"])
        self._sent = (time.perf_counter(), self._tail.total if self._tail else 0)
        try:
            self._conn.send(("check", prop_name, case, scores))
            self._unsent = False
        except (BrokenPipeError, OSError):
            self._unsent = True  # the worker is gone: collect reports how it ended

    def collect(self, timeout_s: float | None = None) -> Outcome:
        """The outcome of the case ``submit`` sent; ``timeout_s`` counts from the ``submit``."""
        if self._sent is None:
            raise RuntimeError(f"collect: no case was submitted to {self.name}")
        (start, mark), self._sent = self._sent, None
        stopped = False
        if self._unsent:
            ready: bool | None = True
        else:
            try:
                ready = self._wait(None if timeout_s is None else max(0.0, timeout_s - (time.perf_counter() - start)))
                stopped = ready is None
            except (BrokenPipeError, OSError):
                ready = True
        if stopped:
            self._kill()
            self.crashes += 1
            return Outcome(CRASH, "Stopped", "the target stopped its own process (SIGSTOP or another stop signal); its "
                           "worker was killed", exit="stopped by a signal", seconds=time.perf_counter() - start)
        if not ready:
            self._kill()
            self.crashes += 1
            return Outcome(TIMEOUT, "Timeout", f"the call ran past the per-example timeout of {timeout_s:g}s; its worker "
                           f"was killed", exit="killed after the timeout", seconds=time.perf_counter() - start)
        try:
            outcome: Outcome = self._conn.recv()
        except (EOFError, OSError):
            code = self._reap()
            self.crashes += 1
            how = _describe_exit(code)
            tail = self._tail_text(mark)
            return Outcome(CRASH, "WorkerDied", f"the target's process died: {how}" + (f"\n{tail}" if tail else ""),
                           exit=how, seconds=time.perf_counter() - start)
        if outcome.status == CRASH:
            self._reap()
            self.crashes += 1
        return outcome

    def _wait(self, timeout_s: float | None) -> bool | None:
        """Wait for the answer: True when it came, False past ``timeout_s``,
        None when the worker was stopped (a stopped process never answers)."""
        end = None if timeout_s is None else time.perf_counter() + timeout_s
        while True:
            step = 0.2 if end is None else max(0.0, min(0.2, end - time.perf_counter()))
            if self._conn.poll(step):
                return True
            if _process_state(self._pid) in ("T", "t"):
                return None
            if end is not None and time.perf_counter() >= end:
                return False

    def _tail_text(self, since: int = 0) -> str:
        if self._tail is None:
            return ""
        self._tail.drain()
        return self._tail.text(since)

    def _end_started(self, alive: bool = True) -> None:
        """End every process the target started (``_started_by``): while the
        worker lives, so that orphans stay under it (``alive``; after its end,
        what is left of its group); rounds until none is left, as one may
        fork while the last round is ended."""
        pid = self._pid
        if not pid:
            return
        ended: set[int] = set()
        for _ in range(50):
            left = _started_by(pid, alive)
            if not left:
                break
            ended.update(left)
            for child in left:
                with contextlib.suppress(OSError):
                    os.kill(child, signal.SIGKILL)
            time.sleep(0.01)  # a killed process lingers until it has run to its end
        self.orphans += len(ended)

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        self._end_started(alive=proc is not None and proc.is_alive())
        if proc is not None and proc.is_alive():
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.join(5)
        self._end_started(alive=False)  # those the worker's end orphaned to its group
        self._close_conn()

    def _reap(self) -> int | None:
        proc, self._proc = self._proc, None
        code = None
        self._end_started(alive=proc is not None and proc.is_alive())
        self._close_conn()  # a worker that reported a crash waits for this before it ends
        if proc is not None:
            proc.join(5)
            code = proc.exitcode
        self._end_started(alive=False)
        return code

    def _close_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._end_started()  # before the worker ends: what it leaves would re-parent out of reach
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(("stop", "", None, False))
            self._proc.join(2)
        self._kill()
        self._pid = 0
        self._sent = None  # a case in flight is dropped with its worker


def _started(proc: Any) -> Any:
    """``proc``, started without re-running the caller's ``__main__``."""
    with without_main_module():
        proc.start()
    return proc
