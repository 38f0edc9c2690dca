"""The worker process an :class:`~batchfuzz.execution.isolated.Isolated`
executor forks: it loads the target once, then answers one case at a time
over a pipe until the pipe closes or the target crashes it."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchfuzz import registry
from batchfuzz.execution.evaluation import _text, evaluate, signature_error
from batchfuzz.execution.fork_server import watch_owner
from batchfuzz.execution.harness import HarnessSnapshot, _tampered, snapshot_harness, tampered_on_import, tampering
from batchfuzz.execution.outcome import CRASH, FAILED, PASSED, RAISES, Outcome
from batchfuzz.execution.processes import _become_subreaper, _gone
from batchfuzz.preconditions import declared_domain
from batchfuzz.targets import TargetError, parse
from batchfuzz.text import outside


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker is started with: the target to load and the process it runs in."""

    contract: str
    ref: str  # the target reference (TargetRef.spec)
    device: str
    sys_path: list[str]  # the caller's: the fork server's may be older
    owner: int  # the pid whose end ends the worker (watch_owner)
    env: dict[str, str]


def _serve(conn: Any, output: Any, spec: WorkerSpec) -> None:
    """A worker: say it is up, load the target, then answer requests until the pipe closes."""
    _become_worker(output, spec)
    server = os.getppid()
    conn.send({"up": True})  # batchfuzz's own start ends here; loading the target is the target's
    harness = snapshot_harness()
    contract, target, info = _load(spec, harness)
    conn.send(info)
    while True:
        try:
            op, prop_name, case, scores = conn.recv()
        except (EOFError, OSError):
            return
        if op == "stop" or target is None or contract is None:
            return
        outcome = evaluate(contract, target, prop_name, case, scores=scores)  # called here: a frame less in a segfault's trace
        outcome = _checked(outcome, spec.device, harness, server)
        conn.send(outcome)
        if outcome.status == CRASH:  # the context is poisoned, or the process is: the parent starts a fresh worker
            with contextlib.suppress(EOFError, OSError):
                conn.recv()  # once it has ended what the target started (the pipe closes), while they are still ours
            return


def _become_worker(output: Any, spec: WorkerSpec) -> None:
    """Set this process up as a worker. It leads a process group of its own
    and is a subreaper, so that every process the target starts (in a new
    session too) can be found and ended with it; its output goes to a pipe
    the parent keeps a bounded tail of."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    _become_subreaper()
    watch_owner(spec.owner)
    sys.path[:] = spec.sys_path
    os.environ.update(spec.env)
    os.dup2(output.fileno(), 1)
    os.dup2(output.fileno(), 2)
    output.close()
    faulthandler.enable()  # a segfault prints where it happened, to the output the parent keeps
    try:
        import torch

        torch.set_num_threads(1)
    except Exception:  # pragma: no cover - torch is a dependency
        pass


def _load(spec: WorkerSpec, harness: HarnessSnapshot) -> tuple[registry.Contract | None, Callable[..., Any] | None,
                                                               dict[str, Any]]:
    """The contract and the target, and what the parent's ``describe`` returns
    (its domain, or why it cannot be used); no target when it cannot."""
    contract: registry.Contract | None = None
    target: Callable[..., Any] | None = None
    try:
        contract = registry.get(spec.contract)
        target = parse(spec.ref).load(contract)
        info = {"domain": declared_domain(target), "error": signature_error(contract, target)}
    except (TargetError, KeyError) as exc:
        info, target = {"domain": None, "error": outside(_text(exc))}, None
    except Exception as exc:
        info, target = {"domain": None, "error": outside(f"{type(exc).__name__}: {_text(exc)}")}, None
    changed = tampering(harness)
    if changed and not info["error"]:
        info["error"] = tampered_on_import(changed)
    if spec.device == "cuda" and not info["error"]:
        _warm_device()
    return contract, target, info


def _checked(outcome: Outcome, device: str, harness: HarnessSnapshot, server: int) -> Outcome:
    """``outcome``, unless the call faulted the device, tampered with the
    harness or ended the fork server: then a crash naming what it did."""
    if device == "cuda" and outcome.status in (PASSED, FAILED, RAISES):
        try:
            import torch

            torch.cuda.synchronize()  # surface an asynchronous device fault inside this case
        except Exception as exc:
            outcome = Outcome(CRASH, type(exc).__name__, f"device fault: {exc}", exit="CUDA error")
    if outcome.status in (FAILED, RAISES) and _is_device_fault(outcome.message):
        outcome = Outcome(CRASH, outcome.error_type, f"device fault: {outcome.message}", outcome.traceback, "CUDA error")
    changed = tampering(harness)
    if changed:
        return _tampered(changed)
    if _gone(server):
        return Outcome(CRASH, "KilledForkServer", f"the target ended the process batchfuzz forks its workers from "
                       f"(the fork server, pid {server})", exit="killed the fork server")
    return outcome


def _warm_device() -> None:
    """Make the worker's CUDA context now, while it is loading (its start-up,
    which the fuzz job does not charge to a slice), not in its first case: a
    context costs a good part of a second, more with other processes making
    theirs. A device that cannot be used is left for the first case to report."""
    try:
        import torch

        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    except Exception:
        pass


def _is_device_fault(message: str) -> bool:
    m = message.lower()
    return "cuda error" in m or "device-side assert" in m or "illegal memory access" in m or ("accelerator" in m and "error" in m)
