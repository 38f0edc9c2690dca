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


def test_the_violated_properties_line_is_never_dropped_silently(capsys: pytest.CaptureFixture[str]) -> None:
    """Past the budget the other properties the shrunk case breaks are not
    re-checked; the output and the JSON say so (``violated_properties``
    None), where they once left the line out (issue 37 item 2)."""
    from batchfuzz import registry, runner
    from batchfuzz.case import Case
    from batchfuzz.execution import InProcess
    from batchfuzz.targets import parse

    contract = registry.get("split_dummy_tokens")

    def bad(num_reqs: int, num_tokens: int) -> list[int]:
        return [1] * (num_reqs - 1) + [num_tokens - num_reqs + 1]

    case = Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 5})
    failure = runner.Failure(contract="split_dummy_tokens", target="m:bad", property="matches_oracle", spec="",
                             case=case, error_type="PropertyViolation", message="wrong", complete=False)
    with InProcess(contract, bad, "m:bad") as ex:
        for deadline, expected in ((0.0, None), (float("inf"), ["matches_oracle", "max_is_ceil"])):
            plan = checking._Plan(contract=contract, props=contract.properties, scope=None, domain=None, budget=1.0,
                                  timeout=5.0, database=None, ref=parse("m:bad"), executor=ex, info={}, started=0.0,
                                  deadline=deadline, startup_s=0.0)
            fields = checking._print_counterexample(plan, failure, "replay: x")
            out = capsys.readouterr().out
            assert fields["shrink_complete"] is False and "the budget ended while shrinking" in out
            if expected is None:
                assert fields["violated_properties"] is None and "violates: not checked (the budget ended" in out, out
            else:
                assert set(expected) <= set(fields["violated_properties"]), fields
                assert "--- the shrunk case violates: matches_oracle, max_is_ceil" in out, out
