"""The fuzz job's controller: plans the work items of a :class:`FuzzRequest`,
starts the job processes (:mod:`batchfuzz.fuzz.job`), hands them time slices
round robin until the budget ends, and writes the reports.

``batchfuzz fuzz`` builds the request and calls :func:`run`; :func:`exit_code`
maps the :class:`End` to the exit code. How slices are sized and handed out,
what start-up is not charged to the budget, the exit codes and the reports:
docs/nightly.md ("How a run works").
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import math
import os
import signal
import statistics
import sys
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from batchfuzz import engine_steps, live_engine, profiles, registry, reproduce, runner
from batchfuzz.fuzz import corpus
from batchfuzz.fuzz.job import (
    EXECUTOR_CACHE,
    FINAL,
    IDLE,
    READY,
    RUNNING,
    WAITING,
    ItemState,
    Job,
    WorkItem,
    job_process_main,
    new_state,
    read_state,
    read_states,
    write_state,
)
from batchfuzz.fuzz.request import FuzzRequest
from batchfuzz.fuzz.settings import (
    DEFAULT_BUDGET_S,
    GRACE_S,
    MAX_SLICE_S,
    MIN_SLICE_S,
    SHRINK_MIN_S,
    SHRINK_SHARE,
    STARTUP_S,
    TARGET_ROUNDS,
)
from batchfuzz.targets import TargetError, parse
from batchfuzz.usage import PENDING_SIGNALS, ExitCode, UsageError, refuse_system_dir, writable_dir

_RANDOM_PROFILES = ("dev", "nightly")


# --------------------------------------------------------------------------- work items


def _match(name: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(name == p or fnmatch.fnmatchcase(name, p) for p in patterns)


def conformance_planned(request: FuzzRequest) -> tuple[bool, str | None]:
    """Whether the run has the conformance item (the scheduler model against
    vLLM's scheduler, ``engine_steps.conformance_search``): under the nightly
    profile, unless a filter leaves it out or vLLM's scheduler cannot be
    imported; and, in that last case, the note saying why it is skipped."""
    if request.profile != "nightly":
        return False, None
    for patterns, name in ((request.contracts, engine_steps.CONFORMANCE_SUBJECT),
                           (request.impls, engine_steps.CONFORMANCE_AGAINST),
                           (request.properties, engine_steps.CONFORMANCE)):
        if patterns and not _match(name, patterns):
            return False, None
    from batchfuzz import vllm_scheduler

    why = vllm_scheduler.import_error()
    if why is not None:
        return False, f"skipped: {engine_steps.CONFORMANCE_SUBJECT}/{engine_steps.CONFORMANCE_AGAINST}/{engine_steps.CONFORMANCE} ({why})"
    return True, None


@dataclass(frozen=True)
class _Pair:
    """A contract and a target of the plan, with the domain its items draw from (None: the target's declared one)."""

    contract: registry.Contract
    target: str
    domain: str | None


def plan(request: FuzzRequest) -> list[WorkItem]:
    """The run's work items, numbered in plan order: the user's targets first,
    then every implementation in section order, then the items outside the
    contracts (:func:`_extra_items`); raises UsageError on a bad filter or target."""
    every, extra = registry.contracts(), _extra_items(request)  # the registry, looked up once
    contracts = _selected_contracts(request, every, extra)
    pairs = _filter_impls(request, _user_pairs(request, every, contracts) + _impl_pairs(request, contracts), extra)
    items = [WorkItem(0, p.contract.name, p.target, request.device, prop.name, p.domain)
             for p in pairs for prop in p.contract.properties] + extra
    items = _filter_properties(request, items)
    if request.shard is not None:
        from batchfuzz.fuzz.shards import select

        items = select(items, lambda i: i.shard_key, *request.shard)
    if not items and request.shard is None:
        raise UsageError(f"nothing to fuzz on device {request.device!r} with these filters")
    return [dataclasses.replace(i, index=k) for k, i in enumerate(items)]


def _live_planned(request: FuzzRequest) -> tuple[list[str], str | None]:
    """The live engine's properties this run fuzzes, or the note saying why none (``live_engine.planned``)."""
    return live_engine.planned(request.profile, request.contracts, request.impls, request.properties, request.device)


def _extra_items(request: FuzzRequest) -> list[WorkItem]:
    """The work items that are no contract's: the nightly conformance item
    (:func:`conformance_planned`) and the live engine's (:func:`_live_planned`)."""
    items = []
    if conformance_planned(request)[0]:
        items.append(WorkItem(0, engine_steps.CONFORMANCE_SUBJECT, engine_steps.CONFORMANCE_AGAINST, "cpu",
                              engine_steps.CONFORMANCE))
    items += [WorkItem(0, live_engine.SUBJECT, live_engine.AGAINST, "cpu", p) for p in _live_planned(request)[0]]
    return items


def _selected_contracts(request: FuzzRequest, every: list[registry.Contract],
                        extra: list[WorkItem]) -> list[registry.Contract]:
    """The contracts ``--contract`` selects of ``every`` (all without it); a
    pattern matching nothing, not even an extra item, is a usage error."""
    if not request.contracts:
        return every
    names = [c.name for c in every]
    for pat in request.contracts:
        if any(_match(n, [pat]) for n in names) or any(_match(i.contract, [pat]) for i in extra):
            continue
        skipped = conformance_planned(request)[1]
        if skipped and _match(engine_steps.CONFORMANCE_SUBJECT, [pat]):
            raise UsageError(f"--contract {pat!r} matches only the conformance item, and it is {skipped}")
        live_skipped = _live_planned(request)[1]
        if live_skipped and pat == live_engine.SUBJECT:
            raise UsageError(f"--contract {pat!r} names the live engine, and it is {live_skipped}")
        raise UsageError(f"--contract {pat!r} matches no contract; known: {', '.join(names)}")
    return [c for c in every if _match(c.name, request.contracts)]


def _steps_domains(request: FuzzRequest, contracts: list[registry.Contract]) -> dict[str, str | None]:
    """``--steps SOURCE``: every item of a contract draws from the domain that source feeds (engine_steps.steps_domain)."""
    if request.steps is None:
        return {c.name: None for c in contracts}
    try:
        return {c.name: engine_steps.steps_domain(c, request.steps, request.domain) for c in contracts}
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _user_pairs(request: FuzzRequest, every: list[registry.Contract], contracts: list[registry.Contract]) -> list[_Pair]:
    """The ``--target`` functions (what the user runs the job for), checked against the selected contracts."""
    by_name = {c.name: c for c in contracts}
    fed = _steps_domains(request, contracts)
    names = [c.name for c in every]
    pairs = []
    for cname, spec in request.targets:
        if cname not in names:
            raise UsageError(f"--target {cname}={spec}: unknown contract {cname!r}; known: {', '.join(names)}")
        if cname not in by_name:
            raise UsageError(f"--target {cname}={spec}: contract {cname!r} is not selected by --contract")
        if request.domain is not None:
            try:
                by_name[cname].domain(request.domain)
            except KeyError as exc:
                raise UsageError(f"--domain: {exc}") from None
        try:
            ref = parse(spec)
        except TargetError as exc:
            raise UsageError(f"--target {cname}={spec}: {exc}") from None
        pairs.append(_Pair(by_name[cname], ref.spec, fed[cname] or request.domain))
    return pairs


def _impl_pairs(request: FuzzRequest, contracts: list[registry.Contract]) -> list[_Pair]:
    """Every registered implementation of the selected contracts on the request's device, in section order."""
    fed = _steps_domains(request, contracts)
    return [_Pair(c, f"impl:{impl.name}@{request.device}", fed[c.name])
            for c in contracts for impl in c.implementations if request.device in impl.devices]


def _filter_impls(request: FuzzRequest, pairs: list[_Pair], extra: list[WorkItem]) -> list[_Pair]:
    """``--impl``: the pairs whose target matches; a pattern matching nothing, or a
    ``--target`` it leaves out, is a usage error."""
    if not request.impls:
        return pairs
    for pat in request.impls:
        if not any(_match(p.target, [pat]) for p in pairs) and not any(_match(i.target, [pat]) for i in extra):
            known = sorted({p.target for p in pairs})
            raise UsageError(f"--impl {pat!r} matches no target on {request.device}; known: {', '.join(known)}")
    dropped = [f"{p.contract.name}={p.target}" for p in pairs[:len(request.targets)] if not _match(p.target, request.impls)]
    if dropped:
        raise UsageError(f"--target {', '.join(dropped)}: excluded by --impl {' '.join(request.impls)} (a target named with "
                         f"--target must match an --impl pattern when --impl is given)")
    return [p for p in pairs if _match(p.target, request.impls)]


def _filter_properties(request: FuzzRequest, items: list[WorkItem]) -> list[WorkItem]:
    """``--property``: the items whose property matches; a pattern matching none is a usage error."""
    if not request.properties:
        return items
    for pat in request.properties:
        if not any(_match(i.property, [pat]) for i in items):
            known = sorted({i.property for i in items})
            raise UsageError(f"--property {pat!r} matches no property of the selected contracts; known: {', '.join(known)}")
    return [i for i in items if _match(i.property, request.properties)]


def _check_targets(items: list[WorkItem], isolate: bool, timeout_s: float, load_timeout_s: float | None = None) -> None:
    """Every user target must load (within ``load_timeout_s``: a module that
    hangs at import is a usage error, not a hung start-up), take the
    contract's arguments and give a result of a type the contract reads,
    before any example runs."""
    from batchfuzz.execution import START_TIMEOUT_S, executor_for

    seen: set[tuple[str, str]] = set()
    for item in items:
        key = (item.contract, item.target)
        if key in seen or item.executor_key is None or parse(item.target).is_project_code:
            continue
        seen.add(key)
        contract = registry.get(item.contract)
        try:
            with executor_for(contract, item.target, isolate=isolate,
                              load_timeout_s=load_timeout_s or START_TIMEOUT_S) as ex:
                info = ex.describe()
                why = info.get("error") or runner.probe_result(contract, ex, registry.choose_domain(item.domain, info.get("domain")),
                                                               timeout_s=timeout_s)
        except TargetError as exc:
            raise UsageError(f"--target {item.contract}={item.target}: {exc}") from None
        if why:
            raise UsageError(f"--target {item.contract}={item.target}: {why}")


def _database(request: FuzzRequest) -> str | None:
    """What the job processes open (checked here first: a usage error before any example)."""
    if request.no_database:
        return None
    random = request.profile in _RANDOM_PROFILES
    spec = request.database or (os.environ.get(profiles.DATABASE_ENV_VAR) if random else None)
    if spec is None:
        return "profile" if random else None
    from batchfuzz.fuzz.database import DatabaseError, open_database

    if "://" not in spec:
        if spec != "off":
            refuse_system_dir(spec, "--database")
        spec = str(Path(spec).absolute())
    try:
        open_database(spec, local_dir=profiles.database_path())
    except DatabaseError as exc:
        raise UsageError(f"--database: {exc}") from None
    return spec


def _database_words(database: str | None) -> str:
    """The banner's words for the job's example database: its directory or server, or off."""
    if database == "profile":  # the job processes open the profile's local directory
        return f"{profiles.database_path()} (local)"
    return database or "off"


# --------------------------------------------------------------------------- the run


def _progress_stream() -> TextIO:
    return sys.stdout


def _prepare_report_dir(report_dir: Path) -> None:
    """Create the report directory; remove what an earlier run of ours left
    there (our file names only: the directory may be shared with other things)."""
    import re

    writable_dir(str(report_dir), "--report")
    for name in ("summary.json", "summary.md", "junit.xml", "index.html"):
        (report_dir / name).unlink(missing_ok=True)
    items = report_dir / "items"
    if items.is_dir():
        for p in items.iterdir():
            if re.fullmatch(r"\d{3,}\.json", p.name):
                p.unlink()
    run_dir = report_dir / ".run"
    if run_dir.is_dir():
        for name in ("job.json", "STOP"):
            (run_dir / name).unlink(missing_ok=True)
    items.mkdir(exist_ok=True)
    run_dir.mkdir(exist_ok=True)


class _Scheduler:
    """Hands out slices to the job processes, round robin over the live items
    (each process's own targets first, :meth:`_next_item`)."""

    def __init__(self, job: Job, job_path: Path, stream: TextIO, progress: Any) -> None:
        from batchfuzz.execution import process_context, without_main_module

        self.job, self.job_path, self.stream, self.progress = job, job_path, stream, progress
        self.ctx, self._no_main = process_context(), without_main_module
        self.live = deque(item.index for item in job.items)
        self.slices = {item.index: 0 for item in job.items}
        self.processes: dict[int, tuple[Any, Any]] = {}  # job process number -> (process, connection)
        self.busy: dict[int, int] = {}  # job process number -> item index
        # job process number -> the executor keys (WorkItem.executor_key) of the items it ran, most recent last, at
        # most EXECUTOR_CACHE: the workers it keeps, as the job process's own cache keeps them
        self.kept: dict[int, OrderedDict[tuple[str, str, str], None]] = {}
        self.sent: dict[int, tuple[float, float]] = {}  # job process number -> (when its slice was sent, the slice's length)
        self.overheads: list[float] = []  # seconds each finished slice took beyond its length (target start-up, reports)
        # item index -> one sample per finished slice: [seconds since the command started, the item's examples
        # so far, its seconds so far] (summary.json's per-property ``timeline``; the examples of a slice are
        # known only when it ends, so its end is when a sample is taken)
        self.timeline: dict[int, list[list[float]]] = {}
        self.ready: set[int] = set()  # job processes done with their start-up
        self.started = time.time()  # the command's start (set by _fuzz)
        self.clock_from: float | None = None  # when the budget's clock started (the job processes ready)
        self.startup_s = 0.0  # start-up before the clock: imports, target checks, the job processes' start
        self.uncharged_s = 0.0  # the targets' start-up within slices, per job process, added to the deadline
        self.next_id = 0
        self.signum: int | None = None
        self.stop_reason: str | None = None

    def say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.message(text)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def spawn(self) -> int:
        number = self.next_id
        self.next_id += 1
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=job_process_main, daemon=False,
                                args=(child, str(self.job_path), f"job-{number}", os.getpid(), self.job.database))
        with self._no_main():
            proc.start()
        child.close()
        self.processes[number] = (proc, parent)
        return number

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.job.stop_file.touch()
            self.say(f"batchfuzz: {reason}: stopping the job processes and writing a partial report")

    def on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt  # a second signal: stop waiting for the job processes
        self.signum = signum
        self.request_stop(f"{signal.Signals(signum).name} received")

    def slice_length(self, now: float) -> float:
        """Seconds of fuzzing the next slice gets, counted by the job process from
        when the item's target is ready: a share of what is left, so that the
        budget holds about ``TARGET_ROUNDS`` rounds over the live items. While
        some item has not had its first slice, what is left is first reduced by
        the overhead those first slices will cost (the mean measured so far of
        a slice's time beyond its length), so that on a loaded machine the
        earlier items do not use up the later ones' share."""
        if settings_derandomized(self.job):
            return math.inf  # a fixed stream runs once, whole (to the deadline)
        left = max(0.0, self.job.deadline - now)
        waiting = sum(1 for n in self.slices.values() if n == 0)
        if waiting and self.overheads:
            left = max(0.0, left - waiting * statistics.fmean(self.overheads) / self.job.workers)
        n = max(1, len(self.live) + len(self.busy))
        return max(MIN_SLICE_S, min(MAX_SLICE_S, left * self.job.workers / n / TARGET_ROUNDS))

    def shrink_length(self, slice_s: float) -> float:
        """Seconds a failure found in a slice may be shrunk past its end:
        while some item has not had its first slice, one more slice's length
        (a failing item must not take the others' share; its case is then
        reported as shrunk so far); after that, ``SHRINK_SHARE`` of the
        budget, at least ``SHRINK_MIN_S``."""
        if any(n == 0 for n in self.slices.values()):
            return max(MIN_SLICE_S, slice_s)
        return max(SHRINK_MIN_S, SHRINK_SHARE * self.job.budget_s)

    def dispatch(self) -> None:
        now = time.time()
        for number, (_, conn) in self.processes.items():
            if number in self.busy or number not in self.ready or self.stop_reason or now >= self.job.deadline:
                continue
            index = self._next_item(number)
            if index is None:
                return
            self.slices[index] += 1
            self.busy[number] = index
            length = self.slice_length(now)
            self.sent[number] = (now, length)
            conn.send((index, self.slices[index], length, self.shrink_length(length), self.job.deadline))

    def _next_item(self, number: int) -> int | None:
        """The live item job process ``number`` runs next (None: every live item is running).

        Candidates are the items not running with the fewest slices, so every
        item gets its first slice before any gets a second; once every item has
        had one, also those one slice ahead whose worker the process keeps (so
        that the end of a round does not make it start a worker for a slice).
        Of the candidates, in this order: one whose worker the process keeps
        (the most recently used first), fewest slices first; one whose target
        no job process keeps; any other. Ties go round robin: the chosen item
        moves to the back of ``live``."""
        running = set(self.busy.values())
        free = [i for i in self.live if i not in running]
        if not free:
            return None
        least = min(self.slices[i] for i in free)
        mine = self.kept.get(number, OrderedDict())
        recency = {key: n for n, key in enumerate(reversed(mine))}  # 0: the most recently used
        others = {key for other, keys in self.kept.items() if other != number for key in keys}

        def rank(index: int) -> tuple[int, int, int] | None:
            key, extra = self.job.items[index].executor_key, self.slices[index] - least
            if key in recency and extra <= (1 if least else 0):
                return (0, extra, recency[key])
            if extra:
                return None
            return (1, 0, 0) if key not in others else (2, 0, 0)

        ranked = [(r, i) for i in free if (r := rank(i)) is not None]
        index = min(ranked, key=lambda ri: ri[0])[1]  # min keeps the first of equals: round robin order
        self.live.remove(index)
        self.live.append(index)
        key = self.job.items[index].executor_key
        if key is not None:
            mine[key] = None
            mine.move_to_end(key)
            while len(mine) > EXECUTOR_CACHE:
                mine.popitem(last=False)
            self.kept[number] = mine
        return index

    def start_clock(self, now: float, wait_until: float) -> None:
        """Before the budget's clock starts the deadline slides with the time
        (start-up is not the examples'); it starts when every job process is ready,
        or at ``wait_until``, whichever is first."""
        if self.clock_from is not None:
            return
        self.job.deadline = now + self.job.budget_s
        if (self.processes and self.ready >= set(self.processes)) or now >= wait_until:
            self.clock_from = now
            self.startup_s = now - self.started

    def uncharge(self, seconds: float) -> None:
        """A slice's target start-up: the deadline moves on by its share per
        job process, up to one budget in all (a run stays bounded)."""
        extra = min(max(0.0, seconds) / max(1, self.job.workers), self.job.budget_s - self.uncharged_s)
        if extra > 0:
            self.uncharged_s += extra
            self.job.deadline += extra

    def finish_slice(self, number: int, index: int, status: str, startup_s: float = 0.0) -> None:
        self.busy.pop(number, None)
        s = read_state(self.job, self.job.items[index])
        self.timeline.setdefault(index, []).append([round(time.time() - self.started, 2), s.examples, round(s.seconds, 3)])
        sent, length = self.sent.pop(number, (math.nan, math.inf))
        self.uncharge(startup_s)
        if status not in FINAL and math.isfinite(length):
            self.overheads.append(max(0.0, time.time() - sent - length - startup_s))
        if status in FINAL and index in self.live:
            self.live.remove(index)

    def process_died(self, number: int) -> None:
        proc, conn = self.processes.pop(number)
        self.ready.discard(number)
        self.kept.pop(number, None)
        index = self.busy.pop(number, None)
        self.sent.pop(number, None)
        conn.close()
        if index is not None:
            item = self.job.items[index]
            state = read_state(self.job, item)
            state.status = "error"
            state.error = {"type": "JobProcessDied", "traceback": "",
                           "message": f"the job process died (exit {proc.exitcode}) while fuzzing this item; the target "
                                      f"may have crashed it (--no-isolation?)"}
            write_state(self.job, item, state, final=True)
            if index in self.live:
                self.live.remove(index)

    def loop(self) -> None:
        from multiprocessing.connection import wait

        for _ in range(self.job.workers):
            self.spawn()
        wait_until = time.time() + self.job.budget_s  # the job processes' start-up is waited for at most one budget
        while True:
            self.start_clock(time.time(), wait_until)
            self.dispatch()
            if not self.busy and (not self.live or self.stop_reason or time.time() >= self.job.deadline):
                break
            if time.time() > self.job.deadline + GRACE_S:
                self.say(f"batchfuzz: job processes still busy {GRACE_S:g}s after the deadline: stopping them")
                break
            waitables = {conn: number for number, (_, conn) in self.processes.items()}
            sentinels = {proc.sentinel: number for number, (proc, _) in self.processes.items()}
            try:
                ready = wait(list(waitables) + list(sentinels), timeout=0.5)
            except KeyboardInterrupt:
                break
            for obj in ready:
                if obj in waitables:
                    number = waitables[obj]
                    try:
                        index, status, startup_s = self.processes[number][1].recv()
                    except (EOFError, OSError):
                        continue  # its sentinel reports the death
                    if index is None and status == READY:
                        self.ready.add(number)
                        continue
                    self.finish_slice(number, index, status, startup_s)
                elif obj in sentinels:
                    number = sentinels[obj]
                    if number in self.processes and not self.processes[number][0].is_alive():
                        self.process_died(number)
                        if self.live and not self.stop_reason and time.time() < self.job.deadline:
                            self.spawn()
        self.shutdown()

    def shutdown(self) -> None:
        for _proc, conn in self.processes.values():
            try:
                conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        end = time.time() + 10
        for proc, _ in self.processes.values():
            proc.join(max(0.1, end - time.time()))
        for number, (proc, conn) in list(self.processes.items()):
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            if number in self.busy:
                item = self.job.items[self.busy[number]]
                state = read_state(self.job, item)
                state.status, state.reason = "interrupted", "stopped after the deadline while still busy"
                write_state(self.job, item, state, final=True)
            conn.close()


def settings_derandomized(job: Job) -> bool:
    from hypothesis import settings

    profiles.register_profiles()
    return bool(settings.get_profile(job.profile).derandomize)


@dataclass(frozen=True)
class End:
    """How a fuzz job ended: the run's status (``report.run_status``), whether
    it found failures or harness errors, and the signal that stopped it, if any."""

    status: str
    failed: bool
    signum: int | None = None


def exit_code(end: End) -> int:
    """The command's exit code for a job that ended so (the module docstring lists them)."""
    if end.signum:
        return 128 + end.signum
    if end.failed:
        return ExitCode.COUNTEREXAMPLE
    if end.status in ("incomplete", "interrupted"):
        return ExitCode.INCOMPLETE
    return ExitCode.OK


def _importing(frame: Any) -> bool:
    """Whether ``frame`` runs inside an import (a frame of importlib's machinery below it)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _signal_at_start(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM during start-up: stop it, but never from inside an import
    (torch's, seconds long: an exception there leaves modules half made, and
    importing them again fails or crashes). A signal that comes during an
    import waits in ``PENDING_SIGNALS`` for the next :func:`_safe_point`; a
    second one stops start-up at once (an import that never ends, a user's
    module under ``--no-isolation``, must not make the run unstoppable)."""
    if _importing(frame) and not PENDING_SIGNALS:
        PENDING_SIGNALS.append(signum)
        return
    PENDING_SIGNALS.clear()
    raise _StartInterrupted(signum)


def _safe_point() -> None:
    """Where start-up acts on a signal that came during an import."""
    if PENDING_SIGNALS:
        signum = PENDING_SIGNALS[-1]
        PENDING_SIGNALS.clear()
        raise _StartInterrupted(signum)


class _StartInterrupted(Exception):
    """A SIGINT or SIGTERM during start-up (before the job processes take over)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _StartStop:
    """What ``finish`` needs of a scheduler when the run stopped during start-up."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.stop_reason = f"{signal.Signals(signum).name} received during start-up"


def _lock_report_dir(report_dir: Path) -> Any:
    """Hold ``.run/lock`` in the report directory for the whole run: a second
    run given the same ``--report`` is refused, instead of both overwriting
    each other's reports."""
    import fcntl

    writable_dir(str(report_dir), "--report")
    run_dir = report_dir / ".run"
    run_dir.mkdir(exist_ok=True)
    fh = open(run_dir / "lock", "a+")  # held for the run; closed (and unlocked) by run()
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise UsageError(f"--report {report_dir}: in use by another batchfuzz fuzz ({holder}); give this run its own "
                         "--report directory") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()}")
    fh.flush()
    return fh


def cap_workers(requested: int, items: int, cores: int | None) -> tuple[int, str | None]:
    """Job processes worth starting: no more than the work items, nor than
    twice the cores (each job process's worker is a second busy process); and
    what to say when that is fewer than asked."""
    limit = max(1, min(items, 2 * (cores or 1)))
    if requested <= limit:
        return requested, None
    why = "work items" if items <= 2 * (cores or 1) else f"twice the {cores} cores"
    return limit, f"--workers {requested} capped at {limit} (the number of {why})"


# The most job processes a run starts when --workers is not given (each has a
# worker process beside it, and imports torch: memory, not cores, bounds a big host).
MAX_DEFAULT_WORKERS = 8


def default_workers(items: int, cores: int | None) -> int:
    """Job processes for a run given no ``--workers``: one per core, at most
    ``MAX_DEFAULT_WORKERS``, and no more than the work items."""
    return max(1, min(cores or 1, MAX_DEFAULT_WORKERS, items))


def minimum_budget(items: int, workers: int) -> float:
    """The budget that gives every item its first slice (the module docstring's rule)."""
    return STARTUP_S + MIN_SLICE_S * math.ceil(items / max(1, workers))


def default_budget(items: int, workers: int) -> float:
    """The budget of a run given none: ``DEFAULT_BUDGET_S``, or the
    :func:`minimum_budget` of its items where that is more (a run of the
    defaults gives every item its first slice, however many contracts are registered),
    rounded up to a whole second (it is printed, and typed back in a rerun)."""
    return float(math.ceil(max(DEFAULT_BUDGET_S, minimum_budget(items, workers))))


def run(request: FuzzRequest, stream: TextIO | None = None) -> End:
    """Run the job ``request`` describes: plan it, check the user's targets,
    start the job processes, hand out slices until the budget ends, write the
    reports. Raises UsageError before any example runs. A SIGINT or SIGTERM at
    any moment, start-up included, ends it with a partial report (its End
    carries the signal); one that comes once the reports are being written
    changes neither them nor the End (:func:`finish`)."""
    import threading

    handlers: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, _signal_at_start)
    held: list[Any] = []
    request = dataclasses.replace(request, started=request.started or time.time())
    out = stream or _progress_stream()
    try:
        if PENDING_SIGNALS:  # it came while the commands were imported
            signum = PENDING_SIGNALS.pop()
            PENDING_SIGNALS.clear()
            return _interrupted_at_start(request, signum, None, out)
        return _run(request, out, held)
    finally:
        for sig, h in handlers.items():
            signal.signal(sig, h)
        for fh in held:
            fh.close()


@dataclass(frozen=True)
class _Start:
    """What start-up settled before the job processes start: the request with
    its defaults resolved, the plan, and what the job is given besides."""

    request: FuzzRequest  # budget_s and workers resolved (workers as asked: capped in `workers`)
    items: list[WorkItem]
    workers: int
    notes: list[str]
    history: list[Any]


def _run(request: FuzzRequest, out: TextIO, held: list[Any]) -> End:
    job: Job | None = None
    try:
        start = _start(request)
        request = start.request
        _safe_point()
        database = _database(start.request)
        report_dir = Path(request.report).absolute()
        held.append(_lock_report_dir(report_dir))
        job = _new_job(start, database)
        _prepare_report_dir(report_dir)
        writable_dir(job.corpus_dir, "--corpus")
        for item in job.items:
            write_state(job, item, new_state(item))
        job_path = job.run_dir / "job.json"
        job.save(job_path)
        for n in start.notes:
            out.write(f"warning: {n}\n")
        scheduler = _Scheduler(job, job_path, out, None)
        for sig in (signal.SIGINT, signal.SIGTERM):  # from here on, a signal stops the job processes and the run
            with contextlib.suppress(ValueError):
                signal.signal(sig, scheduler.on_signal)
        _safe_point()  # one that came during the last import
    except _StartInterrupted as exc:
        return _interrupted_at_start(request, exc.signum, job, out)
    return _fuzz(start.request, job, scheduler, out)


def _start(request: FuzzRequest) -> _Start:
    """Check the request's folders and device, plan it, resolve its defaults,
    read the history and check the user's targets: every usage error before
    any example runs."""
    refuse_system_dir(request.report, "--report")  # before its lock file is written there
    if request.corpus:
        refuse_system_dir(request.corpus, "--corpus")
    if request.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
    items = plan(request)
    cores = os.cpu_count()
    asked = request.workers if request.workers is not None else default_workers(len(items), cores)
    _safe_point()
    from batchfuzz.fuzz.page import read_history

    history = read_history(list(request.history))  # untrusted files: refused before any target starts
    budget = request.budget_s if request.budget_s is not None else default_budget(len(items), cap_workers(asked, len(items), cores)[0])
    request = dataclasses.replace(request, workers=asked, budget_s=budget)
    _check_targets(items, isolate=request.isolate, timeout_s=request.timeout_s, load_timeout_s=max(budget, request.timeout_s))
    workers, capped = cap_workers(asked, len(items), cores)
    notes = [capped] if capped else []
    notes += [n for n in (conformance_planned(request)[1], _live_planned(request)[1]) if n]
    need = minimum_budget(len(items), workers)
    if budget < need:
        notes.append(f"the budget of {budget:g}s cannot give each of the {len(items)} items its first slice with "
                     f"{workers} worker(s): that needs at least {need:g}s ({STARTUP_S:g}s for the slices' "
                     f"own overheads plus {MIN_SLICE_S:g}s per item per worker; start-up is not charged); "
                     "items past the first few may be reported not run")
    return _Start(request=request, items=items, workers=workers, notes=notes, history=history)


def _corpus_dir(request: FuzzRequest) -> str:
    return str(Path(request.corpus).absolute() if request.corpus else corpus.default_dir())


def _shard_record(request: FuzzRequest) -> dict[str, Any] | None:
    """``summary.json``'s ``shard``: K, N and the digest of the whole plan (every shard's, to merge only one run's)."""
    if request.shard is None:
        return None
    from batchfuzz.fuzz.shards import plan_digest

    everything = plan(dataclasses.replace(request, shard=None))
    return {"index": request.shard[0], "count": request.shard[1], "plan": plan_digest([i.shard_key for i in everything])}


def _new_job(start: _Start, database: str | None) -> Job:
    """The job the job processes run (``.run/job.json``), its seed drawn here when the request has none."""
    request = start.request
    assert request.budget_s is not None and request.started is not None
    seed = request.seed if request.seed is not None else int.from_bytes(os.urandom(4), "little")
    return Job(items=start.items, report_dir=str(Path(request.report).absolute()), corpus_dir=_corpus_dir(request),
               database=database, profile=request.profile, seed=seed, workers=start.workers, budget_s=request.budget_s,
               deadline=request.started + request.budget_s, isolate=request.isolate, example_timeout_s=request.timeout_s,
               max_examples=request.max_examples,
               replay_command=request.replay_command(seed), shard=_shard_record(request), notes=start.notes,
               history=start.history)


def _interrupted_at_start(request: FuzzRequest, signum: int, job: Job | None, out: TextIO) -> End:
    """A partial report for a run stopped before its job processes started: every item not run."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # the report is being written: further signals wait for it
        with contextlib.suppress(ValueError):
            signal.signal(sig, signal.SIG_IGN)
    assert request.started is not None
    try:
        if job is None:
            items = plan(request)
            _prepare_report_dir(Path(request.report).absolute())
            budget = request.budget_s or DEFAULT_BUDGET_S
            job = Job(items=items, report_dir=str(Path(request.report).absolute()), corpus_dir=_corpus_dir(request),
                      database=None, profile=request.profile, seed=request.seed if request.seed is not None else 0,
                      workers=request.workers or 1, budget_s=budget, deadline=request.started + budget,
                      isolate=request.isolate, example_timeout_s=request.timeout_s)
            for item in items:
                write_state(job, item, new_state(item))
        return finish(job, _StartStop(signum), out, request.started)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):
                signal.signal(sig, signal.SIG_DFL)


def _fuzz(request: FuzzRequest, job: Job, scheduler: Any, out: TextIO) -> End:
    assert request.started is not None
    mode = request.progress
    if mode == "auto":
        from batchfuzz.progress import interactive

        mode = "table" if interactive(out) else "lines"
    from batchfuzz.fuzz.progress import Progress

    progress = Progress(out, job, request.started, tty=(mode == "table")) if mode != "none" else None
    scheduler.progress = progress
    scheduler.started = request.started
    out.write(_banner(request, job))
    out.flush()
    if progress is not None:
        progress.start()
    try:
        scheduler.loop()
    finally:
        if progress is not None:
            progress.stop()
    return finish(job, scheduler, out, request.started)


def _banner(request: FuzzRequest, job: Job) -> str:
    """The two lines that say what the run does, before it starts."""
    items = job.items
    targets = sorted({(i.contract, i.target) for i in items})
    return (f"batchfuzz fuzz: {len(items)} work items ({len({i.contract for i in items})} contracts, {len(targets)} targets) "
            f"on {request.device}, budget {job.budget_s:g}s"
            + (f", {job.max_examples} examples per item" if job.max_examples is not None else "")
            + f", {job.workers} worker(s), profile {request.profile}, seed {job.seed}"
            + (f", shard {request.shard[0]}/{request.shard[1]}" if request.shard else "") + "\n"
            f"  example database {_database_words(job.shown_database)}; corpus {job.corpus_dir}; report {job.report_dir}; "
            f"{'targets isolated in worker processes' if job.isolate else 'targets in the job processes'}\n")


def finish(job: Job, scheduler: Any, out: TextIO, started: float) -> End:
    """Write the reports, print the summary, say how the job ended. Meanwhile
    SIGINT/SIGTERM are ignored: the reports being written are the run's word,
    and the End (the exit code) is theirs; the command goes on ignoring them
    until it exits (``batchfuzz.cli``), so a late signal never makes an exit
    code of 128+N beside a complete report."""
    with _signals_ignored():
        return _finish(job, scheduler, out, started)


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored while the block runs (in the main thread), then as they were."""
    saved = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: nothing to ignore
            saved[sig] = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _finish(job: Job, scheduler: Any, out: TextIO, started: float) -> End:
    from batchfuzz.fuzz import report
    from batchfuzz.fuzz.job import database_losses

    partial = scheduler.stop_reason is not None
    signum = scheduler.signum if partial and scheduler.signum else None
    states, short = _final_states(job, partial)
    lost = database_losses(job)
    notes = list(job.notes) + [f"the shared example database was lost mid-run: {m}" for m in lost]
    if short:
        notes.append(f"incomplete: {len(short)} of {len(job.items)} items ran fewer than the {job.max_examples} examples of "
                     f"--max-examples before the budget ended: " + ", ".join(short[:20]) + (" ..." if len(short) > 20 else ""))
    summary = report.build_summary(job, states, report.RunEnd(
        started=started, finished=time.time(), partial=partial, interrupted_by=scheduler.stop_reason if partial else None,
        notes=tuple(notes), database_lost=tuple(lost), timeline=getattr(scheduler, "timeline", None) or {},
        # not charged to the budget: before the clock, and the targets' start-up in slices
        startup_seconds=getattr(scheduler, "startup_s", 0.0) + getattr(scheduler, "uncharged_s", 0.0)))
    if short and summary["status"] == "passed":  # --max-examples asked for examples, not seconds: short of them is incomplete
        summary["status"] = "incomplete"
    try:
        paths = report.write_reports(job.report_dir, summary, history=job.history)
    except OSError as exc:  # a full disk, a file-size limit: the corpus and the database are written apart, atomically
        out.write(f"batchfuzz: error: cannot write the reports to {job.report_dir}: {exc.strerror or exc} "
                  f"({type(exc).__name__}, errno {exc.errno}); the corpus ({job.corpus_dir}) and the example database "
                  f"are intact\n")
        out.flush()
        sys.stderr.write(f"batchfuzz: error: cannot write the reports to {job.report_dir}: {exc.strerror or exc}\n")
        return End(status="error", failed=True, signum=signum)
    out.write(_summary_text(job, summary, paths, partial))
    out.flush()
    return End(status=summary["status"], failed=bool(summary["failures"] or summary["errors"]), signum=signum)


def _final_states(job: Job, partial: bool) -> tuple[dict[int, ItemState], list[str]]:
    """Every item's final word (what never ran, or was left between slices,
    gets one), written; and with ``max_examples`` the items the budget ended
    before they had their examples."""
    states = read_states(job.items_dir)
    short: list[str] = []
    for item in job.items:
        s = states.get(item.index) or new_state(item)
        if s.status == WAITING:
            s.status = "not run"
            s.reason = "interrupted before it started" if partial else "the budget ended before it started"
        elif s.status in (IDLE, RUNNING):
            if partial:
                s.status = "interrupted"
            elif s.examples == 0:  # its slices went to start-up: nothing was checked
                s.status, s.reason = "not run", "its slices ended before its first example"
            else:
                s.status = "passed"
                if job.max_examples is not None and s.examples < job.max_examples:
                    s.reason = f"the budget ended after {s.examples} of its {job.max_examples} examples (--max-examples)"
                    short.append(f"{item.contract}/{item.name}/{item.property} ({s.examples})")
        states[item.index] = s
        write_state(job, item, s, final=True)
    return states, short


def _summary_text(job: Job, summary: dict[str, Any], paths: list[Path], partial: bool) -> str:
    """What the terminal shows at the end: a row per contract, one block per failure origin, the errors and notes."""
    from batchfuzz.fuzz.report import unshrunk_note

    t = summary["totals"]
    lines = [f"\n{'contract':26} {'items':>9} {'examples':>9} {'failures':>8} {'cases/s':>8}\n"]
    for name, c in summary["contracts"].items():
        lines.append(f"{name:26} {str(c['items_run']) + '/' + str(c['items']):>9} {c['examples']:9d} {c['failures']:8d} "
                     f"{c['cases_per_second']:8.0f}\n")
    lines.append(f"{'total':26} {'':9} {t['examples']:9d} {t['failures']:8d} {t['throughput']:8.0f} per wall second "
                 f"({summary['wall_seconds']:.1f}s, {job.workers} worker(s))\n")
    for f in summary["origins"]:  # one per origin, listing every property it breaks
        first = f["message"].splitlines()[0] if f.get("message") else ""
        note = unshrunk_note(f)
        lines.append(f"\nFAILED {f['contract']} {f['implementation']} {', '.join(f['properties'])}: {f['description']}: {first}\n"
                     + (f"  {note}\n" if note else "")
                     + f"  corpus: {f.get('corpus_file')} ({'new' if f.get('new') else 'already known'})\n")
        if f.get("reproduction"):  # not indented: pasted as printed, it runs
            lines.append(f"{reproduce.HEADER}\n{f['reproduction']}\n")
        if f.get("corpus_file"):
            lines.append(f"--- replay: {corpus.replay_command(f['contract'], f['implementation'], f['corpus_file'])}\n")
    lines += [f"\nERROR {e['contract']} {e['implementation']}: {e['type']}: {e['message']}\n" for e in summary["errors"]]
    lines += [f"note: {n}\n" for n in summary["notes"]]
    lines.append(f"reports: {', '.join(str(p) for p in paths)}" + (" (PARTIAL)" if partial else "") + "\n")
    lines.append(f"rerun with the same seed: {job.replay_command}\n")
    return "".join(lines)
