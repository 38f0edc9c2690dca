"""Running code under test: one execution layer for ``check``, ``fuzz``,
``replay``, the catalogue and ``batchfuzz.testing``.

Hypothesis (generation, shrinking) always runs in the calling process; the
target runs in an :class:`Executor`:

- :class:`Isolated` (the default of ``check``, ``fuzz`` and ``replay``): a
  worker process, one case at a time over a pipe. A target that segfaults,
  calls ``os._exit`` or ``sys.exit``, raises any ``BaseException``, faults
  its CUDA context or runs past the per-example timeout costs only its worker:
  the case is reported as a failure of the pseudo-property ``crash`` or
  ``timeout`` (with the signal or exit status, and the end of what the worker
  printed), shrunk like any other failure, and a fresh worker takes the next
  case. Workers are forked from a server process that has imported numpy,
  torch, Hypothesis and the registry once (multiprocessing's ``forkserver``),
  so replacing one costs milliseconds, and none inherits a CUDA context.
- :class:`InProcess` (``--no-isolation``, the test suite, the catalogue):
  the target runs in the calling process. Faster (see the README's table of
  the cost of isolation); an exception is still a failing case and a
  ``sys.exit`` a crash, but a segfault or a hang in C code takes the process
  down. A Python-level hang past the timeout is interrupted (SIGALRM, main
  thread only). The catalogue runs the registry's own variants this way:
  they are known Python code that fails by raising, and its figures (examples
  and seconds to find each bug) are search costs a pipe would distort.

Every process batchfuzz starts comes from :func:`process_context` (the fork
server): isolated workers, the fuzz job's runner processes and the
catalogue's ``--jobs`` pool. The only other child processes are ``pip``
(downloading an engine's release wheel) and the ``python`` a crash or
timeout reproduction starts, which is the user's code, not batchfuzz's.

Both run every property on a *guarded* target (:func:`guarded`): each call
gets copies of the arguments the contract does not let it write, so a target
that scribbles on its inputs cannot make a property judge its result against
the scribbles.
"""

from __future__ import annotations

import contextlib
import faulthandler
import inspect
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case, copy_value
from batchfuzz.preconditions import declared_assumptions, declared_domain
from batchfuzz.targets import TargetError, TargetRef, parse

PASSED, FAILED, REJECTED, CRASH, TIMEOUT = "passed", "failed", "rejected", "crash", "timeout"
# Seconds a worker gets to start (imports included) before it counts as hung.
START_TIMEOUT_S = 120.0
_STDERR_TAIL = 2000


@dataclass
class Outcome:
    """What one evaluation did: ``passed``, ``failed`` (the property raised:
    ``error_type``, ``message``, ``traceback``), ``rejected`` (the target's
    ``@assumes`` refused the case), ``crash`` (its process died or it raised a
    BaseException: ``exit`` says how) or ``timeout`` (past ``seconds``)."""

    status: str
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    exit: str = ""
    seconds: float = 0.0
    value: Any = None  # the result of a "scores" request

    @property
    def ok(self) -> bool:
        return self.status == PASSED


# ---------------------------------------------------------------- guarding inputs


# Values deepcopy returns as they are: passed without copying.
# The oracle's parameter names, per oracle (inspect.signature costs more than a small property).
_PARAMETERS: dict[Callable[..., Any], list[str]] = {}


def _parameters(contract: registry.Contract) -> list[str]:
    names = _PARAMETERS.get(contract.oracle)
    if names is None:
        names = _PARAMETERS[contract.oracle] = list(inspect.signature(contract.oracle).parameters)
    return names


def guarded(contract: registry.Contract, target: Callable[..., Any]) -> Callable[..., Any]:
    """``target`` called on copies of every argument it may not write (all but
    ``contract.writes``: a persistent buffer, an ``out=``), so the caller's
    values (the case the properties judge by) stay as they were."""
    names = _parameters(contract)
    writes = set(contract.writes)

    def call(*args: Any, **kwargs: Any) -> Any:
        args2 = tuple(a if (i < len(names) and names[i] in writes) else copy_value(a) for i, a in enumerate(args))
        kwargs2 = {k: v if k in writes else copy_value(v) for k, v in kwargs.items()}
        return target(*args2, **kwargs2)

    call.__wrapped__ = target  # type: ignore[attr-defined]
    return call


def signature_error(contract: registry.Contract, target: Callable[..., Any]) -> str | None:
    """Why ``target`` cannot take the calls the properties make (the canonical
    arguments, positionally, and each optional parameter of the oracle's
    signature, like contract C's ``out``), or None."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None  # a builtin or an extension function: nothing to check before calling
    params = list(inspect.signature(contract.oracle).parameters)
    n = len(contract.arguments)
    for count in sorted({n, len(params)}):
        try:
            sig.bind(*range(count))
        except TypeError as exc:
            return (f"its signature {sig} cannot take the {count} positional arguments "
                    f"({', '.join(params[:count])}) the contract's properties pass: {exc}")
    return None


def _admits(contract: registry.Contract, target: Any, case: Case) -> bool:
    args = [case.args[k] for k in contract.arguments]
    return all(p(*args) for p in declared_assumptions(target))


def evaluate(contract: registry.Contract, target: Callable[..., Any], prop_name: str, case: Case) -> Outcome:
    """Run one property on one case, here: the body both executors share.
    ``prop_name`` may also be ``__scores__`` (the contract's scores) or
    ``__admits__`` (only the target's ``@assumes`` predicates)."""
    start = time.perf_counter()
    try:
        if not _admits(contract, target, case):
            return Outcome(REJECTED)
        if prop_name == "__admits__":
            return Outcome(PASSED)
        if prop_name == "__scores__":
            value = contract.scores(guarded(contract, target), case) if contract.scores is not None else {}
            return Outcome(PASSED, value=value, seconds=time.perf_counter() - start)
        prop = contract.property(prop_name)
        prop.check(target if prop.raw else guarded(contract, target), case)
    except _Timeout as exc:
        return Outcome(TIMEOUT, "Timeout", str(exc), seconds=time.perf_counter() - start)
    except Exception as exc:
        return Outcome(FAILED, type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)),
                       seconds=time.perf_counter() - start)
    except SystemExit as exc:
        return Outcome(CRASH, "SystemExit", f"the target called sys.exit({exc.code!r})", exit=f"sys.exit({exc.code!r})",
                       seconds=time.perf_counter() - start)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return Outcome(CRASH, type(exc).__name__, f"the target raised {type(exc).__name__}: {exc}",
                       "".join(traceback.format_exception(exc)), exit=f"raised {type(exc).__name__}",
                       seconds=time.perf_counter() - start)
    return Outcome(PASSED, seconds=time.perf_counter() - start)


# ---------------------------------------------------------------- executors


class Executor:
    """Where a target runs. ``check`` evaluates one property on one case within
    ``timeout_s``; ``describe`` says what the target declares (its domain),
    or why it cannot be used (import error, signature) before any case runs."""

    contract: registry.Contract
    name: str

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None) -> Outcome:
        raise NotImplementedError

    def scores(self, case: Case, timeout_s: float | None = None) -> dict[str, int]:
        out = self.check("__scores__", case, timeout_s)
        return dict(out.value or {}) if out.ok else {}

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Timeout(Exception):
    """Raised inside an in-process target by SIGALRM."""


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
    """The target runs here (see the module docstring for what that cannot survive)."""

    def __init__(self, contract: registry.Contract, target: Callable[..., Any], name: str = "target") -> None:
        self.contract, self.target, self.name = contract, target, name

    def describe(self) -> dict[str, Any]:
        return {"domain": declared_domain(self.target), "error": signature_error(self.contract, self.target)}

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None) -> Outcome:
        with _alarm(timeout_s):
            return evaluate(self.contract, self.target, prop_name, case)


# ---------------------------------------------------------------- isolated workers

_CONTEXT: Any = None


def process_context() -> Any:
    """The multiprocessing context every batchfuzz process is made from: a
    fork server that has imported the heavy modules and the registry once
    (so a new process is a fork of it: milliseconds), never a CUDA context."""
    global _CONTEXT
    if _CONTEXT is None:
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        _CONTEXT = multiprocessing.get_context(method)
        if method == "forkserver":
            _CONTEXT.set_forkserver_preload(["batchfuzz._preload"])
    return _CONTEXT


def start_fork_server() -> None:
    """Start the fork server now, without waiting for it: its imports
    (torch, the registry: seconds) then overlap the caller's own, instead of
    delaying the first worker. Starting it again is a no-op."""
    if process_context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


@contextlib.contextmanager
def without_main_module() -> Iterator[None]:
    """Start a process without re-running the caller's ``__main__``.

    multiprocessing makes a new process import the parent's main module (to
    unpickle functions defined there). Workers run only ``batchfuzz`` code,
    and the main module may be a user's script, ``<stdin>`` or a notebook: so
    while a process starts, ``__main__`` shows neither a file nor a spec.
    """
    main = sys.modules.get("__main__")
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if main is not None and hasattr(main, k)}
    try:
        for k in saved:
            delattr(main, k) if k == "__file__" else setattr(main, k, None)
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


def watch_owner(owner: int) -> None:
    """End this process when process ``owner`` is gone.

    Every batchfuzz process is forked from a fork server, not from the process
    that uses it, so nothing ends it when its user dies (killed at a deadline,
    say) while it is busy: a thread checks twice a second that the owner is
    still there, and exits at once when it is not, hang or no hang.
    """
    import threading

    def watch() -> None:
        while True:
            time.sleep(0.5)
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                os._exit(70)
            except PermissionError:  # pragma: no cover - a pid reused by another user's process
                os._exit(70)

    threading.Thread(target=watch, name="batchfuzz-owner-watch", daemon=True).start()


def _serve(conn: Any, contract_name: str, ref: str, device: str, sys_path: list[str], log_path: str, owner: int,
           env: dict[str, str]) -> None:
    """A worker: load the target, then answer requests until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    watch_owner(owner)
    sys.path[:] = sys_path
    os.environ.update(env)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    faulthandler.enable()  # a segfault prints where it happened, to the log the parent reads
    try:
        import torch

        torch.set_num_threads(1)
    except Exception:  # pragma: no cover - torch is a dependency
        pass
    try:
        contract = registry.get(contract_name)
        target = parse(ref).load(contract)
        info = {"domain": declared_domain(target), "error": signature_error(contract, target)}
    except (TargetError, KeyError) as exc:
        info, target, contract = {"domain": None, "error": str(exc)}, None, None
    except Exception as exc:
        info, target, contract = {"domain": None, "error": f"{type(exc).__name__}: {exc}"}, None, None
    conn.send(info)
    while True:
        try:
            op, prop_name, case = conn.recv()
        except (EOFError, OSError):
            return
        if op == "stop" or target is None or contract is None:
            return
        outcome = evaluate(contract, target, prop_name, case)
        if device == "cuda" and outcome.status in (PASSED, FAILED):
            try:
                import torch

                torch.cuda.synchronize()  # surface an asynchronous device fault inside this case
            except Exception as exc:
                outcome = Outcome(CRASH, type(exc).__name__, f"device fault: {exc}", exit="CUDA error")
        if outcome.status == FAILED and _is_device_fault(outcome.message):
            outcome = Outcome(CRASH, outcome.error_type, f"device fault: {outcome.message}", outcome.traceback, "CUDA error")
        conn.send(outcome)
        if outcome.exit == "CUDA error":
            return  # the context is poisoned: the parent starts a fresh worker


def _is_device_fault(message: str) -> bool:
    m = message.lower()
    return "cuda error" in m or "device-side assert" in m or "illegal memory access" in m or ("accelerator" in m and "error" in m)


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
    """The target runs in a worker process, replaced after each crash or timeout."""

    def __init__(self, contract: registry.Contract, ref: TargetRef | str, *, device: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.contract = contract
        # The worker's environment: the caller's now (the fork server's may be older), plus ``env``.
        self.env = {**os.environ, **(env or {})}
        self.ref = parse(ref) if isinstance(ref, str) else ref
        self.name = self.ref.spec
        self.device = device or self.ref.device
        self.crashes = 0
        self.started = 0
        self._proc: Any = None
        self._conn: Any = None
        self._info: dict[str, Any] | None = None
        fd, self._log = tempfile.mkstemp(prefix="batchfuzz-worker-", suffix=".log")
        os.close(fd)

    def _start(self) -> None:
        ctx = process_context()
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, self.contract.name, self.ref.spec, self.device, list(sys.path),
                                                      self._log, os.getpid(), self.env), daemon=True)
        with without_main_module():
            self._proc.start()
        child.close()
        self._conn = parent
        self.started += 1
        if not parent.poll(START_TIMEOUT_S):
            self._kill()
            raise TargetError(f"the worker for {self.name} did not start within {START_TIMEOUT_S:g}s")
        try:
            self._info = parent.recv()
        except EOFError:
            code = self._reap()
            raise TargetError(f"the worker for {self.name} died while loading the target ({_describe_exit(code)}): "
                              f"{self._tail()}") from None

    def describe(self) -> dict[str, Any]:
        if self._proc is None:
            self._start()
        assert self._info is not None
        return dict(self._info)

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None) -> Outcome:
        if self._proc is None or not self._proc.is_alive():
            self._reap()
            self._start()
        if self._info and self._info.get("error"):
            raise TargetError(self._info["error"])
        start = time.perf_counter()
        size = self._log_size()
        try:
            self._conn.send(("check", prop_name, case))
            ready = self._conn.poll(timeout_s)
        except (BrokenPipeError, OSError):
            ready = True
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
            tail = self._tail(size)
            return Outcome(CRASH, "WorkerDied", f"the target's process died: {how}" + (f"\n{tail}" if tail else ""),
                           exit=how, seconds=time.perf_counter() - start)
        if outcome.status == CRASH and outcome.exit == "CUDA error":
            self._reap()
            self.crashes += 1
        return outcome

    def _log_size(self) -> int:
        try:
            return os.path.getsize(self._log)
        except OSError:
            return 0

    def _tail(self, since: int = 0) -> str:
        try:
            with open(self._log, "rb") as fh:
                fh.seek(since)
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return text[-_STDERR_TAIL:].strip()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.is_alive():
            proc.kill()
            proc.join(5)
        self._close_conn()

    def _reap(self) -> int | None:
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            proc.join(5)
            code = proc.exitcode
        self._close_conn()
        return code

    def _close_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send(("stop", "", None))
            self._proc.join(2)
        self._kill()
        with contextlib.suppress(OSError):
            os.unlink(self._log)


def executor_for(contract: registry.Contract, ref: TargetRef | str, *, isolate: bool = True, device: str | None = None) -> Executor:
    """An executor running the target ``ref`` names: isolated, or here."""
    r = parse(ref) if isinstance(ref, str) else ref
    if isolate:
        return Isolated(contract, r, device=device)
    return InProcess(contract, r.load(contract), r.spec)


def wrap(contract: registry.Contract, target: Callable[..., Any] | Executor, name: str = "target") -> Executor:
    """An executor for a callable (in-process), or the executor itself."""
    return target if isinstance(target, Executor) else InProcess(contract, target, name)
