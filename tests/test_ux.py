"""What a new user meets beyond the printed next steps (issue 37): output
folders that are system folders refused, a light start (no torch for
``list``, ``--help`` and usage errors), the words and counters of the
banners, and the engine matrix saying what it does while it downloads and binds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv", [
    ["fuzz", "--report", "/", "--contract", "split_dummy_tokens", "--max-examples", "1"],
    ["fuzz", "--corpus", "/", "--contract", "split_dummy_tokens", "--max-examples", "1"],
    ["fuzz", "--report", "/etc", "--contract", "split_dummy_tokens", "--max-examples", "1"],
    ["fuzz", "--database", "/usr", "--contract", "split_dummy_tokens", "--max-examples", "1"],
    ["check", "split_dummy_tokens", "oracle", "--write-test", "/"],
    ["check", "split_dummy_tokens", "oracle", "--database", "/"],
    ["replay", "--write-tests", "/"],
    ["merge-reports", "shard1", "--report", "/"],
])
def test_a_system_folder_is_refused_as_an_output_folder(argv: list[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--report /`` as root wrote the report into /: a usage error naming the option, nothing written."""
    from batchfuzz.cli import main

    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir("/"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    flag = next(a for a in argv if a.startswith("--") and argv[argv.index(a) + 1].startswith("/"))
    assert f"batchfuzz: error: {flag} {argv[argv.index(flag) + 1]}: refusing to write" in err, err
    assert sorted(os.listdir("/")) == before


def test_checks_budget_starts_after_its_start_up(tmp_path: Path) -> None:
    """A command whose start-up (imports, the worker) took a minute still gets
    its whole budget for examples: ``started`` an hour ago, a 5 s budget,
    every property reaches its minimum of examples (one: the claim is about
    the clock, not the speed, so a busy machine cannot fail it) and the hour
    is reported as start-up. (Before, the budget's clock ran from the
    command's start minus only the worker's start: imports after the command
    line parsed were charged, and short budgets lost their output.)"""
    import time

    from batchfuzz import checking

    result = checking.run(checking.CheckRequest(
        contract="split_dummy_tokens", target="oracle", budget_s=5.0, min_examples=1, isolate=False, seed=1,
        json_path=str(tmp_path / "r.json"), started=time.time() - 3600.0), on_progress=lambda p: None)
    assert result.status == checking.PASSED, result.report
    assert result.report["startup_seconds"] >= 3600.0
    assert all(p["status"] == "passed" for p in result.report["properties"].values()), result.report["properties"]


# What a new user types first: each must answer without importing torch (seconds on a busy machine).
LIGHT = [
    ["list"], ["list", "--variants"], ["--help"], ["check", "--help"],
    ["check", "split_dumy_tokens", "mymod:split"],  # a mistyped contract
    ["check", "split_dummy_tokens", "oracle", "--property", "no_such_property"],
    ["check", "split_dummy_tokens", "oracle", "--budget", "nan"],
    ["fuzz", "--contract", "no_such_contract"],
    ["replay", "no/such/corpus"],
]


@pytest.mark.parametrize("argv", LIGHT, ids=" ".join)
def test_list_help_and_usage_errors_import_no_torch(argv: list[str], tmp_path: Path) -> None:
    import subprocess
    import sys

    code = ("import sys\nfrom batchfuzz import cli\ntry:\n    code = cli.main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    code = e.code\nprint('exit', code, 'torch' in sys.modules, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    expected = 0 if argv[0] == "list" or "--help" in argv else 2
    assert r.stderr.splitlines()[-1] == f"exit {expected} False", r.stderr[-3000:]


# ---------------------------------------------------------------- words and counters


def test_the_default_budget_and_workers_are_round_numbers_of_the_machine() -> None:
    from batchfuzz.fuzz import controller

    assert controller.default_budget(209, 1) == 63.0  # 10 s + 0.25 s x 209 items, up to a whole second (was 62.25)
    assert controller.default_budget(8, 1) == 60.0
    assert controller.default_workers(items=100, cores=2) == 2  # was 1 whatever the machine
    assert controller.default_workers(items=100, cores=64) == controller.MAX_DEFAULT_WORKERS
    assert controller.default_workers(items=1, cores=16) == 1
    assert controller.default_workers(items=5, cores=None) == 1


def test_fuzz_says_which_database_and_its_table_lines_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz import cli
    from batchfuzz.fuzz import controller

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BATCHFUZZ_DATABASE", raising=False)
    code = cli.main(["fuzz", "--contract", "split_dummy_tokens", "--impl", "impl:numpy@cpu", "--property", "matches_oracle",
                     "--property", "max_is_ceil", "--max-examples", "5", "--seed", "1", "--report", "rep", "--corpus", "corp",
                     "--progress", "none"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "example database .hypothesis/batchfuzz (local);" in out and "database profile" not in out, out
    assert f"{controller.default_workers(2, os.cpu_count())} worker(s)" in out.splitlines()[0], out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("contract "))
    row = lines[header + 1]
    assert row.startswith("split_dummy_tokens ")
    # each column's values end where its name ends (the items column was left-aligned under a right-aligned name)
    for name in ("items", "examples", "failures", "cases/s"):
        end = lines[header].index(name) + len(name)
        assert row[end - 1] != " " and row[end:end + 1] in ("", " "), (name, lines[header], row)


class _Clock:
    """time.time() of batchfuzz.fuzz.progress, set by the test."""

    now = 1000.0

    def time(self) -> float:
        return self.now


def test_the_live_clock_adds_up_and_its_time_left_never_goes_back_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Elapsed = start-up (not charged) + budget used, at every moment: while
    the job processes start (the deadline slides), as the budget runs, after
    a slice's start-up is given back to the deadline, and past the end."""
    import io
    import types

    from batchfuzz.fuzz import progress as fuzz_progress

    clock = _Clock()
    monkeypatch.setattr(fuzz_progress, "time", clock)
    job = types.SimpleNamespace(budget_s=60.0, deadline=clock.now + 60.0)
    p = fuzz_progress.Progress(io.StringIO(), job, started=clock.now, tty=False)  # type: ignore[arg-type]
    seen: list[float] = []
    for step, deadline in [(5, None), (5, None), (10, "clock"), (20, None), (3, +4.0), (10, None), (60, None)]:
        clock.now += step
        if deadline == "clock":  # the job processes are ready: the budget's clock starts
            job.deadline = clock.now + 60.0
        elif deadline is None and len(seen) < 2:  # still starting: the deadline slides
            job.deadline = clock.now + 60.0
        elif isinstance(deadline, float):  # a slice's start-up, not charged, moves the deadline on
            job.deadline += deadline
        elapsed, uncharged, left = p.clock()
        assert elapsed == pytest.approx(uncharged + (60.0 - left)), (elapsed, uncharged, left)
        seen.append(left)
    assert seen == sorted(seen, reverse=True), seen
    assert seen[0] == seen[1] == 60.0 and seen[-1] == 0.0
    assert "s start-up, not charged" in p.clock_words()


def test_checks_plain_progress_lines_are_not_rows_of_its_results(capsys: pytest.CaptureFixture[str]) -> None:
    """In a log, a plain progress line looked like a row of the results table
    printed at the end: the same line twice. It is a heartbeat now."""
    import io

    from batchfuzz import checking

    stream = io.StringIO()
    lines = checking._Lines(stream)
    lines.last = 0.0  # its last line long ago: this one is printed
    lines(checking.Progress(property="matches_oracle", examples=40, failed=False, seconds_left=12.0))
    assert stream.getvalue() == "... matches_oracle: 40 examples so far, 12s of the budget left\n"


# ---------------------------------------------------------------- the engine matrix says what it does


def test_a_wheel_download_is_said_before_and_after_with_its_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pip download`` of a release wheel can take minutes: a line before it,
    one after with the size, one for a cached wheel (pip itself faked here)."""
    import subprocess

    from batchfuzz import engines

    def fake_pip(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        folder = Path(cmd[cmd.index("-d") + 1])
        (folder / "toyengine-1.4.0-py3-none-any.whl").write_bytes(b"x" * 2_500_000)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    from batchfuzz.engines import _wheels

    monkeypatch.setattr(engines.subprocess, "run", fake_pip)
    # the index's hash check (batchfuzz.engines._wheels) is its own subject: here the index agrees
    monkeypatch.setattr(_wheels, "index_hash", lambda *a: ("toyengine-1.4.0-py3-none-any.whl", "sha"))
    monkeypatch.setattr(_wheels, "verified", lambda wheel, *a, **k: wheel)
    said: list[str] = []
    path = engines.fetch_wheel("toyengine", "1.4.0", dest=tmp_path, say=said.append)
    assert said[0] == (f"downloading toyengine==1.4.0: its release wheel, with pip download into {tmp_path} (once: later "
                       "runs use the cached file; at most 300s)")
    assert said[1].startswith("downloaded toyengine-1.4.0-py3-none-any.whl (2.5 MB) in "), said
    said.clear()
    assert engines.fetch_wheel("toyengine", "1.4.0", dest=tmp_path, say=said.append) == path
    assert said == [f"toyengine==1.4.0: the cached wheel {path} (2.5 MB)"]
