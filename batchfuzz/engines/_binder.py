"""A release's bindings made in a worker process (``matrix``'s isolated binding).

Binding runs the engine's code: loading a cut-out executes its ``def``
(default arguments, decorators) and ``bind.probe`` calls it once. So the
matrix makes a release's bindings in a process of its own, one binding at a
time: the worker says which binding it starts and when the engine's code is
about to be probed (``bind.probes_reported``), and the parent waits on it
with a bound (``LOAD_TIMEOUT_S`` to cut out and load, the per-call timeout
for the probe). A worker that dies or hangs costs only that binding: it
becomes an ``error`` row (while loading) or a bound row whose probe ended its
process (``Bound.probe_raised``), which the cell then checks in its own
isolated worker; a fresh worker goes on with the next binding.

An engine module gives ``binding_plan(source, search=...)`` (a list of
``(function, contract, bind)``, ``vllm.Planned``); one that only has
``bindings`` is bound in one step.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from batchfuzz.engines import Bound, ReleaseSource, SourceError

# Cutting out and loading one binding (parsing a release's largest files included), on a loaded machine.
LOAD_TIMEOUT_S = 120.0
_PLAN_TIMEOUT_S = 300.0  # the worker's start and the split search over the release's source text


def _plan(engine: Any, source: ReleaseSource, search: bool) -> list[tuple[str, str, Callable[[], list[Bound]]]]:
    """``(function, contract, make)`` per binding; ``make()`` gives its Bound rows."""
    if hasattr(engine, "binding_plan"):
        return [(p.function, p.contract, functools.partial(_one, p.bind)) for p in engine.binding_plan(source, search=search)]
    import inspect

    extra = {"search": search} if "search" in inspect.signature(engine.bindings).parameters else {}
    return [("*", "*", functools.partial(engine.bindings, source, **extra))]


def _one(make: Callable[[], Bound]) -> list[Bound]:
    return [make()]


def _shipped(b: Bound) -> Bound:
    """``b`` as the parent gets it: no target (it is rebuilt from ``ref`` where it runs)."""
    if b.status == "bound" and not b.ref:
        return dataclasses.replace(b, status="error", target=None, reason="bound without a ref: it cannot run isolated")
    return dataclasses.replace(b, target=None)


def _serve(conn: Any, engine_name: str, source_ref: str, search: bool, start: int, sys_path: list[str], owner: int) -> None:
    """The worker: the plan's keys, then for each binding from ``start`` a
    ``begin``, a ``probe`` (with its input) if the engine's code is probed,
    and its rows."""
    from batchfuzz import bind, engines
    from batchfuzz.execution import watch_owner

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    watch_owner(owner)
    sys.path[:] = sys_path
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        engine = engines.engine(engine_name)
        plan = _plan(engine, engine.ReleaseSource.from_ref(source_ref), search)
    except Exception as exc:
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("plan", [(f, c) for f, c, _ in plan]))
    for i in range(start, len(plan)):
        conn.send(("begin", i))
        with bind.probes_reported(functools.partial(_report_probe, conn, i)):
            rows = plan[i][2]()
        conn.send(("done", i, [_shipped(b) for b in rows]))
    conn.send(("end",))


def _report_probe(conn: Any, index: int, args: tuple[Any, ...]) -> None:
    conn.send(("probe", index, args))


class _Worker:
    """One worker process and its pipe."""

    def __init__(self, engine: Any, source: ReleaseSource, search: bool, start: int) -> None:
        from batchfuzz.execution import process_context, without_main_module

        ctx = process_context()
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, engine.ENGINE, source.ref, search, start, list(sys.path),
                                                     os.getpid()), daemon=True)
        with without_main_module():
            self.proc.start()
        child.close()

    def receive(self, timeout_s: float) -> tuple[Any, ...] | None:
        """The next message, or None when the worker died or said nothing within ``timeout_s``."""
        try:
            if self.conn.poll(timeout_s):
                message: tuple[Any, ...] = self.conn.recv()
                return message
        except (EOFError, OSError):
            pass
        return None

    def end(self) -> str:
        """Stop the worker and its process group; how it ended."""
        self.proc.join(0.5)
        code = self.proc.exitcode
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.join(5)
        self.conn.close()
        return f"exit status {code}" if code is not None else "no answer in time: killed"


def isolated_bindings(engine: Any, source: ReleaseSource, *, search: bool = True, timeout_s: float = 10.0,
                      load_timeout_s: float = LOAD_TIMEOUT_S) -> list[Bound]:
    """``engine``'s bindings of ``source``, made in worker processes (see the
    module's docstring). ``timeout_s`` bounds a probe (the per-call timeout).
    SourceError when the release cannot be opened or planned there."""
    rows: list[Bound] = []
    keys: list[tuple[str, str]] | None = None
    start = 0
    while keys is None or start < len(keys):
        began = start
        worker = _Worker(engine, source, search, start)
        stage: tuple[Any, ...] = ("plan",)
        while True:
            wait = _PLAN_TIMEOUT_S if stage[0] == "plan" else timeout_s if stage[0] == "probe" else load_timeout_s
            message = worker.receive(wait)
            if message is None or message[0] in ("failed", "end"):
                break
            if message[0] == "plan":
                keys = [tuple(k) for k in message[1]]
            elif message[0] == "done":
                rows += message[2]
                start = message[1] + 1
            stage = message
        ended = worker.end()
        if message is not None and message[0] == "failed":
            raise SourceError(f"cannot bind {source!r}: {message[1]}")
        if keys is None:
            raise SourceError(f"the worker binding {source!r} ended before it listed the bindings ({ended})")
        if message is not None:  # "end": every binding made
            break
        if stage[0] in ("begin", "probe"):  # it ended inside a binding: that row says so, the next worker goes on
            rows.append(_lost(engine, source, keys[start], stage, ended, timeout_s))
            start += 1
        elif start == began:  # it ended between bindings without making one: no progress to build on
            raise SourceError(f"the worker binding {source!r} ended between bindings ({ended})")
    return rows


def _lost(engine: Any, source: ReleaseSource, key: tuple[str, str], stage: tuple[Any, ...], ended: str, timeout_s: float
          ) -> Bound:
    """The row of a binding whose worker died or hung: in its probe, a bound
    row whose probe is the cell's first question; before it, an error."""
    function, contract = key
    release = f"{engine.ENGINE} {source.version}"
    if stage[0] == "probe":
        return Bound(release, function, contract, "bound", ref=f"{engine.ENGINE}::{source.ref}::{function}::{contract}",
                     probe_raised=f"the dry run on the probe input ended its process ({ended}; per-call timeout {timeout_s:g}s)",
                     probe_args=tuple(stage[2]))
    return Bound(release, function, contract, "error",
                 reason=f"binding it ended the process that bound it ({ended}) before its dry run: the release's code ran "
                        "while it was cut out and loaded (a default argument, a decorator or a class body)")
