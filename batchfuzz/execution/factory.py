"""Choosing the executor for a target reference: isolated, or here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from batchfuzz import registry
from batchfuzz.execution.executor import Executor
from batchfuzz.execution.harness import snapshot_harness, tampered_on_import, tampering
from batchfuzz.execution.in_process import InProcess
from batchfuzz.execution.isolated import START_TIMEOUT_S, Isolated
from batchfuzz.targets import TargetError, TargetRef, parse


def executor_for(contract: registry.Contract, ref: TargetRef | str, *, isolate: bool = True, device: str | None = None,
                 load_timeout_s: float = START_TIMEOUT_S) -> Executor:
    """An executor running the target ``ref`` names: isolated (its loading
    bounded by ``load_timeout_s``), or here."""
    r = parse(ref) if isinstance(ref, str) else ref
    if isolate:
        return Isolated(contract, r, device=device, load_timeout_s=load_timeout_s)
    if r.kind != "user":
        return InProcess(contract, r.load(contract), r.spec)
    harness = snapshot_harness()
    target = r.load(contract)
    changed = tampering(harness)
    if changed:
        raise TargetError(tampered_on_import(changed))
    return InProcess(contract, target, r.spec, watch=True)


def wrap(contract: registry.Contract, target: Callable[..., Any] | Executor, name: str = "target") -> Executor:
    """An executor for a callable (in-process), or the executor itself."""
    return target if isinstance(target, Executor) else InProcess(contract, target, name)
