"""The nightly fuzz job (``batchfuzz fuzz``): real runs in subprocesses, with
pytest-xdist workers, a planted failing target, a SIGTERM halfway, ``CI=true``
in the environment; plus the planning, progress, report and workflow pieces
in-process.

Kept cheap: a handful of short subprocess runs (each pays Python + torch
start-up) and fast in-process checks.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import cli, corpus, fuzzjob, registry, report
from batchfuzz.commands import fuzz
from batchfuzz.fuzzjob import Job, WorkItem
from batchfuzz.progress import Progress
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


def _first_impl() -> str:
    return registry.get(CONTRACT).implementations[0].name


def _planted_args(planted: Path) -> list[str]:
    return ["--contract", CONTRACT, "--impl", _first_impl(), "--impl", "target:*", "--target", f"{CONTRACT}={planted}:split"]


# --------------------------------------------------------------------------- real runs


def test_planted_failure_on_two_workers_under_ci_reaches_the_corpus_and_the_test_run(tmp_path: Path, planted: Path) -> None:
    """The whole story: a nightly run with CI=true on 2 xdist workers finds the
    planted bug, saves it to the corpus and the database, writes the reports;
    the plain test run then fails on the corpus until the bug is fixed."""
    db = tmp_path / "db"
    r = _fuzz(tmp_path, "--workers", "2", "--budget", "120s", "--rounds", "1", "--profile", "nightly", "--database", str(db),
              *_planted_args(planted))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out  # the planted target fails
    s = _summary(tmp_path)
    assert not s["partial"] and s["status"] == "failed" and s["workers"] == 2 and s["profile"] == "nightly"
    items = s["contracts"][CONTRACT]["implementations"]
    assert set(items) == {f"{_first_impl()}@cpu", f"target:{planted}:split"}
    assert {i["worker"] for i in items.values()} <= {"gw0", "gw1"}  # run by xdist workers
    for i in items.values():
        # CI=true is set, and still: random, with the shared database.
        assert i["settings"]["ci_env"] == "true"
        assert i["settings"]["derandomize"] is False
        assert "DirectoryBasedExampleDatabase" in i["settings"]["database"]
        assert i["examples"] > 0 and i["cases_per_second"] > 0 and i["coverage"]
    assert _db_files(db), "the nightly profile under CI=true did not write the example database"
    assert items[f"{_first_impl()}@cpu"]["status"] == "passed"
    target = items[f"target:{planted}:split"]
    assert target["status"] == "failed" and target["failures"]
    saved = corpus.files(tmp_path / "corpus")
    assert len(saved) == len(s["failures"]) and all(f["new"] for f in s["failures"])
    for f in s["failures"]:
        assert Path(f["corpus_file"]) in saved and f["corpus_file"] in out
    assert s["contracts"][CONTRACT]["coverage"] and s["totals"]["throughput"] > 0
    md = (tmp_path / "report" / "summary.md").read_text()
    assert CONTRACT in md and "### Failures" in md and "```python" in md
    junit = ET.parse(tmp_path / "report" / "junit.xml").getroot()
    assert int(junit.find("testsuite").get("failures")) == len(s["failures"])  # type: ignore[union-attr,arg-type]
    # The plain test run replays the corpus: red while the bug is there, green once it is fixed.
    replay = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_corpus.py", "-k", "test_corpus_entry_passes"]
    env = _env(BATCHFUZZ_CORPUS=str(tmp_path / "corpus"))
    red = subprocess.run(replay, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert red.returncode == 1 and "still violates" in red.stdout, red.stdout + red.stderr
    planted.write_text(FIXED)
    green = subprocess.run(replay, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
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
        time.sleep(1.0)  # let it get on with the next hunts
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
    statuses = {i["status"] for i in s["contracts"][CONTRACT]["implementations"].values()}
    assert "interrupted" in statuses
    assert s["failures"] and all(Path(f["corpus_file"]).is_file() for f in s["failures"])
    assert corpus.files(tmp_path / "corpus") and _db_files(db)
    assert "PARTIAL" in (tmp_path / "report" / "summary.md").read_text()
    ET.parse(tmp_path / "report" / "junit.xml")


def test_seeded_item_replays_exactly_and_a_known_failure_is_not_saved_twice(tmp_path: Path, planted: Path) -> None:
    """One work item, run in-process twice with the same seed and rounds: the
    same examples, the same shrunk failures, and nothing new in the corpus."""
    item = WorkItem(0, CONTRACT, "cpu", target=f"{planted}:split")

    def once(name: str) -> dict[str, Any]:
        job = Job(items=[item], report_dir=str(tmp_path / name), corpus_dir=str(tmp_path / "corpus"), database=None,
                  profile="nightly", seed=7, workers=1, budget_s=120.0, deadline=time.time() + 120, rounds=1)
        job.items_dir.mkdir(parents=True)
        return fuzzjob.run_item(job, item)

    first, second = once("a"), once("b")
    assert first["status"] == second["status"] == "failed"
    assert first["properties"] == {k: dict(v, seconds=first["properties"][k]["seconds"]) for k, v in second["properties"].items()}
    assert [f["id"] for f in first["failures"]] == [f["id"] for f in second["failures"]]
    assert all(f["new"] for f in first["failures"]) and not any(f["new"] for f in second["failures"])
    assert len(corpus.files(tmp_path / "corpus")) == len(first["failures"])
    assert json.loads((tmp_path / "a" / "items" / "000.json").read_text())["status"] == "failed"


def test_a_budget_too_small_to_run_anything_says_so(tmp_path: Path) -> None:
    r = _fuzz(tmp_path, "--budget", "0.001s", "--contract", CONTRACT, "--no-database")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "too small" in r.stdout
    assert _summary(tmp_path)["totals"]["examples"] == 0


# --------------------------------------------------------------------------- in-process pieces


@pytest.mark.parametrize("argv", [
    ["fuzz", "--contract", "no_such_contract"],
    ["fuzz", "--impl", "no_such_impl"],
    ["fuzz", "--target", "no_such_contract=x.py:f"],
    ["fuzz", "--target", f"{CONTRACT}=/no/such/file.py:f"],
    ["fuzz", "--database", "x", "--no-database"],
], ids=["contract", "impl", "target-contract", "target-file", "database"])
def test_usage_errors_exit_2(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*argv, "--report", str(tmp_path / "r")]) == 2
    assert "batchfuzz: error:" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before anything ran


@pytest.mark.parametrize("argv", [
    ["fuzz", "--workers", "0"], ["fuzz", "--budget", "soon"], ["fuzz", "--target", "nonsense"], ["fuzz", "--device", "tpu"],
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
    return fuzz.plan(cli.build_parser().parse_args(["fuzz", *argv]))


def test_plan_covers_every_contract_and_filters_by_glob(planted: Path) -> None:
    everything = _plan()
    expected = [(c.name, i.name) for c in registry.contracts() for i in c.implementations if "cpu" in i.devices]
    assert [(w.contract, w.implementation) for w in everything] == expected
    assert [w.index for w in everything] == list(range(len(everything)))
    only = _plan("--contract", CONTRACT, "--impl", "target:*", "--target", f"{CONTRACT}={planted}:split")
    assert [(w.contract, w.implementation, w.target) for w in only] == [(CONTRACT, None, f"{planted}:split")]
    first = CONTRACT[:5] + "*"
    assert {w.contract for w in _plan("--contract", first)} == {c.name for c in registry.contracts() if c.name.startswith(CONTRACT[:5])}


def _fake_job(tmp_path: Path) -> Job:
    items = [WorkItem(0, CONTRACT, "cpu", implementation="numpy"), WorkItem(1, CONTRACT, "cpu", target="m.py:f"),
             WorkItem(2, "other_contract", "cpu", implementation="torch")]
    job = Job(items=items, report_dir=str(tmp_path), corpus_dir=str(tmp_path / "corpus"), database=None, profile="nightly",
              seed=1, workers=2, budget_s=60.0, deadline=time.time() + 60)
    job.items_dir.mkdir(parents=True, exist_ok=True)
    return job


def _state(item: WorkItem, status: str, examples: int, failures: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"index": item.index, "contract": item.contract, "name": item.name, "implementation": item.implementation,
            "target": item.target, "device": "cpu", "status": status, "reason": "", "worker": "gw0", "pid": 1,
            "started": time.time() - 2, "finished": time.time(), "seconds": 2.0, "slice_seconds": 2.0, "examples": examples,
            "hunts": 3, "properties": {"p1": {"examples": examples, "seconds": 2.0, "status": "failed" if failures else "passed"}},
            "events": {"R == 1": examples // 2}, "scores": {}, "failures": failures or [], "error": None, "settings": {}}


_FAILURE = {"property": "p1", "spec": "spec", "kind": "violation", "error_type": "PropertyViolation", "message": "boom\nmore",
            "inputs": {"num_reqs": "3"}, "reproduction": "f(3, 5)", "corpus_file": "/c/x.json", "new": True, "id": "abc"}


def test_progress_table_on_a_terminal_and_lines_otherwise(tmp_path: Path) -> None:
    job = _fake_job(tmp_path)
    corpus.write_json_atomic(job.items_dir / "000.json", _state(job.items[0], "passed", 100))
    running = _state(job.items[1], "running", 10, [_FAILURE])
    corpus.write_json_atomic(job.items_dir / "001.json", running)
    tty = io.StringIO()
    p = Progress(tty, job, time.time(), tty=True)
    p.update()
    p.update()
    text = tty.getvalue()
    assert "\x1b[2K" in text and "\x1b[4F" in text  # drawn, then redrawn in place (header, column names, 2 contracts)
    assert "s left" in text and "1/2" in text and "target:m.py:f" in text
    plain = io.StringIO()
    q = Progress(plain, job, time.time(), tty=False)
    q.update()
    q.update()
    lines = plain.getvalue().splitlines()
    assert "\x1b" not in plain.getvalue()
    assert sum(line.startswith("FAILURE") for line in lines) == 1 and "/c/x.json (new)" in plain.getvalue()
    assert sum(line.startswith("[1/3]") for line in lines) == 1 and len(lines) == 2


def test_reports_from_states(tmp_path: Path) -> None:
    job = _fake_job(tmp_path)
    states = {0: _state(job.items[0], "passed", 100), 1: _state(job.items[1], "interrupted", 10, [_FAILURE])}
    s = report.build_summary(job, states, started=time.time() - 5, finished=time.time(), partial=True, interrupted_by="SIGTERM received")
    assert s["partial"] and s["status"] == "interrupted" and s["totals"]["examples"] == 110 and s["totals"]["failures"] == 1
    c = s["contracts"][CONTRACT]
    assert c["cases_per_second"] == 27.5 and c["coverage"]["R == 1"] == {"examples": 55, "fraction": 0.5}
    assert s["contracts"]["other_contract"]["implementations"]["torch@cpu"]["status"] == "not run"
    paths = report.write_reports(tmp_path, s)
    assert json.loads(paths[0].read_text())["partial"] is True
    md = paths[1].read_text()
    assert "PARTIAL" in md and "| split_dummy_tokens | `numpy@cpu` | passed | 100 |" in md and "f(3, 5)" in md
    root = ET.parse(paths[2]).getroot()
    suites = {x.get("name"): x for x in root.iter("testsuite")}
    assert suites[CONTRACT].get("failures") == "1" and suites["other_contract"].get("skipped") == "1"


def _workflow() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_nightly_workflow_is_valid_and_its_command_parses() -> None:
    wf = _workflow()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["schedule"][0]["cron"].count(" ") == 4
    steps = wf["jobs"]["fuzz"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/cache/restore") for u in uses) and any(u.startswith("actions/cache/save") for u in uses)
    assert any(u.startswith("actions/upload-artifact") for u in uses)
    runs = [s["run"] for s in steps if "batchfuzz fuzz" in s.get("run", "")]
    assert len(runs) == 1 and "--profile nightly" in runs[0]
    command = runs[0].replace('"$BUDGET"', "90s").replace('"$(nproc)"', "2").replace('"$BATCHFUZZ_DATABASE"', ".hypothesis/batchfuzz")
    argv = shlex.split(command)
    assert argv[0] == "batchfuzz"
    args = cli.build_parser().parse_args(argv[1:])
    assert args.profile == "nightly" and args.budget == 90 and args.workers == 2
    assert fuzz.plan(args)


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
