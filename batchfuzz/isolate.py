"""Crash isolation: evaluate property checks in a separate worker process.

A CUDA fault (an illegal address, a device-side assert) poisons the CUDA
context of the process it happens in: every later CUDA call fails too. So GPU
checks run in a worker subprocess, one case at a time over a pipe. The parent
keeps Hypothesis (generation and shrinking) and sees each case's outcome as a
passed check, a PropertyViolation, an exception, or a crash; after an
exception that mentions CUDA, or when the worker dies, the worker is replaced
by a fresh one, so the next case runs on a clean context and shrinking stays
meaningful. The rest of the run continues.

Targets are named, not pickled: ``impl:NAME``, ``variant:NAME``, ``oracle``
or ``target:MODULE:FUNCTION``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation
from batchfuzz.codec import decode_case, encode_case
from batchfuzz.registry import Contract, Property, Target


class IsolatedCrash(Exception):
    """The worker process died or its device context failed while checking a case."""


def resolve_target(contract: Contract, ref: str, device: str) -> Target:
    kind, _, name = ref.partition(":")
    if kind == "impl":
        return contract.implementation(name).for_device(device)
    if kind == "variant":
        return contract.variant(name).fn
    if kind == "oracle":
        return contract.oracle
    if kind == "target":
        from batchfuzz.targets import load_target

        return load_target(name)
    raise ValueError(f"target reference must be impl:NAME, variant:NAME, oracle or target:MODULE:FUNC, got {ref!r}")


def _is_device_fault(message: str) -> bool:
    m = message.lower()
    return "cuda error" in m or "device-side assert" in m or "illegal memory access" in m or ("accelerator" in m and "error" in m)


def _serve() -> None:
    """Worker loop: one JSON request per line in, one JSON reply per line out."""
    out = sys.stdout
    sys.stdout = sys.stderr  # keep stray prints off the protocol channel
    for line in sys.stdin:
        req = json.loads(line)
        contract = registry.get(req["contract"])
        target = resolve_target(contract, req["target"], req["device"])
        prop = contract.property(req["property"])
        case = decode_case(req["case"])
        reply: dict[str, Any]
        try:
            prop.check(target, case)
            if req["device"] == "cuda":
                import torch

                torch.cuda.synchronize()  # surface asynchronous faults inside this case
            reply = {"status": "passed"}
        except PropertyViolation as exc:
            reply = {"status": "violation", "message": str(exc)}
        except Exception as exc:
            msg = f"{type(exc).__name__}: {exc}"
            reply = {"status": "crash" if _is_device_fault(msg) else "exception", "message": msg, "type": type(exc).__name__}
        out.write(json.dumps(reply) + "\n")
        out.flush()
        if reply["status"] == "crash":
            return  # the context is poisoned: let the parent start a fresh worker


@dataclass
class IsolatedRunner:
    """A worker process evaluating (property, case) pairs for one target."""

    contract: Contract
    target_ref: str
    device: str = "cpu"
    env: dict[str, str] | None = None
    timeout_s: float = 120.0
    crashes: int = 0
    cases: int = 0

    def __post_init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ, **(self.env or {}))
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return subprocess.Popen([sys.executable, "-m", "batchfuzz.isolate"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)

    def evaluate(self, prop: Property, case: Case) -> dict[str, Any]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = self._start()
        self.cases += 1
        req = {"contract": self.contract.name, "target": self.target_ref, "property": prop.name,
               "case": encode_case(case), "device": self.device}
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            err = self._finish()
            self.crashes += 1
            return {"status": "crash", "message": f"worker died (exit {self._last_rc}): {err[-2000:]}"}
        reply: dict[str, Any] = json.loads(line)
        if reply["status"] == "crash":
            self.crashes += 1
            self._finish()
        return reply

    _last_rc: int | None = None

    def _finish(self) -> str:
        proc, self._proc = self._proc, None
        if proc is None:
            return ""
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        self._last_rc = proc.returncode
        return err or ""

    def close(self) -> None:
        self._finish()

    def isolated(self, prop: Property) -> Property:
        """``prop`` evaluated in the worker: usable with runner.hunt (the target
        argument is ignored; the worker resolves ``target_ref`` itself)."""

        def check(_target: Target, case: Case) -> None:
            reply = self.evaluate(prop, case)
            if reply["status"] == "violation":
                raise PropertyViolation(reply["message"])
            if reply["status"] == "exception":
                raise RuntimeError(reply["message"])
            if reply["status"] == "crash":
                raise IsolatedCrash(reply["message"])

        return Property(prop.name, prop.spec, check)


if __name__ == "__main__":
    _serve()
