"""The in-process executor: the target runs in the calling process, a
Python-level hang interrupted by SIGALRM, a Ctrl-C told from a target's own
KeyboardInterrupt."""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Callable, Iterator
from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.execution.evaluation import _INTERRUPTS, _OwnInterrupt, _Timeout, evaluate, signature_error
from batchfuzz.execution.executor import Executor
from batchfuzz.execution.harness import _tampered, snapshot_harness, tampering
from batchfuzz.execution.outcome import Outcome
from batchfuzz.preconditions import declared_domain


@contextlib.contextmanager
def _watch_sigint() -> Iterator[None]:
    if multiprocessing.current_process().name != "MainProcess" or not _in_main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def interrupted(signum: int, frame: Any) -> None:
        _INTERRUPTS.seen = True
        raise _OwnInterrupt()

    _INTERRUPTS.seen = False
    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if _INTERRUPTS.seen:
            _INTERRUPTS.seen = False


@contextlib.contextmanager
def _alarm(timeout_s: float | None) -> Iterator[None]:
    if not timeout_s or timeout_s <= 0 or not hasattr(signal, "setitimer") or \
            multiprocessing.current_process().name != "MainProcess" or not _in_main_thread():
        yield
        return

    def ring(signum: int, frame: Any) -> None:
        raise _Timeout(f"the call ran past the per-example timeout of {timeout_s:g}s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class InProcess(Executor):
    """The target runs here (docs/fuzz-loop.md, "Where the target runs", says what that cannot survive)."""

    def __init__(self, contract: registry.Contract, target: Callable[..., Any], name: str = "target", *,
                 watch: bool = False) -> None:
        """``watch``: check after every call that the target left the
        harness's functions alone (``tampering``), as a worker does; for a
        user's target, not the project's own code."""
        self.contract, self.target, self.name = contract, target, name
        self._harness = snapshot_harness() if watch else None

    def describe(self) -> dict[str, Any]:
        return {"domain": declared_domain(self.target), "error": signature_error(self.contract, self.target)}

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None, *, scores: bool = False) -> Outcome:
        with _alarm(timeout_s), _watch_sigint():
            outcome = evaluate(self.contract, self.target, prop_name, case, scores=scores)
        if self._harness is not None:
            changed = tampering(self._harness)
            if changed:
                return _tampered(changed)
        return outcome
