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
server): isolated workers, the fuzz job's processes and the
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
import itertools
import multiprocessing
import operator
import os
import signal
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case, copy_value
from batchfuzz.preconditions import declared_assumptions, declared_domain
from batchfuzz.targets import TargetError, TargetRef, parse
from batchfuzz.text import MAX_NAME_CHARS, MAX_TRACEBACK_CHARS, bounded, outside, printable

PASSED, FAILED, REJECTED, CRASH, TIMEOUT, RAISES = "passed", "failed", "rejected", "crash", "timeout", "raises"
# The verdicts about the target itself rather than about its result: each is
# the name of a pseudo-property (batchfuzz.runner), a failure of which keeps
# the property whose calls it happened in as ``during``.
PSEUDO_PROPERTIES = (CRASH, TIMEOUT, RAISES)


def checked_property(prop: str, during: str) -> str:
    """The contract's property a failure of ``prop`` is re-checked with: the
    one it happened ``during`` for a pseudo-property, else ``prop`` itself."""
    return during if prop in PSEUDO_PROPERTIES else prop
# Seconds a worker gets to start (imports included) before it counts as hung.
START_TIMEOUT_S = 120.0
_STDERR_TAIL = 2000


@dataclass
class Outcome:
    """What one evaluation did: ``passed``, ``failed`` (the property found the
    result wrong: ``error_type``, ``message``, ``traceback``), ``raises`` (the
    target itself raised an exception, so the property could not judge a
    result: the exception's type, message and traceback), ``rejected`` (the
    target's ``@assumes`` refused the case), ``crash`` (its process died or it
    raised a BaseException: ``exit`` says how) or ``timeout`` (past
    ``seconds``)."""

    status: str
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    exit: str = ""
    seconds: float = 0.0
    value: Any = None  # the contract's scores, when they were asked for and the property passed

    def __post_init__(self) -> None:
        # What a target produced, kept bounded and printable from where it is made (batchfuzz.text): a
        # 10 MB message or a lone surrogate cannot reach a pipe, a report, a corpus entry or a terminal.
        if self.status not in (PASSED, REJECTED):
            self.error_type = outside(self.error_type, MAX_NAME_CHARS)
            self.message = outside(self.message)
            self.traceback = outside(self.traceback, MAX_TRACEBACK_CHARS)
            self.exit = outside(self.exit, MAX_NAME_CHARS)

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


class _TargetRaised(BaseException):
    """Carries an exception the target raised out of the property that called
    it (a BaseException, so that no property's ``except Exception`` takes it
    for its own)."""

    def __init__(self, exc: Exception) -> None:
        super().__init__(exc)
        self.exc = exc


def _reporting(target: Callable[..., Any], refusals: tuple[type[Exception], ...] = ()) -> Callable[..., Any]:
    """``target``, with an exception it raises marked as the target's own,
    except the contract's ``refusals`` (an answer its properties judge)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return target(*args, **kwargs)
        except _Timeout:
            raise
        except refusals:
            raise
        except Exception as exc:
            raise _TargetRaised(exc) from None

    call.__wrapped__ = target  # type: ignore[attr-defined]
    return call


def _scores(contract: registry.Contract, target: Callable[..., Any], case: Case) -> dict[str, int]:
    """The contract's scores of ``target`` on ``case``: counted, never failed
    on, so a target that raises there scores nothing ({})."""
    if contract.scores is None:
        return {}
    try:
        return dict(contract.scores(guarded(contract, target), case))
    except _Timeout:
        raise
    except Exception:
        return {}


def _text(exc: BaseException) -> str:
    """``str(exc)``, or a note when its ``__str__`` raises (a target's own exception class)."""
    try:
        return str(exc)
    except Exception as err:
        return f"<str() of this {type(exc).__name__} raised {type(err).__name__}>"


def _formatted(exc: BaseException) -> str:
    """``exc``'s traceback with each part (a frame, a message) bounded, so a
    huge message cannot push the frames (the origin's location) out."""
    return "".join(bounded(part) for part in traceback.format_exception(exc))


def evaluate(contract: registry.Contract, target: Callable[..., Any], prop_name: str, case: Case, *,
             scores: bool = False) -> Outcome:
    """Run one property on one case, here: the body both executors share.
    ``prop_name`` may also be ``__admits__`` (only the target's ``@assumes``
    predicates). ``scores``: when the property passes, the contract's scores
    on the same case (as it was before the property ran) are the outcome's
    ``value``, computed in the same call (one round trip to a worker, not two)."""
    start = time.perf_counter()
    try:
        if not _admits(contract, target, case):
            return Outcome(REJECTED)
        if prop_name == "__admits__":
            return Outcome(PASSED)
        prop = contract.property(prop_name)
        reporting = _reporting(target, contract.refusals)
        before = case.copy() if scores and contract.scores is not None and contract.writes else case
        prop.check(reporting if prop.raw else guarded(contract, reporting), case)
        value = _scores(contract, target, before) if scores else None
    except _TargetRaised as raised:
        exc = raised.exc
        return Outcome(RAISES, type(exc).__name__, _text(exc), _formatted(exc), seconds=time.perf_counter() - start)
    except _Timeout as exc:
        return Outcome(TIMEOUT, "Timeout", str(exc), seconds=time.perf_counter() - start)
    except Exception as exc:
        return Outcome(FAILED, type(exc).__name__, _text(exc), _formatted(exc), seconds=time.perf_counter() - start)
    except SystemExit as exc:
        return Outcome(CRASH, "SystemExit", f"the target called sys.exit({exc.code!r})", exit=f"sys.exit({exc.code!r})",
                       seconds=time.perf_counter() - start)
    except KeyboardInterrupt as exc:
        if _INTERRUPTS.seen or isinstance(exc, _OwnInterrupt):
            raise  # the user pressed Ctrl-C (a SIGINT arrived): stop, not a verdict on the target
        return Outcome(CRASH, type(exc).__name__, f"the target raised {type(exc).__name__} (no SIGINT arrived): "
                       f"{_text(exc)}", _formatted(exc), exit=f"raised {type(exc).__name__}",
                       seconds=time.perf_counter() - start)
    except BaseException as exc:
        return Outcome(CRASH, type(exc).__name__, f"the target raised {type(exc).__name__}: {_text(exc)}",
                       _formatted(exc), exit=f"raised {type(exc).__name__}",
                       seconds=time.perf_counter() - start)
    return Outcome(PASSED, seconds=time.perf_counter() - start, value=value)


# ---------------------------------------------------------------- executors


class Executor:
    """Where a target runs. ``check`` evaluates one property on one case within
    ``timeout_s`` (with ``scores``, also the contract's scores when it passes:
    ``evaluate``); ``describe`` says what the target declares (its domain),
    or why it cannot be used (import error, signature) before any case runs.
    ``keeps_cases``: a case given to ``check`` is never changed (a worker
    gets a copy through its pipe), so a caller need not copy it first.

    ``submit`` then ``collect`` is ``check`` in two halves: ``submit`` hands
    the case over, ``collect`` returns its outcome, within ``timeout_s`` of
    the ``submit``. Exactly one ``collect`` follows each ``submit``, and no
    other call comes between them. ``overlaps``: ``submit`` returns before
    the target runs (it runs in another process), so what the caller does
    until ``collect`` overlaps the target's call (``runner.hunt`` draws the
    next example then); elsewhere the whole call happens in ``collect``."""

    contract: registry.Contract
    name: str
    keeps_cases: bool = False
    overlaps: bool = False

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None, *, scores: bool = False) -> Outcome:
        raise NotImplementedError

    def submit(self, prop_name: str, case: Case, *, scores: bool = False) -> None:
        self._submitted = (prop_name, case, scores)

    def collect(self, timeout_s: float | None = None) -> Outcome:
        prop_name, case, scores = self._submitted
        del self._submitted
        return self.check(prop_name, case, timeout_s, scores=scores)

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Timeout(Exception):
    """Raised inside an in-process target by SIGALRM."""


class _OwnInterrupt(KeyboardInterrupt):
    """The KeyboardInterrupt a real SIGINT raises while an in-process target runs."""


class _Interrupts:
    """Whether a SIGINT arrived while an in-process target ran: a target that
    raises KeyboardInterrupt itself is a crash of the target, a Ctrl-C stops
    the command."""

    seen = False


_INTERRUPTS = _Interrupts()


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
    """The target runs here (see the module docstring for what that cannot survive)."""

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


class LoadTimeout(TargetError):
    """A worker that did not start, or a target that did not load, in time:
    slowness (a loaded machine, a slow release to bind) or a hang at import,
    not a wrong target."""


# What a target may not change in the process it runs in: the attributes of
# these modules (and of every batchfuzz module) the properties and oracles
# call. A target that replaces one (``numpy.array_equal = lambda *a: True``)
# could make the properties judge a wrong result right.
_WATCHED = ("numpy", "numpy.testing", "builtins", "math", "operator")
_CODE = operator.attrgetter("__code__")
_CHECK = operator.attrgetter("check")


def _watched_modules() -> list[Any]:
    return [m for name, m in list(sys.modules.items())
            if m is not None and (name in _WATCHED or name == "batchfuzz" or name.startswith("batchfuzz."))]


def _watched_names(m: Any) -> tuple[str, ...]:
    """A module's names whose values must not change: all of a watched
    library's; a batchfuzz module's public ones and its private functions
    and classes (``_admits``; not its private caches, which do change)."""
    return tuple(k for k, v in list(vars(m).items()) if not k.startswith("__")
                 and (m.__name__ in _WATCHED or not k.startswith("_") or isinstance(v, (types.FunctionType, type))))


def _judging_functions(modules: list[Any], properties: tuple[Any, ...]) -> tuple[types.FunctionType, ...]:
    """The Python functions the verdict runs through, whose code a target
    could rewrite in place (``evaluate.__code__ = ...``): those of the
    watched modules, the methods of batchfuzz's classes, every contract's
    properties and oracle."""
    found: dict[int, types.FunctionType] = {}
    values: list[Any] = [p.check for p in properties] + [c.oracle for c in registry.contracts()]
    for m in modules:
        for v in list(vars(m).values()):
            values.append(v)
            if isinstance(v, type) and v.__module__.startswith("batchfuzz"):
                members = list(vars(v).values())
                values += members + [getattr(a, f, None) for a in members for f in ("fget", "fset", "__func__")]
    for v in values:
        if isinstance(v, types.FunctionType):
            found.setdefault(id(v), v)
    return tuple(found.values())


class HarnessSnapshot:
    """The harness's functions as they were (see ``tampering``): per watched
    module, its watched names and the values they held; the code object of
    every function the verdict runs through; each contract property's check.

    Checked after every example a worker runs, so the check that nothing
    changed is two C-level passes: ``dict.get`` over every watched name of
    every module at once (``operator.is_`` against the values), and the code
    objects as a tuple compared with the saved one (identity first): a few
    thousand attributes in a few hundred microseconds on a loaded 2-core
    machine (docs/fuzz-loop.md). Only a module, function or property that
    differs is then compared one by one. What it cannot see (an object's
    state, a closure's cells, memory written through ctypes) is the limit
    the README states."""

    def __init__(self) -> None:
        self.modules: list[tuple[str, tuple[str, ...], Callable[[Any], Any], tuple[Any, ...]]] = []
        watched = _watched_modules()
        for m in watched:
            names = _watched_names(m)
            if not names:
                continue
            getter = operator.itemgetter(*names) if len(names) > 1 else (lambda d, k=names[0]: (d[k],))
            self.modules.append((m.__name__, names, getter, getter(vars(m))))
        # The same names flat, for the pass that finds nothing changed: one C-level map over them all.
        self.dicts = tuple(vars(sys.modules[mod]) for mod, names, _, _ in self.modules for _ in names)
        self.names = tuple(k for _, names, _, _ in self.modules for k in names)
        self.values = tuple(v for _, _, _, values in self.modules for v in values)
        self.properties = tuple(p for c in registry.contracts() for p in c.properties)
        self.checks = tuple(map(_CHECK, self.properties))
        self.functions = _judging_functions(watched, self.properties)
        self.codes = tuple(map(_CODE, self.functions))


def snapshot_harness() -> HarnessSnapshot:
    """The harness's functions as they are now (see ``tampering``)."""
    return HarnessSnapshot()


def tampering(before: HarnessSnapshot, *, restore: bool = True) -> list[str]:
    """The watched attributes that were replaced or deleted since ``before``
    (``numpy.array_equal``, ``batchfuzz.execution.evaluate.__code__``, a
    property's ``check``), put back when ``restore``."""
    changed = []
    same = all(map(operator.is_, map(dict.get, before.dicts, before.names, itertools.repeat(_MISSING)), before.values))
    for mod, names, getter, values in () if same else before.modules:
        m = sys.modules.get(mod)
        if m is None:
            continue
        d = vars(m)
        try:
            if all(map(operator.is_, getter(d), values)):
                continue
        except KeyError:
            pass  # a name was deleted: found below
        for k, v in zip(names, values, strict=True):
            if d.get(k, _MISSING) is not v:
                changed.append(f"{mod}.{k}")
                if restore:
                    setattr(m, k, v)
    if tuple(map(_CODE, before.functions)) != before.codes:
        for f, code in zip(before.functions, before.codes, strict=True):
            if f.__code__ is not code:
                changed.append(f"{f.__module__}.{f.__qualname__}.__code__")
                if restore:
                    f.__code__ = code
    if tuple(map(_CHECK, before.properties)) != before.checks:
        for p, check in zip(before.properties, before.checks, strict=True):
            if p.check is not check:
                changed.append(f"the property {p.name}'s check")
                if restore:
                    object.__setattr__(p, "check", check)
    return changed


_MISSING = object()
TAMPERED = "TamperedWithHarness"


def _tampered(changed: list[str]) -> Outcome:
    names = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return Outcome(CRASH, TAMPERED, f"the target replaced {names} in its process: the properties' own checks cannot be "
                   f"trusted after that, so no result of it is judged", exit=f"changed {names}")


def _process_state(pid: int) -> str:
    """The state letter of process ``pid`` (``T``: stopped), or "" when gone or unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _gone(pid: int) -> bool:
    """Whether process ``pid`` (the fork server) has died. A process killed a
    moment ago may still be running to its end: one that is not asleep (its
    state while it waits for work) is given 50 ms to show it."""
    for _ in range(25):
        state = _process_state(pid)
        if state in ("", "Z", "X"):
            return True
        if state in ("S", "I"):
            return False
        time.sleep(0.002)
    return False


def _process_table() -> dict[int, tuple[int, int]]:
    """Every live process's (parent pid, process group), from /proc (zombies
    left out; empty where there is no /proc)."""
    table: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()
            if fields[0] not in (b"Z", b"X"):
                table[int(name)] = (int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def _group_members(pgid: int, exclude: int = -1) -> list[int]:
    """The processes of process group ``pgid`` (from /proc; empty where there is none)."""
    return [pid for pid, (_, group) in _process_table().items() if group == pgid and pid != exclude]


def _started_by(worker: int, alive: bool = True) -> list[int]:
    """The live processes ``worker`` started, however far down, in any session
    (the /proc parent links, while it is ``alive``: orphans re-parent to the
    worker, a subreaper), and what is left of its process group; the worker
    itself left out. Once it is dead, its group only (its pid may be reused)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, (_, group) in table.items() if group == worker}
    todo = [worker] if alive else []
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    found.discard(worker)
    return sorted(found)


def _become_subreaper() -> None:
    """Make this process the one that orphans of its descendants re-parent
    to (Linux's ``PR_SET_CHILD_SUBREAPER``), instead of pid 1: a process the
    target starts in a new session, or a double-forked daemon, stays under
    the worker where its parent can find and end it. Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _serve(conn: Any, output: Any, contract_name: str, ref: str, device: str, sys_path: list[str], owner: int,
           env: dict[str, str]) -> None:
    """A worker: say it is up, load the target, then answer requests until the pipe closes.

    It leads a process group of its own and is a subreaper, so that every
    process the target starts (in a new session too) can be found and ended
    with it; its output goes to a pipe the parent keeps a bounded tail of."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    _become_subreaper()
    watch_owner(owner)
    sys.path[:] = sys_path
    os.environ.update(env)
    os.dup2(output.fileno(), 1)
    os.dup2(output.fileno(), 2)
    output.close()
    faulthandler.enable()  # a segfault prints where it happened, to the output the parent keeps
    try:
        import torch

        torch.set_num_threads(1)
    except Exception:  # pragma: no cover - torch is a dependency
        pass
    server = os.getppid()
    conn.send({"up": True})  # batchfuzz's own start ends here; loading the target is the target's
    harness = snapshot_harness()
    try:
        contract = registry.get(contract_name)
        target = parse(ref).load(contract)
        info = {"domain": declared_domain(target), "error": signature_error(contract, target)}
    except (TargetError, KeyError) as exc:
        info, target, contract = {"domain": None, "error": outside(_text(exc))}, None, None
    except Exception as exc:
        info, target, contract = {"domain": None, "error": outside(f"{type(exc).__name__}: {_text(exc)}")}, None, None
    changed = tampering(harness)
    if changed and not info["error"]:
        info["error"] = _tampered(changed).message.replace("the target replaced", "importing the target replaced")
    if device == "cuda" and not info["error"]:
        _warm_device()
    conn.send(info)
    while True:
        try:
            op, prop_name, case, scores = conn.recv()
        except (EOFError, OSError):
            return
        if op == "stop" or target is None or contract is None:
            return
        outcome = evaluate(contract, target, prop_name, case, scores=scores)
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
            outcome = _tampered(changed)
        elif _gone(server):
            outcome = Outcome(CRASH, "KilledForkServer", f"the target ended the process batchfuzz forks its workers from "
                              f"(the fork server, pid {server})", exit="killed the fork server")
        conn.send(outcome)
        if outcome.status == CRASH:  # the context is poisoned, or the process is: the parent starts a fresh worker
            with contextlib.suppress(EOFError, OSError):
                conn.recv()  # once it has ended what the target started (the pipe closes), while they are still ours
            return


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


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "killed"
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class _Tail:
    """The last ``limit`` bytes a worker (and what it started) printed, read
    from a pipe by a thread: memory, not a file, and bounded whatever the
    target prints."""

    def __init__(self, conn: Any, limit: int) -> None:
        import threading

        self.conn, self.limit = conn, limit
        self.buf = bytearray()
        self.total = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, name="batchfuzz-worker-output", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        fd = self.conn.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            with self.lock:
                self.buf += chunk
                self.total += len(chunk)
                if len(self.buf) > self.limit:
                    del self.buf[: len(self.buf) - self.limit]
        with contextlib.suppress(OSError):
            self.conn.close()

    def text(self, since: int = 0) -> str:
        with self.lock:
            n = min(len(self.buf), self.total - since)
            data = bytes(self.buf[len(self.buf) - n:]) if n > 0 else b""
        return printable(data.decode("utf-8", "replace")[-_STDERR_TAIL:].strip())

    def drain(self, timeout_s: float = 1.0) -> None:
        """Wait (a little) for what a dead worker printed last."""
        self.thread.join(timeout_s)


# Bytes of a worker's output kept (the end of it), whatever the target prints.
OUTPUT_TAIL_BYTES = 64 * 1024


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
        self._proc = ctx.Process(target=_serve, args=(child, out_w, self.contract.name, self.ref.spec, self.device,
                                                      list(sys.path), os.getpid(), self.env), daemon=True)
        try:
            with without_main_module():
                self._proc.start()
        except (OSError, EOFError) as exc:  # the fork server is gone (a target killed it): start a fresh one
            from multiprocessing import forkserver

            if ctx.get_start_method() != "forkserver":
                raise
            with contextlib.suppress(Exception):
                forkserver._forkserver._stop()  # type: ignore[attr-defined]
            self._proc = ctx.Process(target=_serve, args=(child, out_w, self.contract.name, self.ref.spec, self.device,
                                                          list(sys.path), os.getpid(), self.env), daemon=True)
            try:
                with without_main_module():
                    self._proc.start()
            except (OSError, EOFError):
                raise TargetError(f"cannot start a worker for {self.name}: {exc}") from None
        child.close()
        out_w.close()
        self._pid = self._proc.pid
        self._tail = _Tail(out_r, OUTPUT_TAIL_BYTES)
        self._conn = parent
        self.started += 1
        try:
            if not parent.poll(START_TIMEOUT_S):
                self._kill()
                raise LoadTimeout(f"the worker for {self.name} did not start within {START_TIMEOUT_S:g}s")
            parent.recv()  # up: what follows is the target's own loading
            self.startup_s += time.perf_counter() - t0
            if not parent.poll(self.load_timeout_s):
                tail = self._tail.text() if self._tail else ""
                self._kill()
                raise LoadTimeout(f"loading {self.name} did not finish within {self.load_timeout_s:g}s (its module hangs "
                                  f"at import, or takes longer than that)" + (f": {tail}" if tail else ""))
            self._info = parent.recv()
        except (EOFError, OSError):
            code = self._reap()
            raise TargetError(f"the worker for {self.name} died while loading the target ({_describe_exit(code)}): "
                              f"{self._tail_text()}") from None

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
        raise TargetError(_tampered(changed).message.replace("the target replaced", "importing the target replaced"))
    return InProcess(contract, target, r.spec, watch=True)


def wrap(contract: registry.Contract, target: Callable[..., Any] | Executor, name: str = "target") -> Executor:
    """An executor for a callable (in-process), or the executor itself."""
    return target if isinstance(target, Executor) else InProcess(contract, target, name)
