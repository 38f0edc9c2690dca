"""The commands on hostile code, as a user runs them: ``batchfuzz check``
and ``batchfuzz fuzz --target`` in a subprocess, on functions that segfault,
exit, hang, are slow, have the wrong arity or scribble on their inputs
(tests/hostile.py). Each gets its verdict and exit code, within its budget
plus the grace the command states, with its report written.

The wall-clock bounds are checked against the command's own promise: the
budget counts from the loaded target (start-up is reported apart, as
``startup_seconds``), a property short of ``--min-examples`` may run on for
one more budget, then ``GRACE_S``; plus ``STARTUP_S`` for the interpreter and
what the command's own start-up report leaves out (the interpreter's start),
measured slack for a loaded 2-core machine. The tests whose verdict is
about time are marked ``timing``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import checking
from batchfuzz.fuzz import settings as fuzz_settings

REPO = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).with_name("hostile.py")
# The interpreter's start before the command's clock runs, on a loaded CI machine;
# the command's own clock is held to the budget plus grace exactly.
STARTUP_S = 20.0


def _batchfuzz(*argv: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = str(REPO)
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "batchfuzz", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=300)
    return r, time.monotonic() - t


def _check(tmp_path: Path, contract: str, fn: str, budget: float, *extra: str) -> tuple[int, dict[str, Any], str, float]:
    report = tmp_path / f"{fn}.json"
    r, wall = _batchfuzz("check", contract, f"{HOSTILE}:{fn}", "--budget", f"{budget:g}s", "--json", str(report), *extra,
                         cwd=tmp_path)
    data = json.loads(report.read_text()) if report.exists() else {}
    startup = data.get("startup_seconds", 0.0)  # the command's own start, which it does not charge to the budget
    assert wall - startup <= 2 * budget + checking.GRACE_S + STARTUP_S, \
        f"{fn}: {wall:.1f}s ({startup:.1f}s start-up) for --budget {budget}\n{r.stdout}{r.stderr}"
    # by the command's own clock, start-up apart
    assert not data or data["seconds"] - startup <= 2 * budget + checking.GRACE_S, data
    return r.returncode, data, r.stdout + r.stderr, wall


@pytest.mark.parametrize(("fn", "exit_text"), [
    ("segv", "killed by signal 11 (SIGSEGV)"),
    ("hard_exit", "exit status 1"),
    ("soft_exit", "sys.exit(3)"),
])
def test_check_reports_a_crash_as_a_counterexample(tmp_path: Path, fn: str, exit_text: str) -> None:
    code, data, out, _ = _check(tmp_path, "split_dummy_tokens", fn, 15, "--property", "matches_oracle")  # ends at the crash
    assert code == 1, out
    assert data["status"] == "counterexample" and data["property"] == "crash", data
    assert exit_text in data["exit"] and exit_text in out
    assert "COUNTEREXAMPLE: property crash" in out and "--- reproduction" in out
    if fn == "segv":  # shrunk to the smallest crashing case, when the budget let the shrinking finish
        args = data["counterexample"]["args"]
        assert int(args["num_reqs"]) >= 3 and (not data["shrink_complete"] or args == {"num_reqs": "3", "num_tokens": "3"}), data


@pytest.mark.timing
def test_check_bounds_a_hang_by_the_budget_and_reports_the_timeout(tmp_path: Path) -> None:
    """Every shrink step that hangs costs a timeout, so the case is shrunk as
    far as the budget allows, and says whether it got to the end."""
    code, data, out, _ = _check(tmp_path, "split_dummy_tokens", "hang", 8, "--timeout", "0.5")
    assert code == 1, out
    assert data["property"] == "timeout" and int(data["counterexample"]["args"]["num_tokens"]) >= 40, data
    assert isinstance(data["shrink_complete"], bool) and "Timeout" in data["error_type"], data


@pytest.mark.timing
def test_check_of_a_slow_correct_function_ends_within_the_budget(tmp_path: Path) -> None:
    """50 ms a call, with --budget 6: the command ends in time (one more
    budget for the minimum of examples at most) and says what it could not
    reach (exit 3, the properties and the reason named). (At --budget 2 a
    loaded 2-core machine sometimes ran no example before the budget ended.)"""
    budget = 6
    code, data, out, _ = _check(tmp_path, "split_dummy_tokens", "slow", budget)
    assert code in (0, 3), out
    if code == 3:
        assert data["status"] == "incomplete" and data["short"] and "on average" in data["reason"], data
    else:
        assert data["status"] == "passed"
    assert data["examples"] <= 2 * budget / 0.05 + 8  # every example really made its 50 ms call


def test_a_wrong_arity_is_a_usage_error_before_any_example(tmp_path: Path) -> None:
    code, data, out, wall = _check(tmp_path, "split_dummy_tokens", "one_arg", 600)
    assert code == 2 and "cannot take the 2 positional arguments" in out, out
    assert not data and wall < 300  # no report, and far from the budget: start-up only


def test_an_unwritable_json_path_is_a_usage_error_before_any_example(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")  # a path under a regular file: unwritable even for root
    r, wall = _batchfuzz("check", "split_dummy_tokens", f"{HOSTILE}:even", "--budget", "600s", "--json",
                         str(tmp_path / "file" / "x.json"), cwd=tmp_path)
    assert r.returncode == 2 and "--json" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert wall < 300


@pytest.mark.parametrize(("contract", "fn", "argument", "judged"), [
    ("find_conflicts", "find_conflicts_zeroed", "block_tables", "matches_oracle"),
    ("allow_microbatching", "allow_microbatching_zeroed", "block_tables", "sound_under_adversarial_splits"),
    ("pad_query_start_loc", "pad_query_start_loc_zeroed", "num_scheduled_tokens", "matches_oracle"),
])
def test_a_target_that_scribbles_on_its_inputs_is_caught(tmp_path: Path, contract: str, fn: str, argument: str,
                                                         judged: str) -> None:
    """Caught by the property about the inputs, naming the argument, and by a
    property about the result, which judges it against the inputs as they were."""
    code, data, out, _ = _check(tmp_path, contract, fn, 15, "--property", "inputs_unchanged")
    assert code == 1, out
    assert data["property"] == "inputs_unchanged" and f"the target changed its argument {argument}" in data["message"], data
    code, data, out, _ = _check(tmp_path, contract, fn, 15, "--property", judged)
    assert code == 1 and data["property"] == judged, out


def test_fuzz_with_a_segfaulting_and_a_hanging_target_finishes_and_keeps_both(tmp_path: Path) -> None:
    """Driven by example counts: the ci profile runs each item's fixed stream
    once, whole (the run ends when every item is done); the budget is only
    the bound the run must keep."""
    budget = 120.0
    r, wall = _batchfuzz(
        "fuzz", "--contract", "split_dummy_tokens", "--impl", f"{HOSTILE}:*",
        "--target", f"split_dummy_tokens={HOSTILE}:segv", "--target", f"split_dummy_tokens={HOSTILE}:hang",
        "--property", "matches_oracle", "--property", "sum_is_num_tokens",
        "--budget", f"{budget:g}s", "--timeout", "0.5", "--profile", "ci", "--no-database",
        "--report", str(tmp_path / "report"), "--corpus", str(tmp_path / "corpus"), "--progress", "lines", cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    # the budget counts after the start-up fuzz reports (not charged); the interpreter's own start is STARTUP_S
    assert wall - summary["startup_seconds"] <= budget + fuzz_settings.GRACE_S + STARTUP_S, out
    found = {(f["implementation"].rsplit(":", 1)[1], f["property"]) for f in summary["failures"]}
    assert {p for fn, p in found if fn == "segv"} == {"crash"} and {p for fn, p in found if fn == "hang"} == {"timeout"}, found
    entries = [json.loads(p.read_text()) for p in (tmp_path / "corpus").rglob("*.json")]
    kept = {(e["target"].rsplit(":", 1)[1], e["property"]) for e in entries}
    assert {("segv", "crash"), ("hang", "timeout")} <= kept, kept
    segv = next(e for e in entries if e["property"] == "crash")
    assert "SIGSEGV" in segv["failure"]["exit"] and "subprocess.run" in segv["reproduction"]
    # every item ran: a crash of one costs neither the others nor the job
    impls = summary["contracts"]["split_dummy_tokens"]["implementations"]
    assert all(p["status"] != "not run" for i in impls.values() for p in i["properties"].values()), impls


def test_a_result_the_contract_cannot_read_is_a_usage_error_before_any_example(tmp_path: Path) -> None:
    """An engine's own result type (a list of slice objects) needs a binding:
    check and fuzz say so and stop, rather than reporting every input."""
    code, data, out, wall = _check(tmp_path, "split_ubatches", "engine_ubatch_slices", 600)
    assert code == 2 and "its result cannot be read as split_ubatches's" in out and "UBatchSlice" in out, out
    assert not data and wall < 300
    r, wall = _batchfuzz("fuzz", "--contract", "split_ubatches", "--impl", f"{HOSTILE}:*",
                         "--target", f"split_ubatches={HOSTILE}:engine_ubatch_slices", "--budget", "600s",
                         "--report", str(tmp_path / "report"), cwd=tmp_path)
    assert r.returncode == 2 and "its result cannot be read" in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "report" / "summary.json").exists() and wall < 300
