"""The faults of issue 19, each tried as a test that holds: corpus files that
would run code or stop the replay, hostile targets, resource limits, bad
durations (the executor's own faults are tried in tests/test_execution.py).
Every test here is driven by example counts or by the fault
itself, never by a short wall-clock budget.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import cli, usage
from batchfuzz.case import Case
from batchfuzz.fuzz import corpus

CONTRACT = "split_dummy_tokens"
LORA = "vllm/v1/worker/gpu/lora_utils.py:create_lora_capture_hook"

# A "release" whose bound function writes a marker when it runs: what a
# corpus file could point an engine reference at.
_RELEASE_FILE = """\
def create_lora_capture_hook(lora_config, runner):
    open({marker!r}, "w").write("ran")

    def hook(num_active_loras, num_reqs, num_tokens):
        base, rem = divmod(num_tokens, num_reqs)
        runner.maybe_select_dummy_loras(lora_config, [base + (i >= num_reqs - rem) for i in range(num_reqs)])

    return hook
"""


def _release(tmp_path: Path) -> tuple[Path, Path]:
    root, marker = tmp_path / "release", tmp_path / "executed"
    f = root / LORA.split(":")[0]
    f.parent.mkdir(parents=True)
    f.write_text(_RELEASE_FILE.format(marker=str(marker)))
    return root, marker


def _entry(target: str, **changes: Any) -> dict[str, Any]:
    case = Case({"num_reqs": 2, "num_tokens": 5}, {})
    data: dict[str, Any] = {
        "format": corpus.FORMAT, "id": corpus.entry_id(CONTRACT, target, "cpu", "spec", "matches_oracle", case),
        "contract": CONTRACT, "target": target, "device": "cpu", "domain": "spec", "property": "matches_oracle",
        "during": "", "spec": "", "failure": {"kind": "violation", "error_type": "PropertyViolation", "message": ""},
        "case": {"args": {"num_reqs": 2, "num_tokens": 5}, "context": {}},
    }
    data.update(changes)
    return data


def _save(root: Path, data: dict[str, Any], name: str | None = None) -> Path:
    p = root / CONTRACT / (name or f"{data['id']}.json")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data))
    return p


# --------------------------------------------------------------------------- a corpus file runs code


def test_an_engine_release_a_corpus_file_names_is_not_run_unless_the_user_names_it(tmp_path: Path) -> None:
    """``engine:vllm::dir:SOME/DIR::...`` in a corpus file: the entry is
    skipped (saying how to replay it) and the directory's code never runs,
    in ``corpus.replay`` and in ``batchfuzz replay``; named with
    ``--engine dir:SOME/DIR``, it is replayed."""
    release, marker = _release(tmp_path)
    target = f"engine:vllm::dir:{release}::{LORA}::{CONTRACT}"
    path = _save(tmp_path / "corpus", _entry(target))
    outcome = corpus.replay(corpus.load(path), isolate=False)
    assert outcome.status == "skipped" and f"--engine dir:{release}" in outcome.message, outcome
    assert cli.main(["replay", "--no-isolation", str(path)]) == 4  # skipped: nothing replayed
    assert not marker.exists(), "a corpus file made batchfuzz run code from a directory it named"
    # Named by the user, the release is replayed (and its code runs: the user chose it).
    assert corpus.replay(corpus.load(path), engines=[f"dir:{release}"], isolate=False).status == "passes"
    assert marker.exists()
    marker.unlink()
    assert cli.main(["replay", "--no-isolation", "--engine", f"dir:{release}", str(path)]) == 0 and marker.exists()


def test_an_engine_release_named_by_another_path_is_not_a_licence(tmp_path: Path) -> None:
    """Naming one release does not let a corpus file run another."""
    release, marker = _release(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    target = f"engine:vllm::dir:{release}::{LORA}::{CONTRACT}"
    path = _save(tmp_path / "corpus", _entry(target))
    assert corpus.replay(corpus.load(path), engines=[f"dir:{other}", "installed:"], isolate=False).status == "skipped"
    assert not marker.exists()


# --------------------------------------------------------------------------- bad corpus files


def test_bad_corpus_files_are_each_reported_by_name_and_the_others_still_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An integer past Python's int-string limit, a symbolic link to
    /dev/zero (size 0, endless), a FIFO named x.json (a read would block), a
    link out of the corpus: each is named as malformed, without reading it
    forever, and the good entries before and after it are still replayed."""
    root = tmp_path / "corpus"
    good = _entry("impl:numpy@cpu")
    for first in ("a", "z"):  # a good entry (named by its id) sorted before the bad files, and one after
        p = root / first / f"{good['id']}.json"
        p.parent.mkdir(parents=True)
        p.write_text(json.dumps(good))
    folder = root / CONTRACT
    folder.mkdir()
    (folder / "b-bigint.json").write_text(json.dumps(good).replace('"num_tokens": 5', '"num_tokens": ' + "7" * 5000))
    (folder / "c-zero.json").symlink_to("/dev/zero")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(good))
    (folder / "d-outside.json").symlink_to(outside)
    os.mkfifo(folder / "x.json")
    assert cli.main(["replay", "--no-isolation", str(root)]) == 2
    out = capsys.readouterr().out
    assert "b-bigint.json: not valid JSON for a corpus file: Exceeds the limit (4300 digits)" in out, out
    assert "c-zero.json: a symbolic link (to '/dev/zero')" in out, out
    assert "d-outside.json: a symbolic link" in out, out
    assert "x.json: not a regular file (a FIFO)" in out, out
    assert "6 corpus entries: 2 pass, 0 still fail, 0 skipped, 4 malformed" in out, out


@pytest.mark.parametrize(("changes", "match"), [
    ({"device": "tpu"}, r"field 'device' must be one of cpu, cuda, got 'tpu'"),
    ({"device": "cuda; rm -rf /"}, r"field 'device' must be one of cpu, cuda"),
])
def test_a_device_that_is_not_one_is_malformed(tmp_path: Path, changes: dict[str, Any], match: str) -> None:
    p = _save(tmp_path, _entry("impl:numpy@cpu", **changes), "entry.json")
    with pytest.raises(corpus.CorpusError, match=match) as info:
        corpus.load(p)
    assert str(p) in str(info.value)


def test_an_id_that_is_not_the_content_address_is_malformed(tmp_path: Path) -> None:
    """An entry whose case (or target, property...) was edited after it was
    written no longer matches its id: malformed, naming both."""
    data = _entry("impl:numpy@cpu")
    p = _save(tmp_path, dict(data, case={"args": {"num_reqs": 3, "num_tokens": 5}, "context": {}}), "entry.json")
    with pytest.raises(corpus.CorpusError, match=rf"field 'id' '{data['id']}' is not the address of the file's content"):
        corpus.replay(corpus.load(p), isolate=False)
    assert corpus.replay(corpus.load(_save(tmp_path, data)), isolate=False).status == "passes"


# --------------------------------------------------------------------------- smaller faults


@pytest.mark.parametrize(("text", "match"), [
    ("1e300", "must be at most 30 days"), ("1e-9", "must be at least 0.01s"), ("nan", "finite positive"),
    ("-1", "finite positive"),
])
def test_a_budget_out_of_bounds_is_refused(text: str, match: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=match):
        usage.parse_duration(text)
    assert usage.parse_duration("720h") == 720 * 3600.0 and usage.parse_duration("0.01") == 0.01


def test_a_target_excluded_by_impl_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    hostile = Path(__file__).with_name("hostile.py")
    code = cli.main(["fuzz", "--contract", CONTRACT, "--impl", "impl:numpy*", "--target", f"{CONTRACT}={hostile}:even",
                     "--budget", "5s", "--no-database"])
    assert code == 2
    assert f"--target {CONTRACT}={hostile}:even: excluded by --impl impl:numpy*" in capsys.readouterr().err


# --------------------------------------------------------------------------- hostile targets

HOSTILE = Path(__file__).with_name("hostile.py")


def _case(r: int, n: int) -> Case:
    return Case({"num_reqs": r, "num_tokens": n}, {"max_model_len": n})


def test_a_target_that_raises_gets_its_own_verdict_shrunk_and_reproduced() -> None:
    """Not filed under whichever property ran first: ``raises``, with the
    exception, the property it kept from judging as ``during``, shrunk to
    the smallest case, and a reproduction that raises it."""
    from hypothesis import settings

    from batchfuzz import registry, reproduce, runner
    from batchfuzz.execution import RAISES, Isolated
    from batchfuzz.targets import load_function

    contract = registry.get(CONTRACT)
    fn = load_function(f"{HOSTILE}:raises")
    r = runner.hunt(contract, fn, contract.property("every_request_has_a_token"),
                    runner.HuntOptions(settings(max_examples=100, derandomize=True, database=None, deadline=None)), target_name="raises")
    f = r.failure
    assert f is not None and (f.property, f.during, f.error_type) == ("raises", "every_request_has_a_token", "IndexError"), f
    assert f.kind() == "raises" and f.case.args == {"num_reqs": 3, "num_tokens": 3}, f.case
    repro = reproduce.reproduction(f, f"{HOSTILE}:raises")
    with pytest.raises(IndexError, match="request index 2 out of range"):
        exec(compile(repro, "<reproduction>", "exec"), {})
    with Isolated(contract, f"{HOSTILE}:raises") as ex:
        out = ex.check("matches_oracle", _case(3, 7), 30)
        assert (out.status, out.error_type) == (RAISES, "IndexError") and "out of range" in out.traceback, out


def test_a_module_that_hangs_at_import_is_a_usage_error_within_the_budget(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "batchfuzz", "check", CONTRACT, f"{HOSTILE.with_name('hostile_import.py')}:even",
                        "--budget", "3"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "did not finish within 3s (its module hangs at import" in r.stderr, r.stderr
    assert time.monotonic() - t < 120  # start-up (not charged) + 3 s, far from the 120 s start timeout plus the budget


def test_keyboard_interrupt_raised_by_an_in_process_target_is_a_crash(tmp_path: Path) -> None:
    """``--no-isolation``: a target raising KeyboardInterrupt (no SIGINT came)
    is a crash counterexample, exit 1, no traceback."""
    f = tmp_path / "ki.py"
    f.write_text("def split(num_reqs, num_tokens):\n    raise KeyboardInterrupt('from the target')\n")
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "batchfuzz", "check", CONTRACT, f"{f}:split", "--no-isolation",
                        "--min-examples", "1", "--budget", "60"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "COUNTEREXAMPLE: property crash" in r.stdout and "raised KeyboardInterrupt" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr, r.stderr


# --------------------------------------------------------------------------- the fuzz job

REPO = Path(__file__).resolve().parent.parent
ONE_ITEM = ["--contract", CONTRACT, "--impl", "impl:numpy@cpu", "--property", "matches_oracle"]


def _fuzz_cmd(tmp_path: Path, *args: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "batchfuzz", "fuzz", "--report", str(tmp_path / "report"), "--corpus",
            str(tmp_path / "corpus"), "--progress", "lines", "--no-database", *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_"))}
    env["PYTHONPATH"] = str(REPO)
    return env


def test_workers_are_capped_by_the_items_and_cores_and_a_short_budget_is_said_at_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz.fuzz import controller as fuzz
    from batchfuzz.fuzz.settings import MIN_SLICE_S, STARTUP_S

    assert fuzz.cap_workers(1000, 1, 2) == (1, "--workers 1000 capped at 1 (the number of work items)")
    assert fuzz.cap_workers(1000, 132, 2) == (4, "--workers 1000 capped at 4 (the number of twice the 2 cores)")
    assert fuzz.cap_workers(2, 132, 2) == (2, None)
    assert fuzz.minimum_budget(132, 1) == STARTUP_S + MIN_SLICE_S * 132
    # One item, --workers 1000, a derandomized profile (one fixed stream: the run is example-driven).
    code = cli.main(["fuzz", *ONE_ITEM, "--workers", "1000", "--profile", "ci", "--budget", "120", "--no-database",
                     "--report", str(tmp_path / "report"), "--corpus", str(tmp_path / "corpus"), "--progress", "none"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "warning: --workers 1000 capped at 1 (the number of work items)" in out
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert s["workers"] == 1 and any("capped at 1" in n for n in s["notes"]), s["notes"]
    t = s["totals"]
    assert t["items_run"] + t["items_not_run"] == t["items"] == 1


def test_a_budget_too_short_for_every_first_slice_is_said_with_the_number(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz.fuzz import controller as fuzz

    items = 8  # every property of the contract on one implementation
    need = fuzz.minimum_budget(items, 1)
    code = cli.main(["fuzz", "--contract", CONTRACT, "--impl", "impl:numpy@cpu", "--profile", "ci", "--workers", "1", "--budget",
                     f"{need - 0.1:g}", "--report", str(tmp_path / "report"), "--corpus", str(tmp_path / "corpus"),
                     "--progress", "none", "--no-database"])
    out = capsys.readouterr().out
    assert f"cannot give each of the {items} items its first slice with 1 worker(s): that needs at least {need:g}s" in out
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    t = s["totals"]
    assert t["items_run"] + t["items_not_run"] == t["items"] == items, t
    assert code in (0, 3) and (code == 3) == bool(t["items_not_run"])


def test_sigterm_during_start_up_leaves_a_partial_report_and_the_corpus(tmp_path: Path) -> None:
    """The signal comes while the run is still starting (a --target's module
    being imported): a partial report, exit 143."""
    import signal
    import subprocess
    import time

    (tmp_path / "corpus" / CONTRACT).mkdir(parents=True)
    kept = _save(tmp_path / "corpus", _entry("impl:numpy@cpu"))
    slow = tmp_path / "slow_import.py"  # start-up that lasts: its module says it is importing, then takes a while
    importing = tmp_path / "importing"
    slow.write_text(f"import pathlib, time\npathlib.Path({str(importing)!r}).touch()\ntime.sleep(30)\n\n"
                    "def f(num_reqs, num_tokens):\n    return [1] * num_reqs\n")
    proc = subprocess.Popen(_fuzz_cmd(tmp_path, *ONE_ITEM[:2], "--target", f"{CONTRACT}={slow}:f", "--budget", "60"),
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t = time.monotonic()
        while not importing.exists() and proc.poll() is None and time.monotonic() - t < 120:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[0]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert s["partial"] is True and "during start-up" in s["interrupted_by"], s
    assert s["totals"]["items_not_run"] == s["totals"]["items"] > 0
    assert kept.is_file() and json.loads(kept.read_text())["id"] == _entry("impl:numpy@cpu")["id"]


def test_a_report_directory_in_use_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import fcntl

    run = tmp_path / "report" / ".run"
    run.mkdir(parents=True)
    with open(run / "lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write("pid 12345")
        fh.flush()
        code = cli.main(["fuzz", *ONE_ITEM, "--profile", "ci", "--report", str(tmp_path / "report"), "--corpus",
                         str(tmp_path / "corpus"), "--progress", "none", "--no-database"])
    assert code == 2
    assert "in use by another batchfuzz fuzz (pid 12345)" in capsys.readouterr().err
    assert not (tmp_path / "report" / "summary.json").exists()


def test_a_report_that_cannot_be_written_is_an_error_with_the_reason_and_the_corpus_stays(tmp_path: Path) -> None:
    """``ulimit -f``: the reports do not fit; the command says so (exit 1, no
    traceback) and the corpus file it saved is whole."""
    import resource
    import subprocess

    planted = tmp_path / "planted.py"
    planted.write_text("def split(num_reqs, num_tokens):\n    return [num_tokens // num_reqs] * num_reqs\n")
    limit = 8 * 1024  # a corpus entry (2 KB) and the items' states (3 KB) fit; summary.json (12 KB: versions, reproductions) does not

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run(_fuzz_cmd(tmp_path, "--contract", CONTRACT, "--impl", f"{planted}:*", "--target",
                                 f"{CONTRACT}={planted}:split", "--profile", "ci", "--budget", "120"),
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300, preexec_fn=small_files)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "cannot write the reports to" in out and "File too large" in out and "Traceback" not in out, out
    entries = list((tmp_path / "corpus").rglob("*.json"))
    assert entries and all(corpus.load(p).contract == CONTRACT for p in entries)


def test_losing_the_shared_database_mid_run_is_said_in_summary_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from batchfuzz.fuzz import controller as fuzz
    from batchfuzz.fuzz import database
    from batchfuzz.fuzz import job as fuzzjob
    from batchfuzz.fuzz.job import Job, WorkItem, new_state, write_state

    item = WorkItem(0, CONTRACT, "impl:numpy@cpu", "cpu", "matches_oracle", None)
    job = Job(items=[item], report_dir=str(tmp_path / "report"), corpus_dir=str(tmp_path / "corpus"),
              database="redis://db.example:6379/0", profile="dev", seed=1, workers=1, budget_s=10.0,
              deadline=time.time() + 10, isolate=True, example_timeout_s=1.0)
    job.run_dir.mkdir(parents=True)
    job.items_dir.mkdir(parents=True, exist_ok=True)
    write_state(job, item, new_state(item))
    told: dict[str, Any] = {}
    monkeypatch.setattr(database, "open_database", lambda spec, local_dir, warn: told.setdefault("warn", warn))
    fuzzjob._open_database(job)
    told["warn"]("lost the shared example database redis://db.example:6379/0 (ConnectionError); going on locally")

    class Stopped:
        signum, stop_reason = None, None

    import io

    fuzz.finish(job, Stopped(), io.StringIO(), time.time() - 1)
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert s["database_lost"] == ["lost the shared example database redis://db.example:6379/0 (ConnectionError); going on locally"]
    assert any("lost mid-run" in n for n in s["notes"])


def test_a_slow_engine_matrix_cell_is_incomplete_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from batchfuzz import matrix
    from batchfuzz.engines import Bound
    from batchfuzz.execution import LoadTimeout

    def slow(*args: Any, **kwargs: Any) -> Any:
        raise LoadTimeout("the worker for engine:x did not start within 120s")

    monkeypatch.setattr(matrix, "executor_for", slow)
    b = Bound("vllm 9.9", LORA, CONTRACT, "bound", target=lambda r, n: [n // r] * r, ref="vllm::dir:/x::f::c")
    cell = matrix.run_cell(b, budget_s=5, timeout_s=1, seed=0)
    assert cell.verdict == "incomplete" and "did not start within 120s" in cell.reason, cell

