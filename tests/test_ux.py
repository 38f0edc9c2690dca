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
    its whole budget for examples: ``started`` a minute ago, a 3 s budget,
    every property reaches its minimum of examples and the minute is reported
    as start-up. (Before, the budget's clock ran from the command's start
    minus only the worker's start: imports after the command line parsed
    were charged, and short budgets lost their output.)"""
    import time

    from batchfuzz import checking

    result = checking.run(checking.CheckRequest(
        contract="split_dummy_tokens", target="oracle", budget_s=3.0, isolate=False, seed=1,
        json_path=str(tmp_path / "r.json"), started=time.time() - 60.0), on_progress=lambda p: None)
    assert result.status == checking.PASSED, result.report
    assert result.report["startup_seconds"] >= 60.0
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
