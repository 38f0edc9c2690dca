"""The nightly fuzz job (``batchfuzz fuzz``): real runs in subprocesses (two
job processes, a planted failing target, a SIGTERM halfway, ``CI=true`` in
the environment), plus the planning, scheduling, progress and report pieces
in-process.

Kept cheap: a handful of short subprocess runs (each pays Python + torch
start-up) and fast in-process checks.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import cli, output, registry
from batchfuzz.commands import fuzz as fuzz_command
from batchfuzz.fuzz import controller, corpus, report
from batchfuzz.fuzz.job import ItemState, Job, WorkItem, new_state
from batchfuzz.fuzz.progress import Progress
from tests.test_corpus import BUGGY, CONTRACT, FIXED

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    p = tmp_path / "planted_split.py"
    p.write_text(BUGGY)
    return p


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_"))}
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CI"] = "true"  # nightly must stay random and keep its database anyway
    env.update(extra)
    return env


def _fuzz_cmd(tmp_path: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "batchfuzz", "fuzz", "--report", str(tmp_path / "report"),
            "--corpus", str(tmp_path / "corpus"), "--progress", "lines", *args]


def _fuzz(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_fuzz_cmd(tmp_path, *args), cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _summary(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "report" / "summary.json").read_text())


def _db_files(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []


def _planted_args(planted: Path) -> list[str]:
    return ["--contract", CONTRACT, "--impl", "impl:numpy@cpu", "--impl", str(planted) + ":*",
            "--target", f"{CONTRACT}={planted}:split"]


# --------------------------------------------------------------------------- real runs


# Example counts, not seconds, drive the real runs: a budget far above what the
# examples need is only the ceiling, so a loaded machine changes how long a run
# takes, never its verdict.
EXAMPLES = 60
CEILING = "600s"


def test_planted_failure_on_two_workers_under_ci_reaches_the_corpus_and_the_test_run(tmp_path: Path, planted: Path) -> None:
    """The whole story: a nightly run with CI=true on 2 job processes finds the
    planted bug, saves it to the corpus and the database, writes the reports;
    the plain test run then fails on the corpus until the bug is fixed."""
    db = tmp_path / "db"
    r = _fuzz(tmp_path, "--workers", "2", "--max-examples", str(EXAMPLES), "--budget", CEILING, "--seed", "1",
              "--profile", "nightly", "--database", str(db), *_planted_args(planted), timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out  # the planted target fails
    s = _summary(tmp_path)
    assert not s["partial"] and s["status"] == "failed" and s["workers"] == 2 and s["profile"] == "nightly"
    impls = s["contracts"][CONTRACT]["implementations"]
    for i in impls.values():  # every item ran its examples, or stopped at its failure
        failed = {f["property"] for f in i["failures"]} | {f["during"] for f in i["failures"]}
        assert all(p["examples"] == EXAMPLES or name in failed for name, p in i["properties"].items()), i["properties"]
    assert set(impls) == {"impl:numpy@cpu", f"{planted}:split"}
    for i in impls.values():
        # CI=true is set, and still: random, with the database.
        assert i["settings"]["derandomize"] is False and i["settings"]["isolated"] is True
        assert "DirectoryBasedExampleDatabase" in i["settings"]["database"]
        assert i["examples"] > 0 and i["cases_per_second"] > 0 and i["coverage"]
        assert all(p["status"] != "not run" for p in i["properties"].values())  # every item ran
    assert _db_files(db), "the nightly profile under CI=true did not write the example database"
    assert impls["impl:numpy@cpu"]["status"] == "passed"
    target = impls[f"{planted}:split"]
    assert target["status"] == "failed" and target["failures"]
    saved = corpus.files(tmp_path / "corpus")
    assert saved and all(Path(f["corpus_file"]) in saved for f in s["failures"])
    assert all(f["corpus_file"] in out for f in s["failures"])
    md = (tmp_path / "report" / "summary.md").read_text()
    assert CONTRACT in md and "### Failures" in md and "```python" in md
    junit = ET.parse(tmp_path / "report" / "junit.xml").getroot()
    assert int(junit.find("testsuite").get("failures")) == len(s["failures"])  # type: ignore[union-attr,arg-type]
    # The plain test run replays the corpus (entries of a user's function are
    # replayed against the one named by BATCHFUZZ_REPLAY_TARGETS): red while
    # the bug is there, green once it is fixed.
    replay = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_corpus.py", "-k", "test_corpus_entry_passes"]
    env = _env(BATCHFUZZ_CORPUS=str(tmp_path / "corpus"), BATCHFUZZ_REPLAY_TARGETS=f"{CONTRACT}={planted}:split")
    red = subprocess.run(replay, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert red.returncode == 1 and "still violates" in red.stdout, red.stdout + red.stderr
    planted.write_text(FIXED)
    green = subprocess.run(replay, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert green.returncode == 0 and f"{len(saved)} passed" in green.stdout, green.stdout + green.stderr


def test_sigterm_halfway_leaves_partial_report_database_and_corpus(tmp_path: Path, planted: Path) -> None:
    db = tmp_path / "db"
    proc = subprocess.Popen(
        _fuzz_cmd(tmp_path, "--workers", "2", "--budget", "120s", "--profile", "nightly", "--database", str(db),
                  *_planted_args(planted)),
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    start = time.time()
    try:
        while time.time() - start < 90 and proc.poll() is None and not corpus.files(tmp_path / "corpus"):
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be interrupted"
        time.sleep(1.0)  # let it get on with the next slices
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "SIGTERM received" in out and "PARTIAL" in out
    s = _summary(tmp_path)
    assert s["partial"] is True and s["status"] == "interrupted" and "SIGTERM" in s["interrupted_by"]
    assert s["wall_seconds"] < 100  # it stopped, rather than running out its budget
    assert s["failures"] and all(Path(f["corpus_file"]).is_file() for f in s["failures"])
    assert corpus.files(tmp_path / "corpus") and _db_files(db)
    assert "PARTIAL" in (tmp_path / "report" / "summary.md").read_text()
    ET.parse(tmp_path / "report" / "junit.xml")


def test_a_budget_too_small_for_every_item_is_incomplete(tmp_path: Path) -> None:
    """Exit 3, and the reports name the items that did not run."""
    r = _fuzz(tmp_path, "--budget", "0.5s", "--no-database")
    assert r.returncode == 3, r.stdout + r.stderr
    s = _summary(tmp_path)
    assert s["status"] == "incomplete" and s["not_run"] and s["totals"]["items_not_run"] == len(s["not_run"])
    assert "incomplete" in (tmp_path / "report" / "summary.md").read_text()


def test_max_examples_runs_every_item_to_its_count(tmp_path: Path) -> None:
    """With --max-examples N every item runs exactly N examples (over as many
    slices as it takes) and the run ends when all have, passed, long before
    its ceiling of a budget."""
    items = controller.plan(fuzz_command.request(cli.build_parser().parse_args(["fuzz", "--contract", CONTRACT])))
    r = _fuzz(tmp_path, "--max-examples", str(EXAMPLES), "--budget", CEILING, "--no-database", "--contract", CONTRACT,
              timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    s = _summary(tmp_path)
    assert s["totals"]["items_not_run"] == 0 and s["status"] == "passed"
    assert s["totals"]["examples"] == EXAMPLES * len(items), s["totals"]
    props = [p for i in s["contracts"][CONTRACT]["implementations"].values() for p in i["properties"].values()]
    assert len(props) == len(items) and all(p["examples"] == EXAMPLES and p["status"] == "passed" for p in props)
    assert f"--max-examples {EXAMPLES}" in s["replay_command"]


# --------------------------------------------------------------------------- in-process pieces


@pytest.mark.parametrize("argv", [
    ["fuzz", "--contract", "no_such_contract"],
    ["fuzz", "--impl", "no_such_impl"],
    ["fuzz", "--target", "no_such_contract=x.py:f"],
    ["fuzz", "--target", f"{CONTRACT}=/no/such/file.py:f"],
    ["fuzz", "--database", "x", "--no-database"],
    ["fuzz", "--contract", CONTRACT, "--property", "no_such_property"],
], ids=["contract", "impl", "target-contract", "target-file", "database", "property"])
def test_usage_errors_exit_2(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, "--report", str(tmp_path / "r")]) == 2
    assert "batchfuzz: error:" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before anything ran


def test_unwritable_outputs_and_a_database_file_are_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    for extra in (["--report", str(blocked / "r")], ["--corpus", str(blocked / "c")], ["--database", str(blocked)]):
        assert cli.main(["fuzz", "--contract", CONTRACT, "--report", str(tmp_path / "r"), *extra]) == 2, extra
        assert "batchfuzz: error:" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["fuzz", "--workers", "0"], ["fuzz", "--budget", "soon"], ["fuzz", "--budget", "nan"], ["fuzz", "--budget", "inf"],
    ["fuzz", "--target", "nonsense"], ["fuzz", "--device", "tpu"], ["fuzz", "--shard", "3/2"],
])
def test_bad_option_values_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2


def test_cuda_without_a_gpu_is_a_usage_error(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert cli.main(["fuzz", "--device", "cuda", "--report", str(tmp_path / "r")]) == 2


def _plan(*argv: str) -> list[WorkItem]:
    return controller.plan(fuzz_command.request(cli.build_parser().parse_args(["fuzz", *argv])))


def test_plan_covers_every_contract_property_and_filters_by_glob(planted: Path) -> None:
    everything = _plan()
    expected = [(c.name, f"impl:{i.name}@cpu", p.name) for c in registry.contracts() for i in c.implementations
                if "cpu" in i.devices for p in c.properties]
    assert [(w.contract, w.target, w.property) for w in everything] == expected
    assert [w.index for w in everything] == list(range(len(everything)))
    only = _plan("--contract", CONTRACT, "--impl", f"{planted}:*", "--target", f"{CONTRACT}={planted}:split")
    assert {(w.contract, w.target) for w in only} == {(CONTRACT, f"{planted}:split")}
    assert len(only) == len(registry.get(CONTRACT).properties)
    props = _plan("--contract", CONTRACT, "--property", "m*_is_*")
    assert {w.property for w in props} == {p.name for p in registry.get(CONTRACT).properties if p.name.startswith("m")
                                           and "_is_" in p.name} and props
    first = CONTRACT[:5] + "*"
    assert {w.contract for w in _plan("--contract", first)} == {c.name for c in registry.contracts() if c.name.startswith(CONTRACT[:5])}


def test_shards_partition_the_plan() -> None:
    everything = {w.shard_key for w in _plan()}
    shards = [{w.shard_key for w in _plan("--shard", f"{k}/3")} for k in (1, 2, 3)]
    assert set().union(*shards) == everything and sum(len(s) for s in shards) == len(everything)


def _fake_job(tmp_path: Path) -> Job:
    items = [WorkItem(0, CONTRACT, "impl:numpy@cpu", "cpu", "p1"), WorkItem(1, CONTRACT, "m.py:f", "cpu", "p1"),
             WorkItem(2, "other_contract", "impl:torch@cpu", "cpu", "p1")]
    job = Job(items=items, report_dir=str(tmp_path), corpus_dir=str(tmp_path / "corpus"), database=None, profile="nightly",
              seed=1, workers=2, budget_s=60.0, deadline=time.time() + 60)
    job.items_dir.mkdir(parents=True, exist_ok=True)
    return job


def _state(item: WorkItem, status: str, examples: int, failures: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An item's state file as a job process writes it (JSON)."""
    return dataclasses.replace(new_state(item), status=status, started=time.time() - 2, seconds=2.0, slices=2,
                               examples=examples, failures=failures or [], events={"R == 1": examples // 2},
                               worker="job-0").to_json()


_FAILURE = {"property": "p1", "during": "", "spec": "spec", "kind": "violation", "error_type": "PropertyViolation",
            "message": "boom\nmore", "inputs": {"num_reqs": "3"}, "reproduction": "f(3, 5)", "corpus_file": "/c/x.json",
            "new": True, "id": "abc"}


def test_progress_table_on_a_terminal_and_lines_otherwise(tmp_path: Path) -> None:
    job = _fake_job(tmp_path)
    output.write_json_atomic(job.items_dir / "0000.json", _state(job.items[0], "idle", 100))
    output.write_json_atomic(job.items_dir / "0001.json", _state(job.items[1], "running", 10, [_FAILURE]))
    tty = io.StringIO()
    p = Progress(tty, job, time.time(), tty=True)
    p.update()
    p.update()
    text = tty.getvalue()
    assert "\x1b[2K" in text and "\x1b[4F" in text  # drawn, then redrawn in place (header, column names, 2 contracts)
    assert "s budget left" in text and "2/2" in text and "m.py:f p1" in text
    plain = io.StringIO()
    q = Progress(plain, job, time.time(), tty=False, heartbeat_s=0.0)
    q.update()
    q.update()
    lines = plain.getvalue().splitlines()
    assert "\x1b" not in plain.getvalue()
    assert sum(line.startswith("FAILURE") for line in lines) == 1 and "/c/x.json (new)" in plain.getvalue()
    assert any(line.startswith("...") and "2/3 items run" in line for line in lines)


def test_reports_from_states(tmp_path: Path) -> None:
    job = _fake_job(tmp_path)
    states = {0: ItemState.from_json(_state(job.items[0], "passed", 100), "0"),
              1: ItemState.from_json(_state(job.items[1], "interrupted", 10, [_FAILURE]), "1"),
              2: dataclasses.replace(new_state(job.items[2]), status="not run", reason="interrupted before it started")}
    s = report.build_summary(job, states, report.RunEnd(started=time.time() - 5, finished=time.time(), partial=True,
                                                        interrupted_by="SIGTERM received"))
    assert s["partial"] and s["status"] == "interrupted" and s["totals"]["examples"] == 110 and s["totals"]["failures"] == 1
    c = s["contracts"][CONTRACT]
    assert c["cases_per_second"] == 27.5 and c["coverage"]["R == 1"] == {"examples": 55, "fraction": 0.5}
    assert s["contracts"]["other_contract"]["implementations"]["impl:torch@cpu"]["status"] == "not run"
    paths = report.write_reports(tmp_path, s)
    assert json.loads(paths[0].read_text())["partial"] is True
    md = paths[1].read_text()
    assert "PARTIAL" in md and "| split_dummy_tokens | `impl:numpy@cpu` | passed | 100 |" in md and "f(3, 5)" in md
    root = ET.parse(paths[2]).getroot()
    suites = {x.get("name"): x for x in root.iter("testsuite")}
    assert suites[CONTRACT].get("failures") == "1" and suites["other_contract"].get("skipped") == "1"


def test_an_unshrunk_case_says_so_everywhere_and_junit_carries_the_inputs(tmp_path: Path) -> None:
    """A failure whose shrink the deadline cut (``shrink_complete: false``) is
    not shown as final: the terminal, summary.md, index.html and junit.xml say
    so (issue 37 item 2); each JUnit failure carries its shrunk inputs and its
    reproduction, escaped by the XML library (item 7)."""
    job = _fake_job(tmp_path)
    hostile = {**_FAILURE, "inputs": {"num_reqs": "169", "num_tokens": "215"}, "shrink_complete": False,
               "reproduction": "f(169, 215)  # </failure><x a=\"&\">"}
    for index, failures in ((0, []), (1, [hostile]), (2, [])):
        output.write_json_atomic(job.items_dir / f"{index:04d}.json", _state(job.items[index], "failed" if failures
                                                                              else "passed", 10, failures))

    class Done:
        stop_reason = None
        signum = None

    out = io.StringIO()
    controller.finish(job, Done(), out, time.time() - 1)
    terminal = out.getvalue()
    assert "NOT FULLY SHRUNK" in terminal.split("FAILED ", 1)[1], terminal
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["origins"][0]["shrink_complete"] is False and s["failures"][0]["shrink_complete"] is False
    assert "NOT FULLY SHRUNK" in (tmp_path / "summary.md").read_text()
    assert "NOT FULLY SHRUNK" in (tmp_path / "index.html").read_text()
    (failure,) = ET.parse(tmp_path / "junit.xml").getroot().iter("failure")
    assert "NOT FULLY SHRUNK" in (failure.get("message") or "")
    body = failure.text or ""
    assert "num_reqs=169, num_tokens=215" in body and str(hostile["reproduction"]) in body
    # A shrink that completed is shown as it is, with no such word.
    done = {**hostile, "shrink_complete": True}
    output.write_json_atomic(job.items_dir / "0001.json", _state(job.items[1], "failed", 10, [done]))
    out = io.StringIO()
    controller.finish(job, Done(), out, time.time() - 1)
    assert "NOT FULLY SHRUNK" not in out.getvalue() + (tmp_path / "junit.xml").read_text()


@pytest.mark.skipif(not os.environ.get("BATCHFUZZ_MEASURE"), reason="a measurement, not a test: set BATCHFUZZ_MEASURE=1 "
                    "on a machine with 2 idle cores")
def test_two_workers_run_about_twice_the_examples_of_one(tmp_path: Path) -> None:
    budget = os.environ.get("BATCHFUZZ_MEASURE_BUDGET", "60s")
    totals = {}
    for w in (1, 2):
        d = tmp_path / f"w{w}"
        d.mkdir()
        r = _fuzz(d, "--workers", str(w), "--budget", budget, "--profile", "nightly", "--seed", "1", "--no-database", timeout=600)
        assert r.returncode in (0, 1), r.stdout + r.stderr
        s = _summary(d)
        totals[w] = s["totals"]["examples"]
        for name, c in s["contracts"].items():
            print(f"workers={w} {name}: {c['examples']} examples, {c['cases_per_second']} cases/s per worker")
        print(f"workers={w}: {totals[w]} examples in {s['wall_seconds']}s ({s['totals']['throughput']}/s)")
    assert totals[2] >= 1.6 * totals[1], totals


def test_start_up_is_not_charged_to_the_budget(tmp_path: Path) -> None:
    """The budget's clock starts when every job process is ready (the deadline
    slides until then), or at the wait's bound; a slice's target start-up
    moves the deadline on by its share per job process, at most one budget in all."""
    item = WorkItem(0, CONTRACT, "impl:numpy@cpu", "cpu", "matches_oracle", None)

    def scheduler() -> Any:
        job = Job(items=[item], report_dir=str(tmp_path), corpus_dir=str(tmp_path), database=None, profile="dev", seed=1,
                  workers=2, budget_s=10.0, deadline=0.0)
        s = controller._Scheduler(job, tmp_path / "job.json", io.StringIO(), None)
        s.started, s.processes = 100.0, {0: (None, None), 1: (None, None)}
        return s

    s = scheduler()
    s.start_clock(130.0, wait_until=1000.0)  # the job processes are still starting
    assert s.job.deadline == 140.0 and s.clock_from is None
    s.ready = {0}
    s.start_clock(140.0, wait_until=1000.0)  # one of two
    assert s.job.deadline == 150.0 and s.clock_from is None
    s.ready = {0, 1}
    s.start_clock(150.0, wait_until=1000.0)
    assert (s.job.deadline, s.clock_from, s.startup_s) == (160.0, 150.0, 50.0)
    s.start_clock(155.0, wait_until=1000.0)  # the clock starts once
    assert s.job.deadline == 160.0
    s.uncharge(4.0)  # two job processes: 2 s of the deadline
    assert s.job.deadline == 162.0
    s.uncharge(100.0)  # one budget in all
    assert s.uncharged_s == 10.0 and s.job.deadline == 170.0
    s = scheduler()
    s.start_clock(200.0, wait_until=200.0)  # no job process ready, but the wait is over
    assert (s.job.deadline, s.clock_from) == (210.0, 200.0)


def test_max_examples_the_budget_cuts_short_is_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The budget stays the ceiling of a --max-examples run: an item it ends
    short of its examples makes the run incomplete (exit 3), naming the item."""
    code = cli.main(["fuzz", "--contract", CONTRACT, "--impl", "impl:numpy@cpu", "--property", "matches_oracle",
                     "--max-examples", "1000000000", "--budget", "1s", "--no-database", "--progress", "none",
                     "--report", str(tmp_path / "report"), "--corpus", str(tmp_path / "corpus")])
    out = capsys.readouterr().out
    s = _summary(tmp_path)
    assert code == 3 and s["status"] == "incomplete", out
    prop = s["contracts"][CONTRACT]["implementations"]["impl:numpy@cpu"]["properties"]["matches_oracle"]
    if prop["examples"]:  # (a machine too loaded to run one example in the budget: the item is "not run", as incomplete)
        assert any("ran fewer than the 1000000000 examples of --max-examples" in n and "matches_oracle" in n for n in s["notes"])
        assert prop["examples"] < 1000000000 and "(--max-examples)" in prop["reason"]


def test_the_default_budget_is_a_minute_or_what_every_items_first_slice_needs() -> None:
    """Given no --budget, a run gets DEFAULT_BUDGET_S, or more where its work
    items need more for their first slices (so the quick start's `batchfuzz fuzz`
    runs every item however many contracts are registered)."""
    from batchfuzz.fuzz.controller import default_budget, minimum_budget
    from batchfuzz.fuzz.settings import DEFAULT_BUDGET_S

    assert default_budget(10, 1) == DEFAULT_BUDGET_S
    many = 4 * int(DEFAULT_BUDGET_S)
    assert minimum_budget(many, 1) > DEFAULT_BUDGET_S and default_budget(many, 1) == minimum_budget(many, 1)
    assert default_budget(many, 8) == max(DEFAULT_BUDGET_S, minimum_budget(many, 8))
    assert cli.build_parser().parse_args(["fuzz"]).budget is None


class _Conn:
    """A job process's end of the pipe, for the scheduler alone: what it is sent goes to ``sent``."""

    def __init__(self, sent: list[Any]) -> None:
        self.sent = sent

    def send(self, message: Any) -> None:
        self.sent.append(message)


@pytest.mark.parametrize("processes,targets", [(4, 10), (2, 3), (3, 1)])
def test_job_processes_keep_their_targets_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  processes: int, targets: int) -> None:
    """The controller hands a job process the items of targets whose workers
    it keeps: over ten rounds of slices finishing in random order, each job
    process's own executor cache (``_JobProcess.executor``, the worker starts
    counted) starts few workers, while every item still gets its first slice
    before any its second and no item falls two slices behind another. Round
    robin alone (before this) started a worker in most slices of four job
    processes over ten targets: 40 of the 81 CUDA items of run 10
    (docs/gpu-results.md) ran at under half their ceiling for it."""
    import random

    from batchfuzz import execution
    from batchfuzz.fuzz import job as job_module

    started: list[tuple[str, str, str]] = []

    class Worker:
        def close(self) -> None:
            pass

    def executor_for(contract: Any, target: str, *, isolate: bool, device: str) -> Worker:
        started.append((contract.name, target, device))
        return Worker()

    monkeypatch.setattr(execution, "executor_for", executor_for)
    props = [prop.name for prop in registry.get(CONTRACT).properties][:8]
    items = [WorkItem(len(props) * t + p, CONTRACT, f"mod{t}:split", "cpu", prop)
             for t in range(targets) for p, prop in enumerate(props)]
    job = Job(items=items, report_dir=str(tmp_path), corpus_dir=str(tmp_path), database=None, profile="dev", seed=1,
              workers=processes, budget_s=1000.0, deadline=time.time() + 1000.0)
    s = controller._Scheduler(job, tmp_path / "job.json", io.StringIO(), None)
    sent: list[Any] = []  # (item index, its slice number, ...) as the scheduler sends them, to every job process
    s.processes = {n: (None, _Conn(sent)) for n in range(processes)}
    s.ready = set(s.processes)
    own = {n: job_module._JobProcess(job, f"job-{n}") for n in s.processes}
    contract = registry.get(CONTRACT)
    rng = random.Random(0)
    rounds = 10
    while min(s.slices.values()) < rounds:
        s.dispatch()
        number = rng.choice(sorted(s.busy))  # a slice ends: which one is the machine's business
        own[number].executor(contract, items[s.busy.pop(number)])
        assert max(s.slices.values()) - min(s.slices.values()) <= 2, s.slices
    order = [index for index, *_ in sent]
    assert len(set(order[:len(items)])) == len(items), "an item had its second slice before every item had its first"
    slices = len(order)
    # A worker per target, and a few more where a job process has to take another's target to keep the rounds even.
    assert len(started) <= targets + 2 * processes, (len(started), slices)
    print(f"{processes} job processes, {targets} targets: {len(started)} workers started over {slices} slices")


def test_an_items_seconds_leave_out_its_targets_start_up(tmp_path: Path) -> None:
    """An item's ``seconds`` are its fuzzing time: the seconds its target took
    to get ready in a slice (a worker started, a target that sleeps a second
    and a half at import) go to its ``startup_seconds``, which the summary
    shows per property, so its examples per second are not charged the start-up
    either. A second slice on the kept worker adds none. (Run 11 on the H200:
    the first property of two CUDA targets showed under half its ceiling for
    the worker start in its first slice.)"""
    from batchfuzz.fuzz.job import _JobProcess, read_state

    slow = tmp_path / "slow_split.py"
    slow.write_text("import time\ntime.sleep(1.5)\n" + FIXED)
    item = WorkItem(0, CONTRACT, f"{slow}:split", "cpu", "matches_oracle")
    job = Job(items=[item], report_dir=str(tmp_path / "report"), corpus_dir=str(tmp_path / "corpus"), database=None,
              profile="dev", seed=1, workers=1, budget_s=600.0, deadline=time.time() + 600.0)
    process = _JobProcess(job, "w0")
    try:
        walls = []
        for number in range(2):
            began = time.time()
            state = process.run_slice(item, number, 0.5, 0.5)
            walls.append(time.time() - began)
            assert state.status in ("idle", "passed"), state
            if number == 0:
                assert process.last_startup_s >= 1.5 and state.startup_seconds >= 1.5, state
                first, (worker,) = state.startup_seconds, process.executors.values()
            else:
                assert list(process.executors.values()) == [worker]  # the worker was kept: no import again
                assert state.startup_seconds == pytest.approx(first + process.last_startup_s, abs=0.002), state
        assert state.seconds + state.startup_seconds <= sum(walls) + 0.01, (state, walls)
        assert state.examples > 0 and state.slices == 2
    finally:
        process.close()
    summary = report.build_summary(job, {0: read_state(job, item)}, report.RunEnd(started=time.time() - 10,
                                                                                   finished=time.time()))
    prop = summary["contracts"][CONTRACT]["implementations"][item.name]["properties"]["matches_oracle"]
    assert prop["startup_seconds"] == state.startup_seconds and prop["seconds"] == state.seconds, prop
