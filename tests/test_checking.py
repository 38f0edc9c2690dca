"""The check run below the command (``batchfuzz.checking``): its progress
hook and its result, in this process (the command's own behaviour, exit
codes and reports are tests/test_hostile.py's and tests/test_exhaustive.py's)."""

from __future__ import annotations

import pytest

from batchfuzz import checking
from batchfuzz.usage import UsageError


def test_on_progress_gets_every_hunt_and_the_last_count_is_the_reports(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[checking.Progress] = []
    result = checking.run(checking.CheckRequest("split_dummy_tokens", "oracle", budget_s=2.0, min_examples=5,
                                                isolate=False, seed=1), on_progress=seen.append)
    assert result.status in (checking.PASSED, checking.INCOMPLETE)  # the oracle holds; a busy machine may leave it short
    assert result.report["status"] == result.status
    last = {p.property: p for p in seen}
    ran = {name: r["examples"] for name, r in result.report["properties"].items() if r["examples"]}
    assert ran and {name: p.examples for name, p in last.items()} == ran
    assert all(not p.failed and p.total is None and p.seconds_left >= 0 for p in seen)
    out = capsys.readouterr().out
    assert "s left" not in out  # a caller's hook replaces the default lines; the results are printed as before
    assert all(f" {name} " in out for name in ran)


def test_a_failing_target_is_a_counterexample_with_its_reproduction(capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[checking.Progress] = []
    result = checking.run(checking.CheckRequest("split_dummy_tokens", "variant:remainder_to_last.dummy_run", budget_s=10.0,
                                                isolate=False, seed=1), on_progress=seen.append)
    assert result.status == checking.COUNTEREXAMPLE and result.report["reproduction"]
    assert seen[-1].failed and seen[-1].property == result.report["property"]
    assert "COUNTEREXAMPLE" in capsys.readouterr().out


def test_a_bad_request_is_a_usage_error_before_any_example() -> None:
    with pytest.raises(UsageError, match="--scope needs --exhaustive"):
        checking.run(checking.CheckRequest("split_dummy_tokens", "oracle", scope="ci"))
