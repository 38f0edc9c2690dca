"""The fuzz job's engine: a pytest plugin that runs work items, in parallel under pytest-xdist.

``batchfuzz fuzz`` (the controller, :mod:`batchfuzz.commands.fuzz`) writes a
job file, then runs ``pytest.main`` on the internal test module
:mod:`batchfuzz._fuzzjob_items` with ``-p batchfuzz.fuzzjob`` (this module)
and, for more than one worker, ``-n W`` (pytest-xdist). This plugin
parametrizes that module's single test with the job's work items (one per
contract x implementation-or-target x device); xdist hands the items to its
workers; each item runs every property of its contract round-robin through
:func:`batchfuzz.runner.hunt_for` for a time slice.

Everything a worker learns is written to disk as it happens, so that neither
the controller's progress display nor an interrupted run depends on pytest's
own reporting:

- ``<report>/items/NNN.json``: the item's state (examples, per-property
  status, event labels, failures), rewritten atomically after every hunt;
- ``<corpus>/<contract>/<id>.json``: each failure, the moment it is found;
- the Hypothesis example database (a directory database: saved immediately).

Stopping: the controller creates ``<report>/.run/STOP`` on SIGINT/SIGTERM;
every item checks it (and its own signal flag) before each hunt, stops, and
records itself as interrupted. Budget: an item starting with ``R`` items not
yet started and ``W`` workers gets ``(deadline - now) / ceil(R / W)`` seconds,
so the run ends near its budget whatever worker start-up cost, and with ``W``
workers every slice is about ``W`` times longer than with one.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

ITEMS_MODULE = "batchfuzz._fuzzjob_items"
JOB_OPTION = "--batchfuzz-job"

_signalled: list[int] = []
_worker_id = "main"  # the xdist worker id ("gw0", ...) in a worker, "main" when run in-process


@dataclass(frozen=True)
class WorkItem:
    index: int
    contract: str
    device: str
    implementation: str | None = None
    target: str | None = None

    @property
    def name(self) -> str:
        """``numpy@cpu`` for an implementation, ``target:MODULE:FUNCTION`` for a user's target."""
        return f"{self.implementation}@{self.device}" if self.implementation else f"target:{self.target}"

    @property
    def id(self) -> str:
        return f"{self.index:03d}-{self.contract}-{self.name}"


@dataclass
class Job:
    """Everything a worker needs, written by the controller as ``.run/job.json``."""

    items: list[WorkItem]
    report_dir: str
    corpus_dir: str
    database: str | None
    profile: str
    seed: int
    workers: int
    budget_s: float
    deadline: float  # wall clock (time.time()), shared by every process on the machine
    rounds: int | None = None
    round_examples: int = 50
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

    def save(self, path: Path) -> None:
        from batchfuzz.corpus import write_json_atomic

        data = asdict(self)
        write_json_atomic(path, data)

    @classmethod
    def load(cls, path: str | Path) -> Job:
        data = json.loads(Path(path).read_text())
        data["items"] = [WorkItem(**i) for i in data["items"]]
        return cls(**data)


def state_path(job: Job, item: WorkItem) -> Path:
    return job.items_dir / f"{item.index:03d}.json"


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


def stop_requested(job: Job) -> bool:
    return bool(_signalled) or job.stop_file.exists()


# --------------------------------------------------------------------------- pytest plugin


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(JOB_OPTION, action="store", default=None, help="(internal) the batchfuzz fuzz job file")


_JOB_KEY = pytest.StashKey[Job]()


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption(JOB_OPTION)
    if not path:
        return
    config.stash[_JOB_KEY] = Job.load(path)
    # Import the contracts (numpy, torch, every strategy) now, at start-up,
    # not inside the first item's time slice.
    from batchfuzz import registry, runner  # noqa: F401

    registry.contracts()
    global _worker_id
    workerinput = getattr(config, "workerinput", None)
    _worker_id = str(workerinput.get("workerid", "worker")) if workerinput else "main"
    if workerinput and threading.current_thread() is threading.main_thread():
        # A worker: the controller decides when to stop (it creates the STOP
        # file); a signal sent to the whole process group (Ctrl-C on a
        # terminal, a CI runner killing the job) only asks for the same
        # orderly stop, so the item in progress records what it found.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: _signalled.append(signum))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__ != ITEMS_MODULE or "work_item" not in metafunc.fixturenames:
        return
    job = metafunc.config.stash.get(_JOB_KEY, None)
    items = job.items if job is not None else []
    metafunc.parametrize("work_item", items, ids=[i.id for i in items])


@pytest.fixture
def batchfuzz_job(request: pytest.FixtureRequest) -> Job:
    job = request.config.stash.get(_JOB_KEY, None)
    if job is None:
        pytest.skip(f"no {JOB_OPTION} given: this module only runs under `batchfuzz fuzz`")
    return job


# --------------------------------------------------------------------------- one work item


def _claim(job: Job, item: WorkItem) -> int:
    """Mark ``item`` started; return how many items (this one included) are not yet started."""
    started = job.run_dir / "started"
    started.mkdir(parents=True, exist_ok=True)
    (started / str(item.index)).touch()
    return len(job.items) - len(os.listdir(started)) + 1


def _settings(job: Job) -> Any:
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    from batchfuzz import profiles

    profiles.register_profiles()
    base = settings.get_profile(job.profile)
    db = DirectoryBasedExampleDatabase(job.database) if job.database else None
    return settings(base, database=db)


def _resolve(item: WorkItem) -> tuple[Any, Any]:
    from batchfuzz import registry

    contract = registry.get(item.contract)
    if item.implementation is not None:
        return contract, contract.implementation(item.implementation).for_device(item.device)
    from batchfuzz.targets import load_target

    assert item.target is not None
    return contract, load_target(item.target)


def run_item(job: Job, item: WorkItem) -> dict[str, Any]:
    """Fuzz one work item within its slice; return (and keep writing) its state."""
    from batchfuzz import corpus, runner

    path = state_path(job, item)
    state: dict[str, Any] = {
        "index": item.index, "contract": item.contract, "name": item.name, "implementation": item.implementation,
        "target": item.target, "device": item.device, "status": "running", "reason": "",
        "worker": _worker_id, "pid": os.getpid(),
        "started": time.time(), "finished": None, "seconds": 0.0, "slice_seconds": 0.0,
        "examples": 0, "hunts": 0, "properties": {}, "events": {}, "scores": {}, "failures": [], "error": None,
        "settings": {},
    }

    def write() -> None:
        state["seconds"] = round(time.time() - state["started"], 3)
        corpus.write_json_atomic(path, state, fsync=state["status"] != "running")

    now = time.time()
    if stop_requested(job):
        state.update(status="not run", reason="interrupted before it started", finished=now)
        write()
        return state
    if now >= job.deadline:
        state.update(status="not run", reason="budget spent before it started", finished=now)
        write()
        return state
    remaining = _claim(job, item)
    slice_s = (job.deadline - now) / max(1, math.ceil(remaining / max(1, job.workers)))
    state["slice_seconds"] = round(slice_s, 3)
    base = _settings(job)
    state["settings"] = {
        "profile": job.profile, "derandomize": bool(base.derandomize),
        "database": repr(base.database) if base.database is not None else None,
        "examples_per_round": int(base.max_examples) if base.derandomize else (job.round_examples if job.rounds else "adaptive"),
        "seed": job.seed, "ci_env": os.environ.get("CI"),
    }
    write()
    try:
        import torch

        torch.set_num_threads(1)  # one core per worker: W workers, W cores
    except Exception:  # pragma: no cover
        pass
    accumulated: dict[str, runner.HuntResult] = {}
    slice_end = time.monotonic() + slice_s

    def round_examples(round_no: int) -> int:
        """Rounds sized to the slice: a round (every property once) should take
        about an eighth of it (at most 30 s), measured from the rounds so far;
        fixed with --rounds, so that a seeded run replays exactly."""
        if job.rounds:
            return job.round_examples
        examples = sum(a.examples for a in accumulated.values())
        seconds = sum(a.seconds for a in accumulated.values())
        if round_no == 0 or examples == 0 or seconds <= 0:
            return 10
        per_round_s = min(30.0, max(0.5, slice_s / 8), max(0.5, slice_end - time.monotonic()))
        n_props = max(1, len(accumulated))
        return max(5, min(500, int(examples / seconds * per_round_s / n_props)))

    def on_result(r: runner.HuntResult, acc: runner.HuntResult) -> None:
        accumulated[acc.property] = acc
        state["hunts"] += 1
        state["examples"] = sum(a.examples for a in accumulated.values())
        state["properties"] = {
            name: {"examples": a.examples, "seconds": round(a.seconds, 3), "status": "failed" if a.failure else "passed"}
            for name, a in accumulated.items()
        }
        events: dict[str, int] = {}
        scores: dict[str, int] = {}
        for a in accumulated.values():
            for k, v in a.events.items():
                events[k] = events.get(k, 0) + v
            for k, v in a.scores.items():
                scores[k] = scores.get(k, 0) + int(v)
        state["events"], state["scores"] = events, scores
        if r.failure is not None:
            state["failures"].append(_save_failure(job, item, r.failure, target))
        write()

    try:
        contract, target = _resolve(item)
        runner.hunt_for(
            contract, target, contract.properties, target_name=item.name, budget_s=slice_s, base_settings=base,
            seed=job.seed, round_examples=round_examples, stop_on_failure=False,
            deadline=slice_end, should_stop=lambda: stop_requested(job),
            on_result=on_result, max_rounds=job.rounds,
        )
    except Exception as exc:
        state["error"] = {"type": type(exc).__name__, "message": str(exc),
                          "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}
    interrupted = stop_requested(job)
    if state["error"] is not None:
        state["status"] = "error"
    elif interrupted:
        why = f"signal {_signalled[0]} to the worker" if _signalled else "the run was stopped (signal or watchdog)"
        found = f", after finding {len(state['failures'])} failure(s)" if state["failures"] else ""
        state["status"], state["reason"] = "interrupted", why + found
    else:
        state["status"] = "failed" if state["failures"] else "passed"
    state["finished"] = time.time()
    write()
    return state


def _save_failure(job: Job, item: WorkItem, failure: Any, target: Any) -> dict[str, Any]:
    from batchfuzz import corpus
    from batchfuzz.codec import literal

    found = {"seed": job.seed, "profile": job.profile, "worker": _worker_id}
    data = corpus.make_entry_data(failure, implementation=item.implementation, target=item.target, device=item.device,
                                  found=found)
    record: dict[str, Any] = {
        "property": failure.property, "spec": failure.spec, "kind": failure.kind(), "error_type": failure.error_type,
        "message": failure.message, "inputs": {k: literal(v) for k, v in failure.case.args.items()},
        "reproduction": data["reproduction"], "corpus_file": None, "new": False, "id": data["id"],
    }
    try:
        known = corpus.open_duplicate(job.corpus_dir, data, target)
        if known is not None:
            record["corpus_file"], record["new"] = str(known), False
        else:
            p, new = corpus.save(job.corpus_dir, data)
            record["corpus_file"], record["new"] = str(p), new
    except OSError as exc:  # the failure stays in the report even if the corpus cannot be written
        record["corpus_error"] = f"{type(exc).__name__}: {exc}"
    return record
