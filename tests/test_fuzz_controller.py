"""The fuzz controller driven from Python with a :class:`FuzzRequest` (no
argparse): its plan, a whole run, and the request's validation (a bad value
is a usage error naming the option and the value; the command exits 2).
docs/nightly.md ("A work item's walk through the code")."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import shlex
from pathlib import Path

import pytest

from batchfuzz import cli, registry
from batchfuzz.commands import fuzz as fuzz_command
from batchfuzz.fuzz import controller
from batchfuzz.fuzz.request import FuzzRequest
from batchfuzz.usage import UsageError
from tests.test_corpus import BUGGY, CONTRACT

PROPERTIES = [p.name for p in registry.get(CONTRACT).properties]


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    p = tmp_path / "planted_split.py"
    p.write_text(BUGGY)
    return p


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(("fields", "flag", "value"), [
    ({"budget_s": 0.0}, "--budget", "0.0"),
    ({"budget_s": math.nan}, "--budget", "nan"),
    ({"budget_s": -5}, "--budget", "-5"),
    ({"timeout_s": math.inf}, "--timeout", "inf"),
    ({"workers": 0}, "--workers", "0"),
    ({"workers": True}, "--workers", "True"),
    ({"max_examples": -1}, "--max-examples", "-1"),
    ({"profile": "fast"}, "--profile", "'fast'"),
    ({"device": "tpu"}, "--device", "'tpu'"),
    ({"steps": "oracle"}, "--steps", "'oracle'"),
    ({"progress": "bar"}, "--progress", "'bar'"),
    ({"seed": "7"}, "--seed", "'7'"),
    ({"shard": (3, 2)}, "--shard", "(3, 2)"),
    ({"shard": (0, 2)}, "--shard", "(0, 2)"),
    ({"targets": (("split_dummy_tokens", ""),)}, "--target", "('split_dummy_tokens', '')"),
])
def test_a_bad_request_is_a_usage_error_naming_the_option_and_the_value(fields: dict[str, object], flag: str,
                                                                         value: str) -> None:
    with pytest.raises(UsageError) as info:
        FuzzRequest(**fields)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"{flag} {value}: "), info.value


def test_contradicting_database_options_are_a_usage_error_and_the_command_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match="--database and --no-database contradict each other"):
        FuzzRequest(database="db", no_database=True)
    assert cli.main(["fuzz", "--database", "db", "--no-database", "--report", str(tmp_path / "r")]) == 2
    assert "--database and --no-database contradict each other" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before anything ran


@pytest.mark.parametrize("argv", [["--budget", "0"], ["--workers", "0"], ["--shard", "3/2"], ["--profile", "fast"]])
def test_the_command_still_exits_2_for_bad_values(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["fuzz", *argv])
    assert info.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_the_command_builds_the_request_field_by_field() -> None:
    args = cli.build_parser().parse_args([
        "fuzz", "--budget", "2m", "--workers", "3", "--max-examples", "9", "--profile", "nightly", "--contract", "a*",
        "--impl", "impl:numpy@cpu", "--property", "p", "--target", "c=m:f", "--domain", "engine", "--steps", "model",
        "--seed", "4", "--database", "db", "--shard", "2/3", "--report", "r", "--corpus", "c", "--no-isolation",
        "--timeout", "5", "--history", "h1", "h2", "--progress", "none"])
    args.started = 12.0
    assert fuzz_command.request(args) == FuzzRequest(
        budget_s=120.0, workers=3, max_examples=9, profile="nightly", contracts=("a*",), impls=("impl:numpy@cpu",),
        properties=("p",), targets=(("c", "m:f"),), domain="engine", steps="model", seed=4, database="db", shard=(2, 3),
        report="r", corpus="c", isolate=False, timeout_s=5.0, history=("h1", "h2"), progress="none", started=12.0)


def test_the_replay_command_parses_back_into_the_same_request() -> None:
    """The rerun line a run prints is a command line that asks for the same job."""
    request = FuzzRequest(budget_s=90.0, workers=2, max_examples=7, profile="nightly", contracts=(CONTRACT,),
                          impls=("impl:*",), properties=("max_*",), targets=((CONTRACT, "my mod.py:split"),),
                          domain="spec", shard=(1, 2), database="/tmp/db", isolate=False, timeout_s=3.0)
    line = request.replay_command(seed=11)
    words = shlex.split(line)
    assert words[:2] == ["batchfuzz", "fuzz"]
    again = fuzz_command.request(cli.build_parser().parse_args(words[1:]))
    assert again == dataclasses.replace(request, seed=11)


# --------------------------------------------------------------------------- the plan


def test_the_plan_of_a_request_is_every_selected_property_numbered_in_order(planted: Path) -> None:
    request = FuzzRequest(contracts=(CONTRACT,), impls=("impl:numpy@cpu", f"{planted}:*"),
                          targets=((CONTRACT, f"{planted}:split"),))
    items = controller.plan(request)
    assert [i.index for i in items] == list(range(len(items)))
    # the user's target first, then the implementation; every property of each
    assert [(i.target, i.property) for i in items] == (
        [(f"{planted}:split", p) for p in PROPERTIES] + [("impl:numpy@cpu", p) for p in PROPERTIES])
    assert controller.plan(dataclasses.replace(request, properties=("max_*", "min_*"))) == [
        dataclasses.replace(i, index=k) for k, i in enumerate(x for x in items if x.property in ("max_is_ceil", "min_is_floor"))]
    shards = [controller.plan(dataclasses.replace(request, shard=(k, 3))) for k in (1, 2, 3)]
    keys = [{i.shard_key for i in s} for s in shards]
    assert set().union(*keys) == {i.shard_key for i in items} and sum(map(len, keys)) == len(items)


@pytest.mark.parametrize(("fields", "message"), [
    ({"contracts": ("no_such_*",)}, "--contract 'no_such_*' matches no contract"),
    ({"contracts": (CONTRACT,), "impls": ("impl:nothing",)}, "--impl 'impl:nothing' matches no target on cpu"),
    ({"contracts": (CONTRACT,), "properties": ("nothing",)}, "--property 'nothing' matches no property"),
    ({"targets": (("no_such_contract", "m:f"),)}, "--target no_such_contract=m:f: unknown contract"),
    ({"contracts": ("find_conflicts",), "targets": ((CONTRACT, "m:f"),)}, "is not selected by --contract"),
])
def test_a_plan_that_cannot_be_is_a_usage_error(fields: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("*", r"\*")):
        controller.plan(FuzzRequest(**fields))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- a whole run


EXAMPLES = 60


def test_a_request_runs_the_job_and_finds_the_planted_bug(tmp_path: Path, planted: Path) -> None:
    """A run driven by a request alone: counts, not seconds, decide it (the budget is only its ceiling)."""
    request = FuzzRequest(contracts=(CONTRACT,), impls=("impl:numpy@cpu", f"{planted}:*"),
                          targets=((CONTRACT, f"{planted}:split"),), properties=("matches_oracle",),
                          profile="ci", workers=1, max_examples=EXAMPLES, budget_s=600.0, no_database=True, seed=3,
                          report=str(tmp_path / "report"), corpus=str(tmp_path / "corpus"), progress="none")
    out = io.StringIO()
    end = controller.run(request, out)
    assert end == controller.End(status="failed", failed=True) and controller.exit_code(end) == 1, out.getvalue()
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    impls = s["contracts"][CONTRACT]["implementations"]
    assert impls["impl:numpy@cpu"]["status"] == "passed"
    assert all(p["examples"] == EXAMPLES for p in impls["impl:numpy@cpu"]["properties"].values())
    assert impls[f"{planted}:split"]["status"] == "failed"
    assert {f["property"] for f in s["failures"]} == {"matches_oracle"}
    assert s["seed"] == 3 and s["workers"] == 1 and s["replay_command"] == request.replay_command(3)
    assert list((tmp_path / "corpus" / CONTRACT).glob("*.json"))  # every failure saved as it was found
    assert f"FAILED {CONTRACT} {planted}:split" in out.getvalue()
