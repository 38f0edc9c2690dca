"""The release matrix: every release given x every bound engine function x
its contract, each cell a verdict, for any registered engine
(``batchfuzz engine NAME``; ``batchfuzz vllm`` is its short form for vLLM).
Nothing here knows a particular engine: an engine module
(``batchfuzz.plugins.EngineModule``) gives its ``ReleaseSource``, its
``SPECS`` and ``bindings``; :func:`release_sources` opens the releases asked
for, :func:`selection` checks a ``--function``/``--contract`` selection
against the engine's SPECS, :func:`run_matrix` runs the cells.

A failing cell says what to do next: a ``fail`` carries the reproduction of
its shrunk case (``reproduction``, as ``batchfuzz check`` prints one) and,
like an ``error`` or ``incomplete`` cell, the ready ``batchfuzz check
CONTRACT engine:REF`` line that checks the same binding again
(``check_command``); :func:`next_step` gives the lines the command prints
under the cell's row. ``target`` is the cell's target reference with its
``engine:`` prefix, as ``check`` and ``replay`` take it.

A cell is ``pass`` (every property of the contract ran on the cell's
domain and none failed), ``fail`` (a property failed: the
property, the shrunk counterexample and the seconds it took; an exception
the engine's own lines raise, on the binding's probe input too, fails
``raises``), ``absent``
(the release has no such function), ``unbindable`` (it has it, but its code
no longer fits the binding: the reason names what did not fit),
``not-split`` (a row of the split search that is not a token split: no
finding), ``error`` (binding or running it failed: the reason) or
``incomplete`` (the cell's budget ended before every property ran).
``assumed`` lists the configuration values the binding gave the engine.
Every call of the engine's code runs in a worker process: binding a
release (``_binder``: loading the cut-outs and their bind-time probe, with
the per-call timeout) and each cell's examples (``batchfuzz.execution``,
through its ``engine:`` target reference), so a release whose code crashes
or hangs costs only its cell. :func:`run_matrix` runs ``jobs`` cells at a
time and reports them in order (docs/bindings.md, "Cells side by side").

A cell's domain is the binding's, ``engine``, unless the matrix is given a
step source (``--steps engine|model``, :data:`engine_steps.STEP_SOURCES`):
then a cell whose contract is over scheduled steps and has a domain fed by
that source (contract D's ``split_ubatches``, contract E's
``allow_microbatching`` and ``find_conflicts`` with ``--steps engine``) runs
on that domain (``engine_steps.steps_domain``, the one rule), and any other
cell stays on ``engine`` with a ``steps_note`` saying its contract has no
such domain (:func:`cell_domain`). ``steps`` says, per cell, which source
its steps came from.
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
import os
import queue
import re
import shlex
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from hypothesis import settings

from batchfuzz import engine_steps, profiles, registry, reproduce, runner
from batchfuzz.case import Case
from batchfuzz.codec import encode_case, literal
from batchfuzz.engines import Bound, ReleaseSource, fetch_wheel, split_search
from batchfuzz.execution import PSEUDO_PROPERTIES, LoadTimeout, executor_for
from batchfuzz.reproduce import reproduction
from batchfuzz.targets import parse

VERDICTS = ("pass", "fail", "absent", "unbindable", "not-split", "incomplete", "error")


@dataclass
class Cell:
    """One row of the matrix (the JSON ``rows`` entries)."""

    release: str
    function: str
    contract: str
    domain: str
    verdict: str
    property: str | None = None
    label: str = ""  # fail: the failing property's label (registry.SAFETY or registry.CHOICE)
    counterexample: dict[str, Any] | None = None
    message: str = ""
    reason: str = ""
    examples: int = 0
    seconds: float = 0.0
    target: str = ""  # engine:ENGINE::SOURCE::FUNCTION::CONTRACT for a bound function, else ""
    properties: dict[str, int] = field(default_factory=dict)  # property -> examples run
    check_command: str = ""  # fail, error, incomplete: the batchfuzz check line for this binding
    reproduction: str = ""  # fail: the copy-paste reproduction of the counterexample
    steps: str = ""  # where the cell's scheduled steps came from ("engine", "model"); "" for a contract without steps
    steps_note: str = ""  # the step source asked for is not one of the contract's: why (the cell ran on `domain`)
    assumed: list[str] = field(default_factory=list)  # configuration the binding gave the engine, NAME=VALUE

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_steps(steps: str | None) -> None:
    """ValueError, naming ``--steps`` and the value or the reason, where step
    source ``steps`` cannot feed a matrix here: not one of
    ``engine_steps.STEP_SOURCES``, or ``engine`` without an importable vLLM
    scheduler (``vllm_scheduler.import_error``)."""
    if steps is None:
        return
    if steps not in engine_steps.STEP_SOURCES:
        raise ValueError(f"--steps must be one of {', '.join(map(repr, engine_steps.STEP_SOURCES))}, got {steps!r}")
    if steps == "engine":
        from batchfuzz import vllm_scheduler

        why = vllm_scheduler.import_error()
        if why is not None:
            raise ValueError(f"--steps engine: {why}")


def cell_domain(contract: str, steps: str | None, default: str = "engine") -> tuple[str, str, str]:
    """A cell's ``(domain, step source, note)`` for its contract: with
    ``steps`` given (checked by :func:`check_steps`), the domain that source
    feeds (``engine_steps.steps_domain``); where the contract has none,
    ``default`` and a note saying so. Without ``steps``, ``default``; its
    source is ``model`` where the model's steps feed it (contract E's
    ``engine`` domain), else ``""``. ValueError as :func:`check_steps` says."""
    check_steps(steps)
    try:
        c = registry.get(contract)
    except KeyError:  # not a registered contract: its cell says so when it runs
        return default, "", ""
    try:
        domain = engine_steps.steps_domain(c, steps or "model")
    except ValueError as exc:
        return default, "", f"{exc}: the cell ran on its {default} domain" if steps else ""
    if steps is None:
        return default, "model" if domain == default else "", ""
    return domain, steps, ""


def steps_phrase(steps: str | None) -> str:
    """Where a matrix's cells take their inputs, for its header line."""
    if steps is None:
        return "engine domain"
    source = "vLLM's scheduler" if steps == "engine" else "batchfuzz's scheduler model"
    return f"--steps {steps} (steps from {source} where a contract has them, else the engine domain)"


def _warm_engine_steps() -> None:
    """vLLM's scheduler imported and its first configuration built (the model
    inspection, cached per machine), before a cell's budget starts."""
    engine_steps.engine_step(engine_steps.sample_workload(0))


def run_cell(bound: Bound, *, budget_s: float, timeout_s: float, seed: int, isolate: bool = True,
             domain: str = "engine", max_examples: int | None = None, steps: str | None = None) -> Cell:
    """The verdict of one binding: all the contract's properties, round robin
    (``runner.hunt_in_rounds``) within ``budget_s``, stopping at the first failure.
    With ``max_examples``, one round of that many examples per property
    (``budget_s`` then only a ceiling): a verdict that depends on counts,
    not on the machine's speed. ``steps`` (``model``, ``engine``): the step
    source, for a contract that has it (:func:`cell_domain`), else ``domain``."""
    release = bound.release.split(" ", 1)[-1]
    cell_dom, source, note = cell_domain(bound.contract, steps, domain)
    cell = Cell(release=release, function=bound.function, contract=bound.contract, domain=cell_dom,
                verdict=bound.status if bound.status != "bound" else "pass", reason=bound.reason,
                target=f"engine:{bound.ref}" if bound.ref else "", steps=source, steps_note=note,
                assumed=list(bound.assumed))
    if bound.status != "bound":
        return cell
    cell = _run_bound(cell, bound, budget_s=budget_s, timeout_s=timeout_s, seed=seed, isolate=isolate, domain=cell_dom,
                      max_examples=max_examples)
    if cell.verdict == "pass" and bound.probe_raised and bound.probe_args:
        cell = _check_probe(cell, bound, timeout_s=timeout_s, isolate=isolate, domain=cell_dom)
    if cell.verdict in ("fail", "error", "incomplete"):
        cell.check_command = check_command(cell, seed, steps)
    return cell


def check_command(cell: Cell, seed: int, steps: str | None = None) -> str:
    """The ``batchfuzz check`` line that checks a cell's binding again: its
    contract, its ``engine:`` target, its domain (``--steps SOURCE`` where
    the matrix's step source ``steps`` fed the cell), the failing property
    (for a ``fail``) and the matrix's seed."""
    q = shlex.quote
    where = f"--steps {q(cell.steps)}" if steps is not None and cell.steps == steps else f"--domain {q(cell.domain)}"
    line = f"batchfuzz check {q(cell.contract)} {q(cell.target)} {where}"
    if cell.verdict == "fail" and cell.property:
        line += f" --property {q(cell.property)}"
    return f"{line} --seed {seed}"


def next_step(cell: Cell) -> list[str]:
    """What to do about a cell, as lines printed under its row: a ``fail``'s
    reproduction and the check line; an ``error`` or ``incomplete`` cell's
    check line; nothing for the others (an ``absent`` or ``unbindable`` cell
    has no code to run: its reason says why)."""
    lines = []
    if cell.reproduction:
        lines += [reproduce.HEADER, *cell.reproduction.splitlines()]
    if cell.check_command:
        lines.append(f"--- check it again: {cell.check_command}")
    return lines


def _run_bound(cell: Cell, bound: Bound, *, budget_s: float, timeout_s: float, seed: int, isolate: bool, domain: str,
               max_examples: int | None) -> Cell:
    contract = registry.get(bound.contract)
    started = time.time()
    base = settings(settings.get_profile("dev"), derandomize=False, database=None)
    try:
        with executor_for(contract, parse(cell.target), isolate=isolate) as executor:
            info = executor.describe()
            if info.get("error"):
                cell.verdict, cell.reason = "error", str(info["error"])
                return cell
            results = runner.hunt_in_rounds(contract, executor, _safety_first(contract), runner.HuntOptions(
                base, seed=seed, domain=domain, example_timeout_s=timeout_s), runner.Rounds(
                budget_s=budget_s, round_examples=max_examples, max_rounds=None if max_examples is None else 1),
                target_name=cell.target)
    except LoadTimeout as exc:  # a slow cell (its release's bindings took too long to load): not run, not broken
        cell.verdict, cell.reason = "incomplete", f"the cell did not start: {exc}"
        cell.seconds = round(time.time() - started, 2)
        return cell
    except Exception as exc:  # the harness could not run the cell: said, never a pass
        cell.verdict, cell.reason = "error", f"{type(exc).__name__}: {exc}"
        cell.seconds = round(time.time() - started, 2)
        return cell
    cell.seconds = round(time.time() - started, 2)
    cell.properties = {r.property: r.examples for r in results}
    cell.examples = sum(r.examples for r in results)
    failure = next((r.failure for r in results if r.failure is not None), None)
    if failure is not None:
        _record_failure(cell, failure)
    elif any(r.examples == 0 for r in results):
        cell.verdict = "incomplete"
        cell.reason = (f"the cell's budget of {budget_s:g}s ended before " + ", ".join(r.property for r in results if
                       r.examples == 0) + f" ran ({cell.examples} examples in {cell.seconds:g}s: a slow cell)")
    return cell


def _safety_first(contract: registry.Contract) -> tuple[registry.Property, ...]:
    """The contract's properties, safety before documented choice: a cell
    then fails on a choice only when no safety property failed."""
    return tuple(sorted(contract.properties, key=lambda p: p.label != registry.SAFETY))


def _record_failure(cell: Cell, failure: runner.Failure) -> None:
    cell.verdict, cell.property = "fail", failure.property
    cell.label = registry.get(cell.contract).property_label(failure.property)
    cell.message = failure.message.splitlines()[0] if failure.message else failure.error_type
    cell.counterexample = {"args": {k: literal(v) for k, v in failure.case.args.items()},
                           "context": {k: literal(v) for k, v in failure.case.context.items()},
                           "case": encode_case(failure.case)}
    try:
        cell.reproduction = reproduction(failure, cell.target)
    except Exception as exc:  # the check line still leads to it
        cell.reproduction = f"# no reproduction could be written: {type(exc).__name__}: {exc}"


def _check_probe(cell: Cell, bound: Bound, *, timeout_s: float, isolate: bool, domain: str) -> Cell:
    """A cell whose search passed, but whose binding's probe input made the
    engine's own lines raise (or end the process binding it): that input,
    checked as an explicit example of the contract's first property, in the
    cell's own worker; a ``raises`` (``crash``, ``timeout``) failure there is
    the cell's counterexample, reduced and reproduced like any other."""
    from hypothesis import Phase

    contract = registry.get(bound.contract)
    if len(bound.probe_args) != len(contract.arguments):
        return cell
    case = Case(dict(zip(contract.arguments, bound.probe_args, strict=True)))
    started = time.time()
    try:
        with executor_for(contract, parse(cell.target), isolate=isolate) as executor:
            r = runner.hunt(contract, executor, contract.properties[0], runner.HuntOptions(
                settings(phases=[Phase.explicit], database=None, deadline=None), domain=domain,
                example_timeout_s=timeout_s, extra_examples=(case,)), target_name=cell.target)
    except Exception as exc:  # the harness could not run it: said, never a pass
        cell.verdict, cell.reason = "error", f"checking the probe input: {type(exc).__name__}: {exc}"
        return cell
    cell.seconds = round(cell.seconds + time.time() - started, 2)
    cell.examples += r.examples
    # Only what the engine did counts here: the probe input has no context, which a property may read.
    if r.failure is not None and r.failure.property in PSEUDO_PROPERTIES:
        _record_failure(cell, r.failure)
    else:
        cell.reason = f"at bind time the probe input gave {bound.probe_raised}; checked again in the cell's worker, it did not"
    return cell


@dataclass(frozen=True)
class CellRun:
    """How every cell of a matrix runs: :func:`run_cell`'s options, the same for each cell."""

    budget_s: float
    timeout_s: float
    seed: int
    isolate: bool = True
    max_examples: int | None = None
    steps: str | None = None

    def cell(self, bound: Bound) -> Cell:
        return run_cell(bound, budget_s=self.budget_s, timeout_s=self.timeout_s, seed=self.seed, isolate=self.isolate,
                        max_examples=self.max_examples, steps=self.steps)


class MatrixEvents(Protocol):
    """What a matrix reports as it goes (a command's progress): ``binding``
    and ``bound`` bracket a release's bindings, ``start`` is a cell's start,
    ``cell`` its verdict. ``bound`` and ``cell`` come in the matrix's order
    whatever order the cells finish in."""

    def binding(self, release: str) -> None: ...

    def bound(self, release: str, rows: list[Bound], seconds: float) -> None: ...

    def start(self, bound: Bound) -> None: ...

    def cell(self, cell: Cell) -> None: ...


class _Unheard:
    """A matrix nobody follows as it goes."""

    def binding(self, release: str) -> None:
        pass

    def bound(self, release: str, rows: list[Bound], seconds: float) -> None:
        pass

    def start(self, bound: Bound) -> None:
        pass

    def cell(self, cell: Cell) -> None:
        pass


def cells_at_once(jobs: int, run: CellRun) -> tuple[int, str]:
    """How many cells run side by side for ``--jobs jobs``, and why fewer:
    only isolated cells do (an in-process target's timeout is a signal, which
    only the main thread gets), and not on vLLM's scheduler (``--steps
    engine``: one per process, not made to be shared by threads)."""
    if jobs > 1 and not run.isolate:
        return 1, "--no-isolation runs each cell's examples in this process"
    if jobs > 1 and run.steps == "engine":
        return 1, "--steps engine draws every cell's steps from the one vLLM scheduler here"
    return jobs, ""


def run_matrix(releases: Iterable[tuple[str, Callable[[], list[Bound]]]], run: CellRun, *,
               keep: Callable[[Bound], bool] = lambda b: True, events: MatrixEvents | None = None, jobs: int = 1
               ) -> list[Cell]:
    """Every cell of every release: ``releases`` is ``(name, bindings)`` pairs,
    ``bindings()`` giving the release's :class:`Bound` list (:func:`engine_releases`).
    ``jobs`` cells at a time (:func:`cells_at_once`; each on a thread, its
    examples in its own worker as ever), the next release bound while the
    cells before it run; the cells come back, and ``events`` hears of them,
    in the same order as with one.
    ValueError as :func:`check_steps` says about ``run.steps``. vLLM's scheduler
    starts before the first cell on its steps, outside that cell's budget."""
    check_steps(run.steps)
    profiles.register_profiles()
    events = events or _Unheard()
    if cells_at_once(jobs, run)[0] > 1:
        return _SideBySide(run, keep, events, jobs).cells(list(releases))
    cells: list[Cell] = []
    warm = run.steps != "engine"
    for name, bindings in releases:
        events.binding(name)
        started = time.time()
        rows = bindings()
        events.bound(name, rows, time.time() - started)
        for b in filter(keep, rows):
            events.start(b)
            if not warm and b.status == "bound" and cell_domain(b.contract, run.steps)[1] == "engine":
                _warm_engine_steps()
                warm = True
            cells.append(run.cell(b))
            events.cell(cells[-1])
    return cells


# ---------------------------------------------------------------- cells side by side


@dataclass
class _Released:
    """A release's bindings, made (an entry of the matrix's report)."""

    name: str
    rows: list[Bound]
    seconds: float


class _InOrder:
    """The matrix's report in its fixed order: entries (a release bound, a
    cell's verdict) are reserved in that order, filled as they finish, and
    reported once every entry before them has been."""

    def __init__(self, events: MatrixEvents) -> None:
        self.events = events
        self.entries: list[Cell | _Released | None] = []
        self.reported = 0
        self.cells: list[Cell] = []

    def reserve(self) -> int:
        self.entries.append(None)
        return len(self.entries) - 1

    def fill(self, slot: int, entry: Cell | _Released) -> None:
        self.entries[slot] = entry
        while self.reported < len(self.entries) and (ready := self.entries[self.reported]) is not None:
            self.reported += 1
            if isinstance(ready, Cell):
                self.cells.append(ready)
                self.events.cell(ready)
            else:
                self.events.binding(ready.name)
                self.events.bound(ready.name, ready.rows, ready.seconds)


class _Binding:
    """A release's bindings made in a thread, while the cells before it run
    (the thread mostly waits: the binding runs in a worker process, or reads
    a wheel)."""

    def __init__(self, name: str, bindings: Callable[[], list[Bound]]) -> None:
        self.name, self.bindings = name, bindings
        self.rows: list[Bound] = []
        self.error: BaseException | None = None
        self.seconds = 0.0
        self.done = threading.Event()
        threading.Thread(target=self._bind, name="batchfuzz-binding", daemon=True).start()

    def _bind(self) -> None:
        started = time.time()
        try:
            self.rows = self.bindings()
        except BaseException as exc:  # raised where the rows are taken, as without the thread
            self.error = exc
        self.seconds = time.time() - started
        self.done.set()

    def released(self) -> _Released:
        if self.error is not None:
            raise self.error
        return _Released(self.name, self.rows, self.seconds)


class _CellThreads:
    """At most ``jobs`` cells at a time, each on a thread of this process:
    its examples run in its own isolated worker process as ever, so the
    thread mostly waits on that worker while this process draws the next
    examples (Hypothesis runs one test per thread). A thread is a daemon: on
    Ctrl-C the command ends at once, and its workers with it (a daemonic
    child ended as the interpreter exits, and ``watch_owner``)."""

    WAIT_S = 0.2  # how often the matrix looks at the cells and the next release's binding

    def __init__(self, run: CellRun, jobs: int) -> None:
        self.run, self.jobs = run, jobs
        self.running = 0
        self.done: queue.SimpleQueue[tuple[int, Cell]] = queue.SimpleQueue()

    def free(self) -> bool:
        return self.running < self.jobs

    def start(self, slot: int, bound: Bound) -> None:
        threading.Thread(target=self._cell, args=(slot, bound), name=f"batchfuzz-cell-{slot}", daemon=True).start()
        self.running += 1

    def _cell(self, slot: int, bound: Bound) -> None:
        try:
            cell = self.run.cell(bound)
        except Exception as exc:  # the harness could not run the cell: said, never a pass
            why = f"running the cell: {type(exc).__name__}: {exc}"
            cell = self.run.cell(replace(bound, status="error", target=None, reason=why))
            cell.check_command = check_command(cell, self.run.seed, self.run.steps)
        self.done.put((slot, cell))

    def finished(self) -> list[tuple[int, Cell]]:
        """The cells that ended within ``WAIT_S``, with their slots."""
        out = []
        try:
            out.append(self.done.get(timeout=self.WAIT_S))
            while True:
                out.append(self.done.get_nowait())
        except queue.Empty:
            pass
        self.running -= len(out)
        return out


class _SideBySide:
    """:func:`run_matrix` with cells run ``jobs`` at a time and the next
    release bound while the cells before it run, reported in order."""

    def __init__(self, run: CellRun, keep: Callable[[Bound], bool], events: MatrixEvents, jobs: int) -> None:
        self.run, self.keep, self.events = run, keep, events
        self.report = _InOrder(events)
        self.threads = _CellThreads(run, jobs)
        self.queue: deque[tuple[int, Bound]] = deque()

    def cells(self, releases: list[tuple[str, Callable[[], list[Bound]]]]) -> list[Cell]:
        pending = deque(releases)
        binding = _Binding(*pending.popleft()) if pending else None
        while binding is not None or self.queue or self.threads.running:
            if binding is not None and binding.done.is_set():
                self._enqueue(binding.released())
                binding = _Binding(*pending.popleft()) if pending else None
            while self.queue and self.threads.free():
                slot, bound = self.queue.popleft()
                self.events.start(bound)
                self.threads.start(slot, bound)
            for slot, cell in self.threads.finished():
                self.report.fill(slot, cell)
        return self.report.cells

    def _enqueue(self, release: _Released) -> None:
        """A release's entry and its cells' slots; a cell with nothing to run has its verdict at once."""
        self.report.fill(self.report.reserve(), release)
        for b in filter(self.keep, release.rows):
            slot = self.report.reserve()
            if b.status == "bound":
                self.queue.append((slot, b))
            else:
                self.report.fill(slot, self.run.cell(b))


# ---------------------------------------------------------------- an engine's releases and selection


def release_sources(engine: Any, *, releases: Sequence[str] = (), wheels: Sequence[str] = (), dirs: Sequence[str] = (),
                    installed: bool = False, say: Callable[[str], None] | None = None) -> list[ReleaseSource]:
    """The releases of ``engine`` (an engine module) asked for, in this order:
    each version of ``releases`` (its wheel fetched into the cache,
    ``batchfuzz.engines.fetch_wheel``), each wheel file, each source checkout,
    and the installed distribution; ``say`` hears of each download
    (``fetch_wheel``). Raises SourceError (or ValueError for a
    malformed version) naming the release that cannot be opened, ValueError
    when none is asked for."""
    kind: type[ReleaseSource] = engine.ReleaseSource
    sources = [kind.from_wheel(fetch_wheel(kind.distribution, version, say=say)) for version in releases]
    sources += [kind.from_wheel(w) for w in wheels]
    sources += [kind.from_dir(d) for d in dirs]
    if installed:
        sources.append(kind.installed())
    if not sources:
        raise ValueError("give at least one release: --wheel FILE, --source DIR, --installed, --release VERSION or --all-releases")
    return sources


def engine_releases(engine: Any, sources: Sequence[ReleaseSource], search: bool = True, *, isolate: bool = False,
                    timeout_s: float = 10.0) -> list[tuple[str, Callable[[], list[Bound]]]]:
    """``run_matrix``'s ``releases`` for ``engine``: each source's version and
    its bindings. ``search`` False leaves out the rows of the split search
    (``split_search``) for an engine whose ``bindings`` takes ``search``.
    ``isolate``: the bindings are made in worker processes (``_binder``; the
    engine's code runs there, each probe within ``timeout_s``), else here."""
    if isolate:
        from batchfuzz.engines import _binder

        return [(s.version, functools.partial(_binder.isolated_bindings, engine, s, search=search, timeout_s=timeout_s))
                for s in sources]
    takes_search = "search" in inspect.signature(engine.bindings).parameters
    extra = {"search": search} if takes_search else {}
    return [(s.version, functools.partial(engine.bindings, s, **extra)) for s in sources]


def searched(functions: Sequence[str] | None = None, contracts: Sequence[str] | None = None) -> bool:
    """Whether a selection can keep a copy of the split found by the search
    (``PATH:QUALNAME#COUNTS=TOKENS/REQUESTS``, contract A): the search is
    then worth running."""
    return ((not contracts or split_search.CONTRACT in contracts)
            and (not functions or any("#" in p for p in functions)))


def _matches(function: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(function, pattern) or fnmatch.fnmatchcase(function, f"*{pattern}")


def selection(engine: Any, functions: Sequence[str] | None = None, contracts: Sequence[str] | None = None
              ) -> Callable[[Bound], bool]:
    """Which bindings of ``engine`` to run: those whose function matches one
    of the ``functions`` globs (a glob may leave out the path:
    ``'*_allow_microbatching'``) and whose contract is one of ``contracts``
    (names or section letters, ``registry.select``; None: all). Raises
    LookupError naming a contract that is not registered
    (the engine's SPECS included) or a glob that matches no bound function."""
    known = {c.name for c in registry.contracts()}
    unknown_specs = sorted({s.contract for s in engine.SPECS} - known)
    if unknown_specs:
        raise LookupError(f"engine {engine.ENGINE!r} binds to contract(s) {', '.join(unknown_specs)}, which are not registered; "
                          f"known: {', '.join(sorted(known))}")
    try:
        chosen = {c.name for c in registry.select(contracts)} if contracts else known
    except registry.UnknownName as exc:
        raise registry.UnknownName(f"--contract: {exc}") from None
    bound = [s.function for s in engine.SPECS]
    for pat in functions or ():
        # A glob holding "#" names copies of the split the search finds (their rows are known only once it has run).
        if "#" not in pat and not any(_matches(f, pat) for f in bound):
            raise LookupError(f"--function {pat!r} matches no bound function; known: {', '.join(dict.fromkeys(bound))}; "
                              "copies of the split found by the search are named PATH:QUALNAME#COUNTS=TOKENS/REQUESTS")

    def keep(b: Bound) -> bool:
        return ((not functions or any(_matches(b.function, p) for p in functions))
                and b.contract in chosen)

    return keep


def new_seed() -> int:
    """A random seed for a run that was given none (printed, so it can be repeated)."""
    return int.from_bytes(os.urandom(4), "little")


def short_function(function: str, among: Iterable[str] = ()) -> str:
    """``function`` (``path:qualname``) with the shortest tail of its path
    (its file name, or more folders) that no other function of ``among``
    with the same qualname shares: two releases' layouts of one module
    (``a/mod.py`` and ``a/b/mod.py``) stay apart in a table."""
    path, _, qual = function.partition(":")
    parts = path.split("/")
    others = {p for p, _, q in (f.partition(":") for f in among) if q == qual and p != path}
    for k in range(1, len(parts) + 1):
        tail = "/".join(parts[-k:])
        if not any(o == tail or o.endswith("/" + tail) for o in others):
            return f"{tail}:{qual}"
    return function


_ARRAY = re.compile(r"np\.array\((\[[^()]*?\]), dtype=np\.\w+\)")


def compact_args(counterexample: dict[str, Any], limit: int = 60) -> str:
    """A counterexample's arguments for a table cell: arrays as lists, and a
    long value (an engine object) by its type only (the JSON has it whole)."""
    parts = []
    for k, v in counterexample["args"].items():
        v = _ARRAY.sub(r"\1", v)
        if len(v) > limit and "(" in v:
            v = v.split("(", 1)[0] + "(...)"
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def _detail(cell: Cell) -> str:
    assumed = f" [assumed {', '.join(cell.assumed)}]" if cell.assumed else ""
    if cell.verdict == "fail" and cell.counterexample:
        return f"{cell.property}{_label(cell)}: {compact_args(cell.counterexample)}{assumed}"
    if cell.verdict in ("absent", "unbindable", "not-split", "incomplete", "error"):
        return (cell.reason.splitlines()[0][:160] if cell.reason else "") + assumed
    return f"{cell.examples} examples{assumed}"


def _label(cell: Cell) -> str:
    return f" [{cell.label}]" if cell.label else ""


def _steps_column(cell: Cell) -> str:
    return cell.steps or ("none" if cell.steps_note else "-")


def to_text(cells: list[Cell], among: Iterable[str] = ()) -> str:
    """A plain table: one line per cell (functions named as ``short_function``
    names them among the cells' functions and ``among``); its ``steps``
    column is the cell's step source, ``-`` for a contract without one,
    ``none`` where the source asked for is not the contract's (the cell ran
    on its engine domain)."""
    lines = [f"{'release':9} {'function':52} {'contract':22} {'steps':6} {'verdict':10} {'seconds':>7}  detail"]
    names = [*among, *(c.function for c in cells)]
    for c in cells:
        lines.append(f"{c.release:9} {short_function(c.function, names):52} {c.contract:22} {_steps_column(c):6} "
                     f"{c.verdict:10} {c.seconds:7.1f}  {_detail(c)}")
    return "\n".join(lines)


def _verdict_with_why(cell: Cell) -> str:
    """An absent cell with the short clause its reason starts with (``absent (not defined in this release)``), when
    the engine module gives one (under 40 characters, before the first ': '); any other cell its verdict."""
    why = cell.reason.split(": ", 1)[0] if cell.verdict == "absent" and ": " in cell.reason else ""
    return f"absent ({why})" if why and len(why) < 40 else cell.verdict


def to_markdown(cells: list[Cell]) -> str:
    """The matrix as a Markdown table: a row per (function, contract), a column per release."""
    releases = list(dict.fromkeys(c.release for c in cells))
    rows = list(dict.fromkeys((c.function, c.contract) for c in cells))
    by_key = {(c.function, c.contract, c.release): c for c in cells}
    out = ["| function | contract | " + " | ".join(releases) + " |", "|---|---|" + "---|" * len(releases)]
    for function, contract in rows:
        cols = []
        for rel in releases:
            c = by_key.get((function, contract, rel))
            if c is None:
                cols.append("")
            elif c.verdict == "fail" and c.counterexample:
                cols.append(f"**fail** `{c.property}`{_label(c)} `{compact_args(c.counterexample)}`".replace("|", "\\|"))
            else:
                cols.append(_verdict_with_why(c))
        out.append(f"| `{short_function(function, (f for f, _ in rows))}` | {contract} | " + " | ".join(cols) + " |")
    return "\n".join(out) + "\n"


def exit_code(cells: list[Cell]) -> int:
    """0 every cell that could be checked passed (absent and not-split rows
    are no finding); 1 a counterexample (a ``fail``); 4 (``UNCHECKED``) no
    counterexample, but a cell could not be checked (``unbindable``, or an
    ``error`` binding or running it: news about the bindings or the harness);
    3 a cell incomplete and nothing else to report."""
    from batchfuzz.usage import ExitCode

    verdicts = {c.verdict for c in cells}
    if "fail" in verdicts:
        return ExitCode.COUNTEREXAMPLE
    if verdicts & {"unbindable", "error"}:
        return ExitCode.UNCHECKED
    if "incomplete" in verdicts:
        return ExitCode.INCOMPLETE
    return ExitCode.OK
