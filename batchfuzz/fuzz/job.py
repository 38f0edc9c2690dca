"""The fuzz job's model and its job processes.

``batchfuzz fuzz`` (the controller, :mod:`batchfuzz.fuzz.controller`) plans
work items, one per contract x target x property x device (and, nightly,
the scheduler model's conformance to vLLM's scheduler), and hands them
out in *slices* of time to ``--workers`` job processes. A job process
(:func:`job_process_main`) runs each slice as one Hypothesis hunt of the item's
property, generating until the slice ends (a failure found by then is shrunk
until the job's deadline) or, with the job's ``max_examples`` (``fuzz
--max-examples N``), until the item has N examples over all its slices,
which ends it as passed; the target itself runs in an executor
(``batchfuzz.execution``): an isolated worker process the job process starts
(which runs one example while the job process draws the next: ``runner.hunt``'s
``overlap``), or the job process itself with ``--no-isolation``. Job processes are made by the same process
mechanism as those workers (``execution.process_context``), so the whole job
has one.

Everything a job process learns is written to disk as it happens, so that neither
the controller's display nor an interrupted run depends on a process staying
alive:

- ``<report>/items/NNNN.json``: the item's accumulated state (examples,
  seconds, slices, event labels, scores, its failure), rewritten atomically
  after every slice;
- ``<corpus>/<contract>/<id>.json``: a failure, the moment it is found;
- the Hypothesis example database (a directory, or a shared Redis server
  with a local copy: ``batchfuzz.fuzz.database``).

Stopping: the controller creates ``<report>/.run/STOP`` on SIGINT/SIGTERM;
every job process polls it between examples and stops, recording what it has.
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
    extra: dict[str, Any] = field(default_factory=dict)

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


def read_states(items_dir: Path | str) -> dict[int, dict[str, Any]]:
    """Every item state written so far, by item index (unreadable files skipped)."""
    out: dict[int, dict[str, Any]] = {}
    d = Path(items_dir)
    if not d.is_dir():
        return out
    for p in d.glob("*.json"):
        try:
            s = json.loads(p.read_text())
            out[int(s["index"])] = s
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def new_state(item: WorkItem) -> dict[str, Any]:
    return {
        "index": item.index, "contract": item.contract, "target": item.target, "name": item.name, "device": item.device,
        "property": item.property, "domain": item.domain, "status": WAITING, "reason": "", "worker": None, "pid": None,
        "started": None, "finished": None, "seconds": 0.0, "startup_seconds": 0.0, "slices": 0, "examples": 0,
        "events": {}, "scores": {}, "failures": [], "error": None, "settings": {},
    }


def read_state(job: Job, item: WorkItem) -> dict[str, Any]:
    try:
        return dict(json.loads(state_path(job, item).read_text()))
    except (OSError, ValueError):
        return new_state(item)


def write_state(job: Job, item: WorkItem, state: dict[str, Any], *, final: bool = False) -> None:
    from batchfuzz.output import write_json_atomic

    write_json_atomic(state_path(job, item), state, fsync=final)


def stop_requested(job: Job) -> bool:
    return job.stop_file.exists()


# --------------------------------------------------------------------------- a job process


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

    def _begin(self, item: WorkItem) -> dict[str, Any]:
        """``item``'s state, marked running in this job process (and written)."""
        state = read_state(self.job, item)
        state.update(status=RUNNING, worker=self.worker, pid=os.getpid())
        state["started"] = state["started"] or time.time()
        write_state(self.job, item, state)
        return state

    def _errored(self, item: WorkItem, state: dict[str, Any], exc: Exception, began: float) -> dict[str, Any]:
        """A slice that raised: ``item`` ends as an ``error`` with the exception (its final state, written)."""
        state.update(status="error", error={"type": type(exc).__name__, "message": str(exc),
                                            "traceback": traceback.format_exc()})
        state["seconds"] = round(float(state["seconds"]) + time.time() - began, 3)
        write_state(self.job, item, state, final=True)
        return state

    def run_slice(self, item: WorkItem, slice_no: int, slice_s: float, shrink_s: float) -> dict[str, Any]:
        """Fuzz ``item`` for ``slice_s`` seconds from when its target is ready
        (a failure found by then is shrunk for ``shrink_s`` more), within the
        job's deadline, and for no more examples than the job's
        ``max_examples`` leaves it (:meth:`settings`); return (and write) its state. The seconds its target
        took to get ready (a worker started, the target imported) are
        ``self.last_startup_s``: the controller does not charge them to the budget."""
        from batchfuzz import engine_steps, live_engine, registry, runner

        if item.contract == engine_steps.CONFORMANCE_SUBJECT:
            return self.run_conformance_slice(item, slice_no, slice_s, shrink_s)
        if item.contract == live_engine.SUBJECT:
            return self.run_live_slice(item, slice_no, slice_s, shrink_s)
        job = self.job
        state = self._begin(item)
        began = time.time()
        self.last_startup_s = 0.0
        try:
            contract = registry.get(item.contract)
            executor = self.executor(contract, item)
            info = executor.describe()
            self.last_startup_s = time.time() - began
            if info.get("error"):
                raise RuntimeError(info["error"])
            # Starting the target's worker (and importing it) is not the item's fuzzing time: the slice starts now.
            slice_end = min(job.deadline, time.time() + slice_s)
            shrink_until = min(job.deadline, slice_end + shrink_s)
            domain = registry.choose_domain(item.domain, info.get("domain"))
            rs = self.settings(int(state["examples"]))
            state["settings"] = {"profile": job.profile, "derandomize": bool(rs.derandomize), "isolated": job.isolate,
                                 "database": repr(rs.database) if rs.database is not None else None, "domain": domain,
                                 "seed": job.seed, "timeout": job.example_timeout_s, "max_examples": job.max_examples}
            r = runner.hunt(contract, executor, contract.property(item.property), target_name=item.target, run_settings=rs,
                            seed=runner._round_seed(job.seed, item.contract, item.target, item.property, slice_no),
                            domain=domain, deadline=shrink_until, generate_until=slice_end,
                            example_timeout_s=job.example_timeout_s, labels=job.labels,
                            should_stop=lambda: stop_requested(job))
        except Exception as exc:
            return self._errored(item, state, exc, began)
        examples_before = _count_slice(state, r.examples, began, self.last_startup_s)
        for key, counter in (("events", r.events), ("scores", r.scores)):
            merged = dict(state[key])
            for k, v in counter.items():
                merged[k] = int(merged.get(k, 0)) + int(v)
            state[key] = merged
        if r.failure is not None:
            record = _save_failure(job, item, contract, executor, r.failure, domain)
            # Which of the item's examples failed first, and when: 1 for a failure the
            # example database replayed at the start of the item's first slice.
            if r.first_failure_example is not None:
                record["found_at_example"] = examples_before + r.first_failure_example
                record["found_at_time"] = r.first_failure_time
            state["failures"].append(record)
            state["status"] = "failed"
        elif stop_requested(job):
            state.update(status="interrupted", reason="the run was stopped (signal)")
        elif (rs.derandomize or job.max_examples is not None) and not r.out_of_time:
            # Done: a derandomized stream once it has run (another slice would replay it); with --max-examples, once
            # the item has its examples (or Hypothesis has exhausted the domain before).
            state["status"] = "passed"
        else:
            state["status"] = IDLE
        write_state(job, item, state, final=state["status"] in FINAL)
        return state

    def run_conformance_slice(self, item: WorkItem, slice_no: int, slice_s: float, shrink_s: float) -> dict[str, Any]:
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
        state["settings"] = {"profile": job.profile, "derandomize": bool(rs.derandomize), "isolated": False,
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
            state["failures"].append({
                "property": engine_steps.CONFORMANCE, "during": "", "spec": engine_steps.CONFORMANCE_SPEC, "kind": "violation",
                "error_type": "ConformanceDifference", "message": "; ".join(r.differences), "exit": None,
                "inputs": {"workload": r.workload}, "reproduction": r.reproduction(), "corpus_file": None, "new": False,
                "id": None, "shrink_complete": not r.out_of_time,
                "found_at_example": examples_before + (r.first_failure_example or 0)})
            state["status"] = "failed"
        elif stop_requested(job):
            state.update(status="interrupted", reason="the run was stopped (signal)")
        elif rs.derandomize and not r.out_of_time:
            state["status"] = "passed"
        else:
            state["status"] = IDLE
        write_state(job, item, state, final=state["status"] in FINAL)
        return state

    def run_live_slice(self, item: WorkItem, slice_no: int, slice_s: float, shrink_s: float) -> dict[str, Any]:
        """A live-engine item (``batchfuzz.live_engine``, docs/live-engine.md): vLLM's whole engine, started once
        in this process (its import and start are the item's start-up), searched for a workload that breaks the
        item's property; a failure is the shrunk workload with a reproduction script (no corpus entry)."""
        from batchfuzz import live_engine, runner

        job, began = self.job, time.time()
        state = self._begin(item)
        self.last_startup_s = 0.0
        rs = self.settings(int(state["examples"]))
        state["settings"] = {"profile": job.profile, "isolated": False, "database": None, "seed": job.seed,
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
            state["failures"].append(live_engine.failure_record(r, item.property, before))
            state["status"] = "failed"
        elif stop_requested(job):
            state.update(status="interrupted", reason="the run was stopped (signal)")
        else:  # with --max-examples, done once the item has them
            state["status"] = "passed" if job.max_examples is not None and not r.out_of_time else IDLE
        write_state(job, item, state, final=state["status"] in FINAL)
        return state


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


def _save_failure(job: Job, item: WorkItem, contract: Any, executor: Any, failure: Any, domain: str) -> dict[str, Any]:
    from batchfuzz.codec import literal
    from batchfuzz.fuzz import corpus
    from batchfuzz.reproduce import reproduction

    found = {"seed": job.seed, "profile": job.profile, "worker": os.getpid()}
    repro = reproduction(failure, item.target)
    violates = _violates(job, contract, executor, failure)
    data = corpus.make_entry_data(failure, target=item.target, device=item.device, domain=domain, found=found,
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


def _violates(job: Job, contract: Any, executor: Any, failure: Any) -> list[str]:
    """Every property a wrong answer's shrunk case breaks (re-checked on the
    target, while the job's deadline allows), else its own property only."""
    from batchfuzz import runner

    if failure.kind() != "violation" or time.time() >= job.deadline:
        return [failure.property]
    found = runner.violated_properties(contract, executor, failure.case, timeout_s=job.example_timeout_s)
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
    from batchfuzz.execution import start_fork_server, watch_owner

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller decides when to stop (the STOP file)
    watch_owner(owner)
    job = Job.load(job_path)
    job.database = database
    if job.isolate:
        start_fork_server()  # this process's own (the controller's is not reachable from here): start it early
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
            conn.send((index, state["status"], r.last_startup_s))
    finally:
        r.close()


def _count_slice(state: dict[str, Any], examples: int, began: float, startup_s: float) -> int:
    """Add one slice of ``examples`` examples, begun at ``began``, to an item's
    ``state``; return the item's examples before it. Of the slice's seconds,
    the ``startup_s`` its target took to get ready go to the item's
    ``startup_seconds``, the rest to its ``seconds`` (its fuzzing time, which its
    examples per second divide by): the same start-up the controller does not
    charge to the budget."""
    before = int(state["examples"])
    state["slices"] = int(state["slices"]) + 1
    state["examples"] = before + examples
    state["startup_seconds"] = round(float(state.get("startup_seconds", 0.0)) + startup_s, 3)
    state["seconds"] = round(float(state["seconds"]) + max(0.0, time.time() - began - startup_s), 3)
    return before
