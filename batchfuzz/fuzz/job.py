"""The fuzz job's model (:class:`WorkItem`, :class:`Job`, :class:`ItemState`)
and its job processes (:func:`job_process_main`).

A job process takes slices of work items from the controller
(:mod:`batchfuzz.fuzz.controller`) and runs each as one Hypothesis hunt of
the item's property on the item's target, in an executor it keeps
(``batchfuzz.execution``). Everything it learns goes to disk as it happens
(the item's state file, the corpus, the example database), so neither the
display nor an interrupted run depends on a process staying alive; it stops
between examples once ``<report>/.run/STOP`` exists. docs/nightly.md ("How a
run works", "A work item's walk") says more.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import signal
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from batchfuzz.fuzz.records import Record

# Item states: "waiting" (never ran), "idle" (between slices), "running"; at
# the end "passed", "failed", "error", "interrupted" or "not run".
RUNNING, IDLE, WAITING = "running", "idle", "waiting"
FINAL = ("passed", "failed", "error", "interrupted", "not run")
READY = "ready"  # a job process's first word: its start-up is done
# Executors a job process keeps alive for the items it may get again (each an
# isolated worker process), the least recently used closed first. The
# controller hands a job process the items of the targets it keeps
# (controller._Scheduler._next_item), so that a worker serves many slices.
EXECUTOR_CACHE = 4


@dataclass(frozen=True)
class WorkItem:
    """One property of one target of one contract on one device: the unit a
    shard owns and a job process hunts in time slices."""

    index: int
    contract: str
    target: str  # a target reference (batchfuzz.targets): impl:NAME@DEVICE, or MODULE:FUNCTION for a user's
    device: str
    property: str
    domain: str | None = None  # None: the target's declared domain, else spec

    @builtins.property
    def name(self) -> str:
        """What reports call the target (``impl:numpy@cpu``, ``mymod:split``)."""
        return self.target

    @builtins.property
    def id(self) -> str:
        return f"{self.index:04d}-{self.contract}-{self.target}-{self.property}"

    @builtins.property
    def executor_key(self) -> tuple[str, str, str] | None:
        """What a job process keeps one executor per (:data:`EXECUTOR_CACHE`):
        the item's contract, target and device; None for the conformance and
        live-engine items, which run vLLM in the job process and have no executor."""
        from batchfuzz import engine_steps, live_engine

        if self.contract in (engine_steps.CONFORMANCE_SUBJECT, live_engine.SUBJECT):
            return None
        return (self.contract, self.target, self.device)

    @builtins.property
    def shard_key(self) -> str:
        from batchfuzz.fuzz.shards import item_key

        return item_key(self.contract, self.target, self.device, self.property)


@dataclass
class Job:
    """Everything a job process needs, written by the controller as ``.run/job.json``."""

    items: list[WorkItem]
    report_dir: str
    corpus_dir: str
    database: str | None  # what the job processes open; written to job.json and reports only printable (a password hidden)
    profile: str
    seed: int
    workers: int
    budget_s: float
    deadline: float  # wall clock (time.time()), shared by every process on the machine
    isolate: bool = True
    example_timeout_s: float = 30.0
    labels: bool = True
    # --max-examples: the examples an item runs in all, over its slices (None: as many as its slices' time allows).
    max_examples: int | None = None
    replay_command: str = ""  # the command line that reruns the job (printed, and in summary.json)
    shard: dict[str, Any] | None = None  # summary.json's shard: {index, count, plan}
    notes: list[str] = field(default_factory=list)  # said at start and in summary.json
    history: list[Any] = field(default_factory=list)  # earlier nights' summaries, for index.html

    @property
    def run_dir(self) -> Path:
        return Path(self.report_dir) / ".run"

    @property
    def items_dir(self) -> Path:
        return Path(self.report_dir) / "items"

    @property
    def stop_file(self) -> Path:
        return self.run_dir / "STOP"

    @property
    def shown_database(self) -> str | None:
        """The database as every report and message shows it: its password hidden (``batchfuzz.redaction``)."""
        from batchfuzz.redaction import printable

        return None if self.database is None else printable(self.database)

    def save(self, path: Path) -> None:
        """``.run/job.json``, with the database printable: the job processes get
        the spec itself through their pipe (:func:`job_process_main`)."""
        from batchfuzz.output import write_json_atomic

        write_json_atomic(path, {**asdict(self), "database": self.shown_database})

    @classmethod
    def load(cls, path: str | Path) -> Job:
        data = json.loads(Path(path).read_text())
        data["items"] = [WorkItem(**i) for i in data["items"]]
        return cls(**data)


def state_path(job: Job, item: WorkItem) -> Path:
    return job.items_dir / f"{item.index:04d}.json"


@dataclass
class ItemState(Record):
    """One work item's accumulated state, ``<report>/items/NNNN.json``: what
    the job processes write after every slice and the progress display and
    the reports read (``to_json``/``from_json`` at the file)."""

    index: int
    contract: str
    target: str
    name: str
    device: str
    property: str
    domain: str | None = None
    status: str = WAITING
    reason: str = ""
    worker: str | None = None
    pid: int | None = None
    started: float | None = None
    finished: float | None = None
    seconds: float = 0.0  # fuzzing time, over its slices
    startup_seconds: float = 0.0  # its target's start-up within slices (not charged to the budget)
    slices: int = 0
    examples: int = 0
    events: dict[str, int] = field(default_factory=dict)  # the contract's input-class labels: examples each
    scores: dict[str, int] = field(default_factory=dict)
    # Failure records as the reports keep them (records.FailureRecord's keys, less contract and implementation).
    failures: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, str] | None = None  # type, message, traceback: the harness could not run the item
    settings: dict[str, Any] = field(default_factory=dict)  # what its hunts ran with (summary.json's settings)


def read_states(items_dir: Path | str) -> dict[int, ItemState]:
    """Every item state written so far, by item index (unreadable files skipped)."""
    out: dict[int, ItemState] = {}
    d = Path(items_dir)
    if not d.is_dir():
        return out
    for p in d.glob("*.json"):
        try:
            s = ItemState.from_json(json.loads(p.read_text()), str(p))
        except (OSError, ValueError):
            continue
        out[s.index] = s
    return out


def new_state(item: WorkItem) -> ItemState:
    return ItemState(index=item.index, contract=item.contract, target=item.target, name=item.name, device=item.device,
                     property=item.property, domain=item.domain)


def read_state(job: Job, item: WorkItem) -> ItemState:
    path = state_path(job, item)
    try:
        return ItemState.from_json(json.loads(path.read_text()), str(path))
    except (OSError, ValueError):
        return new_state(item)


def write_state(job: Job, item: WorkItem, state: ItemState, *, final: bool = False) -> None:
    from batchfuzz.output import write_json_atomic

    write_json_atomic(state_path(job, item), state.to_json(), fsync=final)


def stop_requested(job: Job) -> bool:
    return job.stop_file.exists()


# --------------------------------------------------------------------------- a job process


@dataclass(frozen=True)
class _Slice:
    """One slice of one item as :meth:`_JobProcess.run_slice` resolves it, once,
    before anything runs: the contract, the target's executor, the domain, the
    settings and the clock, handed down to the hunt and the failure's record."""

    item: WorkItem
    number: int
    contract: Any  # registry.Contract
    executor: Any  # execution.Executor
    domain: str
    settings: Any  # hypothesis.settings
    slice_end: float  # generating stops here (wall clock)
    shrink_until: float  # a failure is shrunk until here


class _JobProcess:
    """One job process's resources: its settings and its executors."""

    def __init__(self, job: Job, worker: str) -> None:
        from batchfuzz import profiles

        self.job, self.worker = job, worker
        profiles.register_profiles()
        self.database = _open_database(job)
        self.executors: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self.last_startup_s = 0.0

    def executor(self, contract: Any, item: WorkItem) -> Any:
        from batchfuzz.execution import executor_for

        key = item.executor_key
        assert key is not None, item
        ex = self.executors.pop(key, None)
        if ex is None:
            ex = executor_for(contract, item.target, isolate=self.job.isolate, device=item.device)
            while len(self.executors) >= EXECUTOR_CACHE:
                _, old = self.executors.popitem(last=False)
                old.close()
        self.executors[key] = ex
        return ex

    def close(self) -> None:
        for ex in self.executors.values():
            ex.close()
        self.executors.clear()

    def settings(self, examples_so_far: int = 0) -> Any:
        """The job's profile with the job process's database; with the job's
        ``max_examples``, Hypothesis's ``max_examples`` is what the item still
        lacks of it (an item's examples add up over its slices)."""
        from hypothesis import settings

        base = settings(settings.get_profile(self.job.profile), database=self.database)
        if self.job.max_examples is None:
            return base
        return settings(base, max_examples=max(1, self.job.max_examples - examples_so_far))

    def _begin(self, item: WorkItem) -> ItemState:
        """``item``'s state, marked running in this job process (and written)."""
        state = read_state(self.job, item)
        state.status, state.worker, state.pid = RUNNING, self.worker, os.getpid()
        state.started = state.started or time.time()
        write_state(self.job, item, state)
        return state

    def _errored(self, item: WorkItem, state: ItemState, exc: Exception, began: float) -> ItemState:
        """A slice that raised: ``item`` ends as an ``error`` with the exception (its final state, written)."""
        state.status = "error"
        state.error = {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
        state.seconds = round(state.seconds + time.time() - began, 3)
        write_state(self.job, item, state, final=True)
        return state

    def run_slice(self, item: WorkItem, slice_no: int, slice_s: float, shrink_s: float) -> ItemState:
        """Fuzz ``item`` for ``slice_s`` seconds from when its target is ready
        (a failure found by then is shrunk for ``shrink_s`` more), within the
        job's deadline and the job's ``max_examples``; return (and write) its
        state. A straight walk down (docs/nightly.md, "A work item's walk"):
        :meth:`_resolve`, :meth:`_hunt`, :meth:`_record`. The seconds its
        target took to get ready are ``self.last_startup_s``: the controller
        does not charge them to the budget."""
        from batchfuzz import live_engine

        if item.contract == live_engine.SUBJECT:
            return self.run_live_slice(item, slice_no, slice_s, shrink_s)
        if item.executor_key is None:
            return self.run_conformance_slice(item, slice_no, slice_s, shrink_s)
        state = self._begin(item)
        began = time.time()
        self.last_startup_s = 0.0
        try:
            work = self._resolve(item, state, slice_no, slice_s, shrink_s)
            r = self._hunt(work)
        except Exception as exc:
            return self._errored(item, state, exc, began)
        self._record(work, state, r, began)
        write_state(self.job, item, state, final=state.status in FINAL)
        return state

    def _resolve(self, item: WorkItem, state: ItemState, slice_no: int, slice_s: float, shrink_s: float) -> _Slice:
        """Everything the slice needs, looked up once: the contract (the
        registry's only lookup), the target's executor (started and imported:
        start-up, ``last_startup_s``), the domain, the settings, the clock."""
        from batchfuzz import registry

        job, began = self.job, time.time()
        contract = registry.get(item.contract)
        executor = self.executor(contract, item)
        info = executor.describe()
        self.last_startup_s = time.time() - began
        if info.get("error"):
            raise RuntimeError(info["error"])
        # Starting the target's worker (and importing it) is not the item's fuzzing time: the slice starts now.
        slice_end = min(job.deadline, time.time() + slice_s)
        domain = registry.choose_domain(item.domain, info.get("domain"))
        rs = self.settings(state.examples)
        state.settings = {"profile": job.profile, "derandomize": bool(rs.derandomize), "isolated": job.isolate,
                          "database": repr(rs.database) if rs.database is not None else None, "domain": domain,
                          "seed": job.seed, "timeout": job.example_timeout_s, "max_examples": job.max_examples}
        return _Slice(item=item, number=slice_no, contract=contract, executor=executor, domain=domain, settings=rs,
                      slice_end=slice_end, shrink_until=min(job.deadline, slice_end + shrink_s))

    def _hunt(self, work: _Slice) -> Any:
        """The slice's one Hypothesis hunt of the item's property (``runner.hunt``)."""
        from batchfuzz import runner

        job, item, contract, executor, domain, rs = self.job, work.item, work.contract, work.executor, work.domain, work.settings
        slice_no, slice_end, shrink_until = work.number, work.slice_end, work.shrink_until
        return runner.hunt(contract, executor, contract.property(item.property), runner.HuntOptions(
            rs, seed=runner._round_seed(job.seed, item.contract, item.target, item.property, slice_no),
            domain=domain, deadline=shrink_until, generate_until=slice_end,
            example_timeout_s=job.example_timeout_s, labels=job.labels),
            target_name=item.target, should_stop=lambda: stop_requested(job))

    def _record(self, work: _Slice, state: ItemState, r: Any, began: float) -> None:
        """The hunt's result added to ``state``: its examples, labels and
        scores, its failure (saved to the corpus), and the item's new status."""
        job = self.job
        examples_before = _count_slice(state, r.examples, began, self.last_startup_s)
        state.events = _added(state.events, r.events)
        state.scores = _added(state.scores, r.scores)
        if r.failure is not None:
            record = _save_failure(job, work, r.failure)
            # Which of the item's examples failed first, and when: 1 for a failure the
            # example database replayed at the start of the item's first slice.
            if r.first_failure_example is not None:
                record["found_at_example"] = examples_before + r.first_failure_example
                record["found_at_time"] = r.first_failure_time
            state.failures.append(record)
            state.status = "failed"
        elif stop_requested(job):
            state.status, state.reason = "interrupted", "the run was stopped (signal)"
        elif (work.settings.derandomize or job.max_examples is not None) and not r.out_of_time:
            # Done: a derandomized stream once it has run (another slice would replay it); with --max-examples, once
            # the item has its examples (or Hypothesis has exhausted the domain before).
            state.status = "passed"
        else:
            state.status = IDLE

    def run_conformance_slice(self, item: WorkItem, slice_no: int, slice_s: float, shrink_s: float) -> ItemState:
        """The conformance item (``engine_steps.conformance_search``): as a
        property's slice, its failure the smallest workload on which the
        scheduler model and vLLM's scheduler differ, with its reproduction (no
        corpus entry: the corpus holds contracts' cases)."""
        from batchfuzz import engine_steps, runner

        job = self.job
        state = self._begin(item)
        began = time.time()
        self.last_startup_s = 0.0
        rs = self.settings()
        state.settings = {"profile": job.profile, "derandomize": bool(rs.derandomize), "isolated": False,
                          "database": repr(rs.database) if rs.database is not None else None, "seed": job.seed}
        try:
            # vLLM's import and its first configuration are start-up, as a target's import is: the slice starts after.
            engine_steps.conformance(engine_steps.sample_workload(0))
            self.last_startup_s = time.time() - began
            now = time.time()
            r = engine_steps.conformance_search(rs, seed=runner._round_seed(job.seed, item.contract, item.target, item.property, slice_no),
                                                deadline=min(job.deadline, now + slice_s + shrink_s),
                                                generate_until=min(job.deadline, now + slice_s),
                                                should_stop=lambda: stop_requested(job))
        except Exception as exc:
            return self._errored(item, state, exc, began)
        examples_before = _count_slice(state, r.examples, began, self.last_startup_s)
        if r.workload is not None:
            state.failures.append({
                "property": engine_steps.CONFORMANCE, "during": "", "spec": engine_steps.CONFORMANCE_SPEC, "kind": "violation",
                "error_type": "ConformanceDifference", "message": "; ".join(r.differences), "exit": None,
                "inputs": {"workload": r.workload}, "reproduction": r.reproduction(), "corpus_file": None, "new": False,
                "id": None, "shrink_complete": not r.out_of_time,
                "found_at_example": examples_before + (r.first_failure_example or 0)})
            state.status = "failed"
        elif stop_requested(job):
            state.status, state.reason = "interrupted", "the run was stopped (signal)"
        elif rs.derandomize and not r.out_of_time:
            state.status = "passed"
        else:
            state.status = IDLE
        write_state(job, item, state, final=state.status in FINAL)
        return state

    def run_live_slice(self, item: WorkItem, slice_no: int, slice_s: float, shrink_s: float) -> ItemState:
        """A live-engine item (``batchfuzz.live_engine``, docs/live-engine.md): vLLM's whole engine, started once
        in this process (its import and start are the item's start-up), searched for a workload that breaks the
        item's property; a failure is the shrunk workload with a reproduction script (no corpus entry)."""
        from batchfuzz import live_engine, runner

        job, began = self.job, time.time()
        state = self._begin(item)
        self.last_startup_s = 0.0
        rs = self.settings(state.examples)
        state.settings = {"profile": job.profile, "isolated": False, "database": None, "seed": job.seed,
                          "max_examples": job.max_examples}
        try:
            engine = live_engine.engine()
            self.last_startup_s = time.time() - began
            now = time.time()
            limits = live_engine.Limits(min(job.deadline, now + slice_s + shrink_s), min(job.deadline, now + slice_s),
                                        lambda: stop_requested(job))
            r = live_engine.search(engine, examples=rs.max_examples, prop=item.property, limits=limits,
                                   seed=runner._round_seed(job.seed, item.contract, item.target, item.property, slice_no))
        except Exception as exc:
            return self._errored(item, state, exc, began)
        before = _count_slice(state, r.examples, began, self.last_startup_s)
        if r.workload is not None:
            state.failures.append(live_engine.failure_record(r, item.property, before))
            state.status = "failed"
        elif stop_requested(job):
            state.status, state.reason = "interrupted", "the run was stopped (signal)"
        else:  # with --max-examples, done once the item has them
            state.status = "passed" if job.max_examples is not None and not r.out_of_time else IDLE
        write_state(job, item, state, final=state.status in FINAL)
        return state


def _added(counts: dict[str, int], more: Any) -> dict[str, int]:
    """``counts`` with the counter ``more`` added (labels, scores)."""
    merged = dict(counts)
    for k, v in more.items():
        merged[k] = int(merged.get(k, 0)) + int(v)
    return merged


def _open_database(job: Job) -> Any:
    from hypothesis import settings

    from batchfuzz import profiles

    if not job.database:
        return None
    if job.database == "profile":
        return settings.get_profile(job.profile).database
    from batchfuzz.fuzz.database import open_database

    def lost(message: str) -> None:
        """A shared database lost mid-run: said on stderr, and kept for summary.json."""
        sys.stderr.write(f"batchfuzz: {message}\n")
        with contextlib.suppress(OSError):
            with open(job.run_dir / f"database-lost-{os.getpid()}.txt", "a") as fh:
                fh.write(message.replace("\n", " ") + "\n")

    return open_database(job.database, local_dir=profiles.database_path(), warn=lost)


def database_losses(job: Job) -> list[str]:
    """What the job processes said about losing the shared database (one line each, deduplicated)."""
    seen: list[str] = []
    for p in sorted(job.run_dir.glob("database-lost-*.txt")):
        with contextlib.suppress(OSError):
            for line in p.read_text().splitlines():
                if line and line not in seen:
                    seen.append(line)
    return seen


def _save_failure(job: Job, work: _Slice, failure: Any) -> dict[str, Any]:
    """The failure record of a slice's failure, its case saved to the corpus (an origin's smallest case kept)."""
    from batchfuzz.codec import literal
    from batchfuzz.fuzz import corpus
    from batchfuzz.reproduce import reproduction

    item, contract, executor = work.item, work.contract, work.executor
    found = {"seed": job.seed, "profile": job.profile, "worker": os.getpid()}
    repro = reproduction(failure, item.target)
    violates = _violates(job, work, failure)
    data = corpus.make_entry_data(failure, target=item.target, device=item.device, domain=work.domain, found=found,
                                  reproduction=repro, violates=violates)
    record: dict[str, Any] = {
        "property": failure.property, "during": failure.during, "spec": failure.spec, "kind": failure.kind(),
        "error_type": failure.error_type, "message": failure.message, "exit": failure.exit,
        "inputs": {k: literal(v) for k, v in failure.case.args.items()}, "reproduction": repro,
        "corpus_file": None, "new": False, "id": data["id"], "shrink_complete": failure.complete,
        # The origin (batchfuzz.fuzz.origin) and what orders its cases (corpus.case_order): the reports keep its smallest.
        "origin": data["origin"], "size": list(contract.size(failure.case)), "case": data["case"],
        "violates": violates,  # every property the case breaks: what joins wrong answers into one origin
    }
    try:
        try:
            started: float | None = (job.run_dir / "job.json").stat().st_mtime  # written when the run started
        except OSError:
            started = None
        saved = corpus.save_failure(job.corpus_dir, data, executor, job.example_timeout_s, run_started=started)
        record["corpus_file"], record["new"] = str(saved.path), saved.new
        record["replaced"] = [str(p) for p in saved.replaced]
    except OSError as exc:  # the failure stays in the report even if the corpus cannot be written
        record["corpus_error"] = f"{type(exc).__name__}: {exc}"
    return record


def _violates(job: Job, work: _Slice, failure: Any) -> list[str]:
    """Every property a wrong answer's shrunk case breaks (re-checked on the
    target, while the job's deadline allows), else its own property only."""
    from batchfuzz import runner

    if failure.kind() != "violation" or time.time() >= job.deadline:
        return [failure.property]
    found = runner.violated_properties(work.contract, work.executor, failure.case, timeout_s=job.example_timeout_s)
    return found if failure.property in found else [failure.property, *found]


def job_process_main(conn: Any, job_path: str, worker: str, owner: int, database: str | None = None) -> None:
    """A job process of the job in ``job_path``, opening ``database`` (the
    job's spec, which ``job.json`` holds only printable): say ``(None, READY, seconds)`` once started (its
    imports, its fork server: start-up, not charged to the budget), then take
    ``(item index, slice number, slice seconds, shrink seconds, deadline)``
    tasks from the controller until it sends None; answer each with
    ``(item index, status, seconds its target took to get ready)``. The
    deadline of a task is the job's as the controller has it then (it moves
    by the start-up it does not charge)."""
    from batchfuzz.execution import share_fork_server, start_fork_server, watch_owner

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller decides when to stop (the STOP file)
    watch_owner(owner)
    job = Job.load(job_path)
    job.database = database
    # Workers fork from the controller's fork server, which this process came from; where that cannot be shared,
    # from one of this process's own, started now so that its imports overlap this process's.
    if job.isolate and not share_fork_server():
        start_fork_server()
    try:
        import torch

        torch.set_num_threads(1)  # one core per job process
    except Exception:  # pragma: no cover - torch is a dependency
        pass
    from batchfuzz import engine_steps

    if any(i.contract == engine_steps.CONFORMANCE_SUBJECT for i in job.items):
        # vLLM's import and first configuration (tens of seconds) are this job process's start-up; a failure
        # here shows again in the item's slice, as its error.
        with contextlib.suppress(Exception):
            engine_steps.conformance(engine_steps.sample_workload(0))
    r = _JobProcess(job, worker)
    try:
        conn.send((None, READY, 0.0))
        while True:
            try:
                task = conn.recv()
            except (EOFError, OSError):
                return
            if task is None:
                return
            index, slice_no, slice_s, shrink_s, job.deadline = task
            state = r.run_slice(job.items[index], slice_no, slice_s, shrink_s)
            conn.send((index, state.status, r.last_startup_s))
    finally:
        r.close()


def _count_slice(state: ItemState, examples: int, began: float, startup_s: float) -> int:
    """Add one slice of ``examples`` examples, begun at ``began``, to an item's
    ``state``; return the item's examples before it. Of the slice's seconds,
    the ``startup_s`` its target took to get ready go to the item's
    ``startup_seconds``, the rest to its ``seconds`` (its fuzzing time, which its
    examples per second divide by): the same start-up the controller does not
    charge to the budget."""
    before = state.examples
    state.slices += 1
    state.examples = before + examples
    state.startup_seconds = round(state.startup_seconds + startup_s, 3)
    state.seconds = round(state.seconds + max(0.0, time.time() - began - startup_s), 3)
    return before
