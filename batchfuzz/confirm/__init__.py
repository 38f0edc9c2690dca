"""What the engine's own attention kernel does with a counterexample.

A batchfuzz verdict is a property of metadata; ``confirm`` replays the case
through an engine's attention kernel on a CUDA device and says what the
kernel then does: ``clean``, or the consequences (a read outside a row, of
unwritten KV, a write past the output, an illegal memory access), against a
control (the oracle's result, which must come out clean). ``kernels``
extracts and loads a release's kernel, ``layouts`` lays a case out as
attention calls, ``attention`` runs one and reads the detectors; this module
is the isolated worker (a fault costs only the worker) and confirms one
case, the corpus or the catalogue (docs/confirm.md).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from batchfuzz.case import Case
from batchfuzz.confirm.layouts import BUILDERS, Layout, layout

WORKER_TIMEOUT_S = 600.0
MODEL = "model"


@dataclass
class LayoutReplay:
    """One layout's replay: ``consequences`` (strings; empty = clean), or
    ``fault`` (the kernel faulted: the worker said how, or died)."""

    what: str
    consequences: list[str] = field(default_factory=list)
    fault: str = ""
    max_abs_diff: float | None = None
    not_applicable: str = ""

    @property
    def clean(self) -> bool:
        return not self.consequences and not self.fault

    def summary(self) -> str:
        if self.not_applicable:
            return f"not applicable ({self.not_applicable})"
        if self.fault:
            return f"illegal memory access ({self.fault})"
        return "clean" if not self.consequences else "; ".join(self.consequences)


@dataclass
class CaseVerdict:
    """A case confirmed: the target's replay, its poison replay (when it read
    outside its row), and the oracle's control replays."""

    contract: str
    target: str
    case: Case
    kernel: str
    target_replay: LayoutReplay
    control: LayoutReplay
    poison: LayoutReplay | None = None
    control_poison: LayoutReplay | None = None

    @property
    def control_clean(self) -> bool:
        return self.control.clean and (self.control_poison is None or self.control_poison.clean)

    def consequence(self) -> str:
        parts = [self.target_replay.summary()]
        if self.poison is not None:
            parts.append(f"with a poison id past its row: {self.poison.summary()}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        from batchfuzz import codec

        return {
            "contract": self.contract, "target": self.target, "kernel": self.kernel,
            "case": codec.encode(self.case.args), "context": codec.encode(self.case.context),
            "verdict": "clean" if self.target_replay.clean else "consequence",
            "consequence": self.consequence(),
            "target_replay": self.target_replay.__dict__, "poison": self.poison.__dict__ if self.poison else None,
            "control": self.control.__dict__, "control_poison": self.control_poison.__dict__ if self.control_poison else None,
            "control_clean": self.control_clean,
        }


# ------------------------------------------------------------------ worker


def _serve(conn: Any, folder: str | None, kernel_name: str, device: str) -> None:
    """A confirm worker: loads the kernel once, then replays layouts sent
    over ``conn`` until told to stop. A device fault is reported and ends the
    worker (the CUDA context is unusable after it)."""
    from batchfuzz.confirm import attention

    try:
        if kernel_name == MODEL:
            kernel: Callable[..., Any] = attention.model_kernel
        else:
            from batchfuzz.confirm.kernels import KERNELS, load

            kernel = load(folder or "", kernel_name)
            if KERNELS[kernel_name].adapter:
                kernel = getattr(attention, KERNELS[kernel_name].adapter)(kernel)
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", ""))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        try:
            r = attention.replay(job, kernel, device)
        except attention.DeviceFault as exc:
            conn.send(("fault", str(exc)))
            return
        except attention.NotApplicable as exc:
            conn.send(("ok", LayoutReplay(job.what, [], "", None, str(exc))))
            continue
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("ok", LayoutReplay(r.what, [str(c) for c in r.consequences], "", r.max_abs_diff)))


class Worker:
    """Runs layouts in a process of its own (spawned: no CUDA context is
    inherited), replaced after a fault. ``kernel`` is a name of
    ``batchfuzz.confirm.kernels.KERNELS`` (loaded from ``folder``) or
    ``"model"`` (the CPU model of the kernel)."""

    def __init__(self, folder: str | os.PathLike[str] | None, kernel: str, device: str,
                 timeout_s: float = WORKER_TIMEOUT_S) -> None:
        self.folder = str(folder) if folder is not None else None
        self.kernel = kernel
        self.device = device
        self.timeout_s = timeout_s
        self._proc: Any = None
        self._conn: Any = None
        self.restarts = 0

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self.folder, self.kernel, self.device), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        status, text = self._receive(self.timeout_s)
        if status != "ready":
            self.close()
            raise RuntimeError(f"the confirm worker for kernel {self.kernel!r} did not start: {text}")

    def _receive(self, timeout_s: float) -> tuple[str, Any]:
        if not self._conn.poll(timeout_s):
            return "timeout", f"no answer within {timeout_s:g} s"
        try:
            return self._conn.recv()
        except EOFError:
            self._proc.join(5)
            return "died", f"the worker died (exit {self._proc.exitcode})"

    def run(self, job: Layout) -> LayoutReplay:
        if self._proc is None:
            self._start()
        self._conn.send(job)
        status, value = self._receive(self.timeout_s)
        if status == "ok":
            return value
        if status == "error":
            raise RuntimeError(f"replaying {job.what}: {value}")
        self.close()  # a fault, a death or a hang: this worker is done
        self.restarts += 1
        if status == "timeout":
            return LayoutReplay(job.what, [f"hang ({value})"])
        return LayoutReplay(job.what, [], str(value))

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self._conn.close()
        if self._proc is not None:
            self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
        self._proc = self._conn = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ------------------------------------------------------------------ cases


def result_of(contract: str, target: Callable[..., Any], case: Case) -> Any:
    """What ``target`` returns on ``case`` in the form the engine consumes
    it: contract C's stale-buffer form (``out=`` the case's stale buffer,
    after its history), every other contract's plain call, on copies."""
    c = case.copy()
    if contract == "pad_query_start_loc":
        buf = c.context["out"]
        for h_nst, h_p in c.context.get("history", ()):
            target(h_nst, h_p, out=buf)
        return target(c.args["num_scheduled_tokens"], c.args["num_reqs_padded"], out=buf)
    return target(*c.args.values())


def confirm_case(contract: str, case: Case, target: Callable[..., Any], target_name: str, worker: Worker,
                 block_size: int | None = None) -> CaseVerdict:
    """Replay ``target``'s result on ``case`` and, as the control, the
    oracle's; when the target's layout reads outside a row, again with a
    poison id there (the engine's neighbour rows and past-the-table reads are
    where a real fault comes from), control too."""
    from batchfuzz import registry

    oracle = registry.get(contract).oracle
    mine = layout(contract, case, result_of(contract, target, case), f"{target_name}", block_size)
    control = layout(contract, case, result_of(contract, oracle, case), "oracle", block_size)
    verdict = CaseVerdict(contract, target_name, case, worker.kernel, worker.run(mine), worker.run(control))
    if any(c.startswith("read outside its row") for c in verdict.target_replay.consequences):
        verdict.poison = worker.run(mine.with_poison())
        verdict.control_poison = worker.run(control.with_poison())
    return verdict


def confirm_or_explain(contract: str, case: Case, target: Callable[..., Any], target_name: str, worker: Worker,
                       block_size: int | None = None) -> CaseVerdict:
    """:func:`confirm_case`, or, when the case cannot be laid out (the target
    raises on it, or its result is not a layout), a verdict saying so."""
    try:
        return confirm_case(contract, case, target, target_name, worker, block_size)
    except Exception as exc:
        why = f"not replayable: {type(exc).__name__}: {exc}"
        return CaseVerdict(contract, target_name, case, worker.kernel, LayoutReplay(target_name, [], "", None, why),
                           LayoutReplay("oracle", [], "", None, why))


def shipped_cases(contracts: Iterable[str] | None = None, everything: bool = False,
                  names: Iterable[str] | None = None) -> Iterator[tuple[str, str, Case, Any]]:
    """For each catalogue variant of a contract that reaches attention
    (shipped ones only unless ``everything``; only those ``names`` when
    given): ``(contract, variant, shrunk
    case, variant function)``, the case found and shrunk as the catalogue
    finds it (``batchfuzz.catalogue.run_variant``)."""
    from batchfuzz import catalogue

    wanted = set(contracts) if contracts is not None else set(BUILDERS)
    for contract, variant in catalogue.variants(sorted(wanted & set(BUILDERS))):
        if names is not None and variant.name not in set(names):
            continue
        if names is None and not everything and variant.origin != "shipped":
            continue
        row = catalogue.run_variant(contract, variant, check_all=False)
        search = row.best or row.primary
        if search.failure is None:
            continue
        yield contract.name, variant.name, search.failure.case, variant.fn


def confirm_catalogue(worker: Worker, contracts: Iterable[str] | None = None, everything: bool = False,
                      block_size: int | None = None, on_verdict: Callable[[CaseVerdict], None] | None = None,
                      names: Iterable[str] | None = None) -> list[CaseVerdict]:
    """Every shipped variant (or every variant, or the ``names`` variants) of
    the contracts that reach attention, confirmed."""
    out = []
    for contract, name, case, fn in shipped_cases(contracts, everything, names):
        started = time.time()
        verdict = confirm_or_explain(contract, case, fn, f"variant:{contract}.{name}", worker, block_size)
        verdict.__dict__["seconds"] = round(time.time() - started, 3)
        out.append(verdict)
        if on_verdict is not None:
            on_verdict(verdict)
    return out
