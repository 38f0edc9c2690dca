"""Merging a sharded fuzz run's reports (``batchfuzz.fuzz.merge``, ``batchfuzz merge-reports``)
and its corpora across shards.

Shard reports are written by the fuzz job's own code: the work items are
planned by ``batchfuzz fuzz``'s planner (``commands.controller.plan``, with
``--shard K/N`` exactly as the command runs it), their states are what a
job process writes (``batchfuzz.fuzz.job.new_state``, filled in), and the reports are built
and written by ``report.build_summary`` / ``write_reports``, with the
``"shard"`` field the fuzz command records. Work items are per property, so
an implementation is spread over several shards. The oracle for a merge is
the report of the same items built as one unsharded run. The corpus test
runs two real hunts in two processes through a shared Redis database; the
real ``batchfuzz fuzz --shard`` processes are in ``tests/test_nightly_shards.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import cli, output, registry
from batchfuzz.commands import fuzz as fuzz_command
from batchfuzz.fuzz import controller, corpus, merge, page, report
from batchfuzz.fuzz.job import ItemState, Job, WorkItem, new_state
from batchfuzz.fuzz.shards import plan_digest, shard_of
from batchfuzz.usage import ExitCode, UsageError
from tests.redis_server import redis_server, redis_url

__all__ = ["redis_server", "redis_url"]  # fixtures, imported for pytest

REPO = Path(__file__).resolve().parent.parent
STARTED = 1_800_000_000.0
CONTRACT = "split_dummy_tokens"
PLANTED = "planted.py:split"  # a user's target (the file need not exist: nothing runs it here)
# The planted target's failures: a wrong answer, and a crash while checking another property.
VIOLATED, CRASHED = "max_is_ceil", "within_max_model_len"
ERRORED = ("make_dummy", "impl:torch@cpu")  # its first property: the harness could not run it
NOT_RUN = ("pad_query_start_loc", "impl:torch.graph@cpu")  # its last property never started


def _plan(*extra: str, planted: bool = True) -> list[WorkItem]:
    """The work items ``batchfuzz fuzz [--target CONTRACT=PLANTED] EXTRA...`` plans (cpu)."""
    argv = ["fuzz", *(["--target", f"{CONTRACT}={PLANTED}"] if planted else []), *extra]
    return controller.plan(fuzz_command.request(cli.build_parser().parse_args(argv)))


def _failure(item: WorkItem) -> dict[str, Any]:
    crash = item.property == CRASHED
    return {"property": "crash" if crash else item.property, "during": item.property if crash else "",
            "spec": "the spec", "kind": "crash" if crash else "violation",
            "error_type": "Crash" if crash else "PropertyViolation", "message": "planted\nsecond line",
            "exit": "signal 11" if crash else "", "inputs": {"num_reqs": "3", "num_tokens": "5"},
            "reproduction": "split(3, 5)", "corpus_file": f"corpus/{CONTRACT}/{item.property[:16]:0<16}.json",
            "new": True, "id": f"{item.property[:16]:0<16}", "shrink_complete": True}


def _state(item: WorkItem, *, clean: bool, interrupted: bool) -> ItemState:
    """What a job process leaves in ``items/NNNN.json`` for this item at the end of a run."""
    props = [p.name for p in registry.get(item.contract).properties]
    rng = random.Random(item.shard_key)
    examples = rng.randint(5, 400)
    s = dataclasses.replace(
        new_state(item), status="passed", worker="job-0", started=STARTED + 1, slices=rng.randint(1, 3), examples=examples,
        seconds=round(rng.uniform(0.01, 3), 3),
        events={label: rng.randint(0, examples) for label in ("R == 1", "N % R == 0", "R == N") if rng.random() < 0.8},
        scores={"size": rng.randint(0, 50)} if rng.random() < 0.3 else {},
        settings={"profile": "nightly", "derandomize": False, "isolated": True, "database": None, "domain": "spec"})
    if not clean and item.target == PLANTED and item.property in (VIOLATED, CRASHED):
        s = dataclasses.replace(s, status="failed", failures=[_failure(item)])
    elif not clean and (item.contract, item.target) == ERRORED and item.property == props[0]:
        s = dataclasses.replace(s, status="error", examples=0, events={},
                                error={"type": "RuntimeError", "message": "cannot start", "traceback": ""})
    elif interrupted or ((item.contract, item.target) == NOT_RUN and item.property == props[-1]):
        s = dataclasses.replace(s, status="interrupted" if interrupted else "not run",
                                examples=0 if not interrupted else examples, slices=0 if not interrupted else 1,
                                seconds=0.0 if not interrupted else s.seconds, events={} if not interrupted else s.events,
                                scores={}, reason="the run was stopped (signal)" if interrupted else
                                "the budget ended before it started")
    return s


def _summary(items: list[WorkItem], *, seed: int = 5, clean: bool = False, partial: bool = False,
             shard: dict[str, Any] | None = None) -> dict[str, Any]:
    """``build_summary`` of a run of ``items`` (``partial``: stopped by SIGTERM, every item interrupted)."""
    job = Job(items=items, report_dir="unused", corpus_dir="corpus", database=None, profile="nightly", seed=seed, workers=1,
              budget_s=60.0, deadline=STARTED + 60.0, shard=shard, replay_command="batchfuzz fuzz ...")
    states = {it.index: _state(it, clean=clean, interrupted=partial) for it in items}
    return report.build_summary(job, states, report.RunEnd(started=STARTED, finished=STARTED + 60.0, partial=partial,
                                                           interrupted_by="SIGTERM received" if partial else None))


def _write_shard(root: Path, k: int, n: int, *, summary: dict[str, Any] | None = None, seed: int = 5,
                 plan: str | None = None, extra: tuple[str, ...] = (), planted: bool = True, **kwargs: Any) -> Path:
    """Shard k of n of the run ``batchfuzz fuzz [--target ...] EXTRA`` as the fuzz command writes it (its page aside)."""
    shard = {"index": k, "count": n, "plan": plan or plan_digest(i.shard_key for i in _plan(*extra, planted=planted))}
    s = summary if summary is not None else _summary(_plan(*extra, "--shard", f"{k}/{n}", planted=planted), seed=seed,
                                                     shard=shard, **kwargs)
    s["shard"] = shard
    d = root / f"shard-{k}-of-{n}"
    _write_reports(d, s)
    return d


def _write_reports(d: Path, summary: dict[str, Any]) -> None:
    """The files merge-reports reads (merge.REPORT_FILES), as write_reports makes them; not the
    page, which it never reads: drawing its plots was most of this file's time (~2 s a run)."""
    d.mkdir(parents=True, exist_ok=True)
    output.write_json_atomic(d / "summary.json", summary)
    output.write_text_atomic(d / "summary.md", report.render_markdown(summary))
    output.write_text_atomic(d / "junit.xml", report.render_junit(summary))


def _merge_cli(*args: str | Path) -> int:
    return cli.main(["merge-reports", *map(str, args)])


def _canonical(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary without the merge's shard tags, its lists in a fixed order (a merge
    concatenates the shards' lists; a run lists in plan order)."""
    out = json.loads(json.dumps(summary))

    def ordered(xs: list[Any]) -> list[Any]:
        return sorted(xs, key=lambda x: json.dumps(x, sort_keys=True))

    for c in out["contracts"].values():
        for i in c["implementations"].values():
            i.pop("shards", None)
            i["failures"] = ordered(i["failures"])
            for p in i["properties"].values():
                p.pop("shard", None)
    for key in ("failures", "errors", "not_run"):
        for x in out[key]:
            if isinstance(x, dict):
                x.pop("shard", None)
        out[key] = ordered(out[key])
    return out


def _impl_rows(markdown: str) -> set[str]:
    """The rows of the report's implementation table (| contract | `target` | status | ...)."""
    return {line for line in markdown.splitlines() if line.count("|") > 2 and line.split("|")[2].strip().startswith("`")}


# --------------------------------------------------------------------------- complete runs


@pytest.mark.parametrize("n", [2, 3, 5])
def test_merging_every_shard_equals_the_unsharded_report(tmp_path: Path, n: int) -> None:
    dirs = [_write_shard(tmp_path, k, n) for k in range(1, n + 1)]
    merged = merge.merge_dirs(dirs)
    whole = _summary(_plan())  # the oracle: the same items as one run
    got, want = _canonical(merged.summary), _canonical(whole)
    for key in ("status", "partial", "totals", "not_run", "failures", "errors", "profile", "seed", "device", "wall_seconds"):
        assert got[key] == want[key], key
    assert got["contracts"] == want["contracts"]
    assert list(got["contracts"]["split_dummy_tokens"]["coverage"]) == list(want["contracts"]["split_dummy_tokens"]["coverage"])
    assert set(got) == set(want) | {"merged", "shards"}  # the format of a single run's summary
    t = got["totals"]
    assert (t["items"], t["failures"], t["errors"], t["items_not_run"]) == (len(_plan()), 2, 1, 1)
    assert merged.summary["status"] == "failed" and merged.exit_code == ExitCode.COUNTEREXAMPLE
    assert merged.summary["shards"]["complete"] and merged.summary["shards"]["missing"] == []
    assert merged.summary["workers"] == n and merged.summary["shard"] is None

    # The planted target is spread over several shards and put back together: every
    # property once, each tagged with its shard, the status recomputed (a shard that
    # holds only passing properties of it calls it passed).
    impl = merged.summary["contracts"][CONTRACT]["implementations"][PLANTED]
    owners = {p: shard_of(i.shard_key, n) for i in _plan() if i.target == PLANTED for p in [i.property]}
    assert {p: v["shard"] for p, v in impl["properties"].items()} == owners
    assert len(set(owners.values())) > 1 and impl["shards"] == sorted(set(owners.values()))
    shard_statuses = {json.loads((dirs[k - 1] / "summary.json").read_text())["contracts"][CONTRACT]["implementations"][PLANTED]
                      ["status"] for k in impl["shards"]}
    assert "passed" in shard_statuses and impl["status"] == "failed"
    for cname, iname, status in ((*ERRORED, "error"), (*NOT_RUN, "incomplete")):
        assert merged.summary["contracts"][cname]["implementations"][iname]["status"] == status
    assert {f["shard"] for f in merged.summary["failures"]} == {owners[VIOLATED], owners[CRASHED]}

    # junit: the single run's test cases and counts, a suite per contract.
    root, oracle = ET.fromstring(merged.junit), ET.fromstring(report.render_junit(whole))

    def cases(r: ET.Element) -> list[tuple[Any, ...]]:
        return sorted((c.get("classname"), c.get("name"), tuple((x.tag, x.get("message")) for x in c if x.tag != "properties"),
                       c.find("properties/property").get("value"))  # type: ignore[union-attr]
                      for c in r.iter("testcase"))
    assert cases(root) == cases(oracle) and len(cases(root)) == len(_plan())
    for suite in root:
        want_suite = oracle.find(f"testsuite[@name='{suite.get('name')}']")
        assert want_suite is not None
        for attr in ("tests", "failures", "errors", "skipped"):
            assert suite.get(attr) == want_suite.get(attr), (suite.get("name"), attr)

    out = tmp_path / "merged"
    assert _merge_cli(*dirs, "--report", out) == 1
    assert json.loads((out / "summary.json").read_text())["totals"] == merged.summary["totals"]
    md = (out / "summary.md").read_text()
    assert md.startswith("## batchfuzz fuzz: failed") and f"### Shards ({n} of {n} merged)" in md
    # one row per (contract, target) the plan holds: every CPU implementation and the planted target
    targets = {(item.contract, item.target) for item in _plan()}
    assert _impl_rows(md) == _impl_rows(report.render_markdown(whole)) and len(_impl_rows(md)) == len(targets)
    assert "planted" in md and ET.parse(out / "junit.xml").getroot().tag == "testsuites"


def test_a_complete_run_without_failures_exits_0(tmp_path: Path) -> None:
    extra = ("--contract", "split_dummy_tokens", "--contract", "make_dummy")
    dirs = [_write_shard(tmp_path, k, 2, extra=extra, clean=True, planted=False) for k in (1, 2)]
    assert _merge_cli(*dirs, "--report", tmp_path / "out") == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["status"] == "passed" and s["totals"]["items"] == len(_plan(*extra, planted=False)) and not s["not_run"]


def test_items_that_did_not_run_make_the_merge_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every shard given, no failure, but one item never started: exit 3, as the fuzz command's."""
    extra = ("--contract", "pad_query_start_loc")
    dirs = [_write_shard(tmp_path, k, 2, extra=extra, clean=True, planted=False) for k in (1, 2)]
    assert _merge_cli(*dirs, "--report", tmp_path / "out") == 3
    assert f"incomplete: 1 work item(s) did not run: {NOT_RUN[0]}/{NOT_RUN[1]}/" in capsys.readouterr().out
    merged = merge.merge_dirs(dirs)
    assert merged.summary["status"] == "incomplete" and merged.exit_code == ExitCode.INCOMPLETE
    assert merged.summary["shards"]["complete"] and merged.summary["totals"]["items_not_run"] == 1
    (name,) = merged.summary["not_run"]
    assert name.startswith(f"{NOT_RUN[0]}/{NOT_RUN[1]}/")
    assert merged.summary["contracts"][NOT_RUN[0]]["implementations"][NOT_RUN[1]]["status"] == "incomplete"


def test_an_empty_shard_is_merged_not_missing(tmp_path: Path) -> None:
    """Rendezvous hashing can leave a shard without items (8 items over 4 shards here)."""
    extra, n = ("--contract", "allow_microbatching"), 4
    empty = [k for k in range(1, n + 1) if not _plan(*extra, "--shard", f"{k}/{n}", planted=False)]
    assert empty
    dirs = [_write_shard(tmp_path, k, n, extra=extra, clean=True, planted=False) for k in range(1, n + 1)]
    assert json.loads((dirs[empty[0] - 1] / "summary.json").read_text())["totals"]["items"] == 0
    merged = merge.merge_dirs(dirs)
    assert merged.missing == [] and merged.summary["shards"]["complete"]
    assert merged.summary["totals"]["items"] == len(_plan(*extra, planted=False)) and merged.summary["device"] == "cpu"
    assert merged.exit_code == ExitCode.OK


def test_an_unsharded_run_merges_as_shard_1_of_1(tmp_path: Path) -> None:
    d = tmp_path / "single"
    whole = _summary(_plan())  # "shard": null, as an unsharded fuzz run writes it
    _write_reports(d, whole)
    merged = merge.merge_dirs([d])
    assert merged.summary["shards"]["count"] == 1 and merged.missing == [] and not merged.summary["shards"]["given"][0]["sharded"]
    assert _canonical(merged.summary)["contracts"] == _canonical(whole)["contracts"]
    assert merged.summary["totals"] == whole["totals"]
    assert merged.exit_code == ExitCode.COUNTEREXAMPLE


# --------------------------------------------------------------------------- incomplete runs


def test_a_missing_shard_is_named_and_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = ("--contract", "split_dummy_tokens")
    dirs = {k: _write_shard(tmp_path, k, 3, extra=extra, clean=True, planted=False) for k in (1, 3)}
    out = tmp_path / "out"
    assert _merge_cli(dirs[1], dirs[3], "--report", out) == 3
    text = capsys.readouterr().out
    assert "shard 2/3: MISSING" in text and "incomplete: shard 2/3 missing" in text
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "incomplete" and s["shards"]["missing"] == [2] and not s["shards"]["complete"]
    assert any("MISSING: 2/3" in n for n in s["notes"])
    assert "| 2/3 | **missing** |" in (out / "summary.md").read_text()
    junit = ET.parse(out / "junit.xml").getroot()
    suite = junit.find(f"testsuite[@name='{merge.SHARDS_SUITE}']")
    assert suite is not None and suite.get("errors") == "1" and suite.get("tests") == "1"
    case = suite.find("testcase")
    assert case is not None and case.get("name") == "shard 2/3"


def test_a_failure_keeps_exit_1_even_when_a_shard_is_missing(tmp_path: Path) -> None:
    planted = next(i for i in _plan() if i.target == PLANTED and i.property == VIOLATED)
    k = shard_of(planted.shard_key, 3)  # the shard with the planted failure
    merged = merge.merge_dirs([_write_shard(tmp_path, k, 3)])
    assert merged.exit_code == ExitCode.COUNTEREXAMPLE
    # The run's rule (report.run_status): a failure is the headline, the missing shards are named.
    assert merged.summary["status"] == "failed" and not merged.summary["shards"]["complete"]
    assert sorted(merged.missing) == sorted({1, 2, 3} - {k})


def test_an_interrupted_shard_makes_the_merge_incomplete(tmp_path: Path) -> None:
    extra = ("--contract", "split_dummy_tokens")
    d1 = _write_shard(tmp_path, 1, 2, extra=extra, clean=True, planted=False, partial=True)
    d2 = _write_shard(tmp_path, 2, 2, extra=extra, clean=True, planted=False)
    merged = merge.merge_dirs([d1, d2])
    assert merged.exit_code == ExitCode.INCOMPLETE and merged.summary["partial"] and merged.summary["status"] == "interrupted"
    assert merged.summary["interrupted_by"] == "shard 1/2: SIGTERM received"
    impls = merged.summary["contracts"][CONTRACT]["implementations"]
    spread = [i for i in impls.values() if len(i["shards"]) == 2]
    assert spread and all(i["status"] == "interrupted" for i in spread)  # interrupted in one shard, passed in the other
    assert merged.markdown.startswith("## batchfuzz fuzz: PARTIAL")


# --------------------------------------------------------------------------- reports that do not belong together


def test_a_shard_given_twice_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d1 = _write_shard(tmp_path / "a", 1, 2)
    again = _write_shard(tmp_path / "b", 1, 2)
    d2 = _write_shard(tmp_path, 2, 2)
    assert _merge_cli(d1, again, d2, "--report", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert f"shard 1/2 given twice: {d1} and {again}" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change", ["count", "seed", "plan"])
def test_shards_of_different_runs_are_refused(tmp_path: Path, change: str, capsys: pytest.CaptureFixture[str]) -> None:
    d1 = _write_shard(tmp_path, 1, 2)
    if change == "count":
        d2 = _write_shard(tmp_path, 2, 3)
        expected = f"{d1} is shard 1/2, {d2} is shard 2/3"
    elif change == "seed":
        d2 = _write_shard(tmp_path, 2, 2, seed=6)
        expected = f"seed 5 in {d1}, 6 in {d2}"
    else:
        d2 = _write_shard(tmp_path, 2, 2, plan="feedfeedfeedfeed")
        expected = f"in {d1}, feedfeedfeedfeed in {d2}"
    assert _merge_cli(d1, d2, "--report", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "shards of different runs" in err and expected in err


def test_the_same_work_item_in_two_shards_is_refused(tmp_path: Path) -> None:
    """A property of one implementation in two shards (here: shard 2 claims every item)."""
    d1 = _write_shard(tmp_path, 1, 2)
    d2 = _write_shard(tmp_path, 2, 2, summary=_summary(_plan()))
    one = next(i for i in _plan("--shard", "1/2"))
    with pytest.raises(merge.MergeError, match=r"the same work item in two shards: .* is in shard 1/2 .* and in shard 2/2") as info:
        merge.merge_dirs([d1, d2])
    assert f"{one.contract}/{one.target}/{one.property} is in shard 1/2" in str(info.value)


# --------------------------------------------------------------------------- garbage in


def _truncate(path: Path, keep: float = 0.5) -> None:
    text = path.read_text()
    path.write_text(text[: int(len(text) * keep)])


def _impl(s: dict[str, Any]) -> dict[str, Any]:
    impl: dict[str, Any] = next(iter(next(iter(s["contracts"].values()))["implementations"].values()))
    return impl


@pytest.mark.parametrize(("damage", "match"), [
    (lambda d: _truncate(d / "summary.json"), r"summary.json: not valid JSON \(line \d+, column \d+"),
    (lambda d: _truncate(d / "junit.xml"), r"junit.xml: not well-formed XML \(line \d+, column \d+\)"),
    (lambda d: (d / "summary.json").write_bytes(b"\xff\xfe garbage"), r"summary.json: not a text file"),
    (lambda d: (d / "summary.json").write_text("[1, 2]"), r"summary.json: not a batchfuzz fuzz summary"),
    (lambda d: (d / "junit.xml").write_text("<html/>"), r"junit.xml: not a batchfuzz JUnit report"),
    (lambda d: (d / "summary.json").unlink(), r"summary.json: missing \(is .* the report directory"),
    (lambda d: (d / "junit.xml").unlink(), r"junit.xml: missing"),
    (lambda d: _edit(d, lambda s: s.pop("totals")), r"summary.json: missing field 'totals'"),
    (lambda d: _edit(d, lambda s: s.update(workers="2")), r"summary.json: field 'workers' must be int, got str"),
    (lambda d: _edit(d, lambda s: s.update(shard={"index": 3, "count": 2})), r"field 'shard' must be .*got \{'index': 3"),
    (lambda d: _edit(d, lambda s: next(iter(s["contracts"].values()))["implementations"].update(x={"status": "passed"})),
     r"summary.json: .*/x: missing field 'examples'"),
    (lambda d: _edit(d, lambda s: _impl(s).pop("properties")), r"summary.json: .*: missing field 'properties'"),
    (lambda d: _edit(d, lambda s: next(iter(_impl(s)["properties"].values())).update(examples=True)),
     r"summary.json: split_dummy_tokens/\S+/\w+: field 'examples' must be int, got bool"),
    (lambda d: shutil.copy(d.parent / "shard-1-of-2" / "junit.xml", d / "junit.xml"),
     r"junit.xml: its test cases are not those of .*summary.json"),
])
def test_garbage_input_is_named(tmp_path: Path, damage: Any, match: str, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write_shard(tmp_path, 1, 2)
    bad = _write_shard(tmp_path, 2, 2)
    damage(bad)
    with pytest.raises(merge.MergeError, match=match) as info:
        merge.merge_dirs([good, bad])
    assert str(bad) in str(info.value)
    assert _merge_cli(good, bad, "--report", tmp_path / "out") == 2
    assert str(bad) in capsys.readouterr().err


def _edit(d: Path, change: Any) -> None:
    s = json.loads((d / "summary.json").read_text())
    change(s)
    (d / "summary.json").write_text(json.dumps(s))


# --------------------------------------------------------------------------- hostile report files (issue 36, item 8)


def _raw(d: Path, change: Any) -> None:
    """Edit summary.json as text: ``change`` gets and returns it (what json.dumps cannot write)."""
    (d / "summary.json").write_text(change((d / "summary.json").read_text()))


def _replace(path: Path, by: str) -> None:
    """``path`` replaced by a FIFO (``by`` "fifo") or a symbolic link to ``by``."""
    path.unlink()
    if by == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(by)


def _first_property(s: dict[str, Any]) -> dict[str, Any]:
    prop: dict[str, Any] = next(iter(_impl(s)["properties"].values()))
    return prop


# Each: a damage to a report directory, and what the refusal says. The merge and the history share the reader.
HOSTILE = {
    "fifo summary": (lambda d: _replace(d / "summary.json", "fifo"),
                     r"summary.json: not a regular file \(a FIFO\)"),
    "dev/zero summary": (lambda d: _replace(d / "summary.json", "/dev/zero"),
                         r"summary.json: a symbolic link \(to '/dev/zero'\)"),
    "deep json": (lambda d: (d / "summary.json").write_text("[" * 100_000 + "]" * 100_000), r"summary.json: JSON nested deeper than"),
    "5000-digit integer": (lambda d: _raw(d, lambda t: t.replace('"workers": 1', '"workers": ' + "9" * 5000, 1)),
                           r"summary.json: .*an integer of 5000 digits"),
    "10**4000 count": (lambda d: _raw(d, lambda t: t.replace('"examples": ', '"examples": 1' + "0" * 4000 + ", \"x\": ", 1)),
                       r"summary.json: .*an integer of 4001 digits"),
    "NaN": (lambda d: _raw(d, lambda t: t.replace('"wall_seconds": ', '"wall_seconds": NaN, "x": ', 1)),
            r"summary.json: .*NaN is not a number a report holds"),
    "Infinity": (lambda d: _raw(d, lambda t: t.replace('"budget_seconds": ', '"budget_seconds": -Infinity, "x": ', 1)),
                 r"summary.json: .*-Infinity is not a number"),
    "1e999": (lambda d: _raw(d, lambda t: t.replace('"wall_seconds": ', '"wall_seconds": 1e999, "x": ', 1)),
              r"summary.json: .*a number out of range \(1e999\)"),
    "list for a mapping": (lambda d: _edit(d, lambda s: s["contracts"].update({"split_dummy_tokens": []})),
                           r"summary.json: .*split_dummy_tokens.* must be an object, got list"),
}
MERGE_ONLY = {
    "fifo junit": (lambda d: _replace(d / "junit.xml", "fifo"), r"junit.xml: not a regular file \(a FIFO\)"),
    "dev/zero junit": (lambda d: _replace(d / "junit.xml", "/dev/zero"),
                       r"junit.xml: a symbolic link"),
    "entities in junit": (lambda d: (d / "junit.xml").write_text('<!DOCTYPE x [<!ENTITY a "aaaa">]><testsuites/>'),
                          r"junit.xml: not a batchfuzz JUnit report \(it declares a DOCTYPE"),
    "bad timeline": (lambda d: _edit(d, lambda s: _first_property(s).update(timeline=[[1.0, "many"]])),
                     r"summary.json: split_dummy_tokens/.*: field 'timeline' must be a list of \[seconds, examples, seconds\]"),
    "timeline not a list": (lambda d: _edit(d, lambda s: _first_property(s).update(timeline={"a": 1})),
                            r"field 'timeline' must be a list"),
    "10**9 shards": (lambda d: _edit(d, lambda s: s["shard"].update(count=10**9)),
                     r"summary.json: field 'shard' must be .* <= 1000, got"),
}
HISTORY_ONLY = {
    "started a number": (lambda d: _edit(d, lambda s: s.update(started=12345)),
                         r"summary.json: field 'started' must be a string or null, got int"),
    "contract a list": (lambda d: _edit(d, lambda s: s["contracts"].update(x=[])), r"field 'contracts.x' must be an object"),
    "throughput a string": (lambda d: _edit(d, lambda s: s["totals"].update(throughput="fast")),
                            r"field 'totals.throughput' must be a number, got str"),
}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards 1/2, 2/2 and 1/1 of one run, written once (a test copies what it damages)."""
    root = tmp_path_factory.mktemp("shards")
    for k, n in ((1, 2), (2, 2), (1, 1)):
        _write_shard(root, k, n)
    return root


def _copy(shards: Path, name: str, into: Path) -> Path:
    return Path(shutil.copytree(shards / name, into / name))


@pytest.mark.parametrize("case", [*HOSTILE, *MERGE_ONLY])
def test_a_hostile_shard_report_is_refused_naming_the_file(tmp_path: Path, case: str, shards: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 naming the file, no traceback, nothing written, in bounded time and memory."""
    damage, match = {**HOSTILE, **MERGE_ONLY}[case]
    good, bad = _copy(shards, "shard-1-of-2", tmp_path), _copy(shards, "shard-2-of-2", tmp_path)
    damage(bad)
    with pytest.raises(merge.MergeError, match=match):
        merge.merge_dirs([good, bad])
    assert _merge_cli(good, bad, "--report", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert str(bad) in err and re.search(match, err), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", [*HOSTILE, *HISTORY_ONLY])
def test_a_hostile_history_is_refused_before_any_work(tmp_path: Path, case: str, shards: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``merge-reports --history D`` and ``fuzz --history D``: exit 2 naming the
    file before anything is merged or fuzzed."""
    damage, match = {**HOSTILE, **HISTORY_ONLY}[case]
    (tmp_path / "nights").mkdir()
    night = _copy(shards, "shard-1-of-1", tmp_path / "nights")
    damage(night)
    with pytest.raises(UsageError, match=match):
        page.read_history([str(night)])
    shard = _copy(shards, "shard-1-of-1", tmp_path)
    assert _merge_cli(shard, "--report", tmp_path / "out", "--history", night) == 2
    err = capsys.readouterr().err
    assert f"--history {night}" in err and re.search(match, err), err
    assert not (tmp_path / "out").exists()
    if case in ("fifo summary", "started a number"):  # fuzz reads its history with the same reader, before the run
        assert cli.main(["fuzz", "--contract", CONTRACT, "--impl", "impl:numpy@cpu", "--property", "matches_oracle",
                         "--no-database", "--report", str(tmp_path / "r"), "--history", str(night)]) == 2
        assert f"--history {night}" in capsys.readouterr().err
        assert not (tmp_path / "r").exists()


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d1 = _write_shard(tmp_path, 1, 1)
    assert _merge_cli(tmp_path / "nowhere", "--report", tmp_path / "out") == 2
    assert "nowhere: no such report directory" in capsys.readouterr().err
    assert _merge_cli(d1, "--report", d1) == 2
    assert "would overwrite it" in capsys.readouterr().err
    assert _merge_cli(d1, "--report", tmp_path / "out", "--corpus", tmp_path / "c") == 2
    assert "--corpus DEST and --corpus-from SRC" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert _merge_cli(d1, "--report", tmp_path / "file") == 2
    assert "exists and is not a directory" in capsys.readouterr().err


# --------------------------------------------------------------------------- the corpus across shards

# One shard's process: hunt the planted bug with a shared database, save the failure to its own corpus.
_HUNT = """
import json, sys
from hypothesis import settings
from batchfuzz import registry, runner
from batchfuzz.fuzz import corpus
from batchfuzz.fuzz.database import open_database
from batchfuzz.targets import load_function

url, local, corpus_dir, seed, worker, spec = sys.argv[1:7]
contract = registry.get("split_dummy_tokens")
db = open_database(url, local_dir=local)
examples = []
options = runner.HuntOptions(settings(max_examples=300, derandomize=False, database=db, deadline=None), seed=int(seed))
r = runner.hunt(contract, load_function(spec), contract.property("within_max_model_len"), options, target_name=spec,
                on_example=lambda: examples.append(1))
assert r.failure is not None, "the planted bug was not found"
data = corpus.make_entry_data(r.failure, target=spec, device="cpu",
                              found={"seed": int(seed), "profile": "nightly", "worker": worker})
path, new = corpus.save(corpus_dir, data)
print(json.dumps({"path": str(path), "name": path.name, "case": data["case"], "examples": r.examples}))
"""


def _hunt(*args: str, hash_seed: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env.update(PYTHONPATH=str(REPO), PYTHONHASHSEED=hash_seed)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_HUNT), *args], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(json.loads(r.stdout))


def test_two_processes_finding_the_same_failure_write_the_same_corpus_file(tmp_path: Path, redis_url: str) -> None:
    """Shard 1 finds and shrinks the planted bug; shard 2 (another process, seed, worker and
    PYTHONHASHSEED) replays it from the shared database and names its corpus file the same;
    merging the two corpora is a plain copy with nothing to reconcile."""
    planted = tmp_path / "planted_split.py"
    from tests.test_corpus import BUGGY

    planted.write_text(BUGGY)
    spec = f"{planted}:split"
    one = _hunt(redis_url, str(tmp_path / "db-1"), str(tmp_path / "corpus-1"), "4", "gw0", spec, hash_seed="11")
    two = _hunt(redis_url, str(tmp_path / "db-2"), str(tmp_path / "corpus-2"), "7", "gw3", spec, hash_seed="22")
    assert two["case"] == one["case"] and two["name"] == one["name"]
    a, b = json.loads(Path(one["path"]).read_text()), json.loads(Path(two["path"]).read_text())
    assert a["found"] != b["found"]  # seed and worker differ ...
    assert merge.stable_fields(a) == merge.stable_fields(b)  # ... and nothing else does

    dest = tmp_path / "merged-corpus"
    result = merge.merge_corpora([tmp_path / "corpus-1", tmp_path / "corpus-2"], dest)
    rel = f"split_dummy_tokens/{one['name']}"
    assert (result.copied, result.same, result.conflicts) == ([rel], [rel], [])
    assert (dest / rel).read_text() == Path(one["path"]).read_text()  # the first one is kept, byte for byte
    assert corpus.replay(corpus.load(dest / rel), targets={CONTRACT: spec}).fails  # the merged file still replays the bug


def test_without_the_shared_database_another_seed_shrinks_elsewhere(tmp_path: Path) -> None:
    """The control for the test above: without the shared database, Hypothesis's own shrinking
    ends seeds 4 and 7 in different local minima (other files); batchfuzz's structural reduction
    (batchfuzz.reduce) then brings both to the same smallest case, so two shards name the same file
    even without sharing examples."""
    from hypothesis import settings

    from batchfuzz import runner
    from batchfuzz.codec import encode_case
    from tests.test_corpus import BUGGY

    namespace: dict[str, Any] = {}
    exec(compile(BUGGY, "<planted>", "exec"), namespace)
    contract = registry.get("split_dummy_tokens")
    shrunk: list[Any] = []
    reduced: list[Any] = []
    for seed in (4, 7):
        for reduce, out in ((False, shrunk), (True, reduced)):
            r = runner.hunt(contract, namespace["split"], contract.property("within_max_model_len"),
                            runner.HuntOptions(settings(max_examples=300, derandomize=False, database=None, deadline=None),
                                               seed=seed, reduce=reduce),
                            target_name="planted")
            assert r.failure is not None
            out.append(encode_case(r.failure.case))
    assert shrunk[0] != shrunk[1]
    assert reduced[0] == reduced[1]


def _entry(tmp: Path, **changes: Any) -> dict[str, Any]:
    """A corpus document for the planted target, as the fuzz job writes one."""
    from batchfuzz.case import Case
    from batchfuzz.runner import Failure

    case = Case(args={"num_reqs": 3, "num_tokens": 5}, context={"max_model_len": 2})
    failure = Failure(contract=CONTRACT, target=PLANTED, property="max_is_ceil", spec="s", case=case,
                      error_type="PropertyViolation", message="m")
    data = corpus.make_entry_data(failure, target=PLANTED, device="cpu", found={"seed": 1, "worker": "gw0", "profile": "nightly"})
    data.update(changes)
    return data


def test_merging_corpora_is_a_plain_copy_that_names_real_conflicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    same = _entry(tmp_path)
    corpus.save(tmp_path / "s1", same)
    corpus.save(tmp_path / "s2", dict(same, date="2026-02-02T00:00:00+00:00", found={"seed": 9, "worker": "gw5"}))
    corpus.save(tmp_path / "s3", dict(same, spec="another text"))  # same name, different content: a conflict
    misnamed = corpus.path_for(tmp_path / "s4", same).with_name("ffffffffffffffff.json")
    output.write_json_atomic(misnamed, same)
    garbage = tmp_path / "s4" / "split_dummy_tokens" / "0000000000000000.json"
    garbage.write_text("{ truncated")
    dest = tmp_path / "dest"
    result = merge.merge_corpora([tmp_path / "s1", tmp_path / "s2", tmp_path / "s3", tmp_path / "s4", tmp_path / "none"], dest)
    rel = f"split_dummy_tokens/{same['id']}.json"
    assert result.copied == [rel] and result.same == [rel]
    assert len(result.conflicts) == 4, result.conflicts
    text = "\n".join(result.conflicts)
    assert "differs in spec" in text and "not its name ffffffffffffffff" in text and "not valid JSON" in text
    assert "none: no such corpus directory" in text
    assert [p.name for p in corpus.files(dest)] == [f"{same['id']}.json"]
    assert json.loads((dest / rel).read_text())["found"]["seed"] == 1  # the first one kept

    # The same through the command, after the reports.
    d = _write_shard(tmp_path / "r", 1, 1)
    code = _merge_cli(d, "--report", tmp_path / "out", "--corpus", tmp_path / "dest2", "--corpus-from", tmp_path / "s1",
                      tmp_path / "s2")
    assert code == 1  # the shard report holds the planted failure
    assert "corpus " + str(tmp_path / "dest2") + ": 1 copied, 1 already there, 0 conflicts" in capsys.readouterr().out


# --------------------------------------------------------------------------- the sharded nightly workflow


def _workflow() -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    assert isinstance(data, dict)
    return data


def _run_step(job: dict[str, Any], needle: str) -> str:
    (step,) = [s for s in job["steps"] if needle in s.get("run", "")]
    return str(step["run"])


def test_the_nightly_workflow_shards_merges_and_keeps_the_database() -> None:
    """The workflow's commands parse with the real argument parsers, its N shards
    partition the real plan, and its cache and artifact steps fit together."""
    import fnmatch
    import re
    import shlex

    from batchfuzz.fuzz.database import parse_redis_url

    wf = _workflow()
    on: Any = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    assert on["schedule"][0]["cron"].count(" ") == 4 and "budget" in on["workflow_dispatch"]["inputs"]
    fuzz_job, merge_job = wf["jobs"]["fuzz"], wf["jobs"]["merge"]
    shards = fuzz_job["strategy"]["matrix"]["shard"]
    n = len(shards)
    assert shards == list(range(1, n + 1)) and n > 1 and fuzz_job["strategy"]["fail-fast"] is False
    assert fuzz_job["services"]["redis"]["image"].startswith("redis") and "6379:6379" in fuzz_job["services"]["redis"]["ports"]

    command = _run_step(fuzz_job, "batchfuzz fuzz")
    default_url = re.search(r"\|\| '([^']+)'", fuzz_job["env"]["BATCHFUZZ_REDIS"])
    assert default_url and parse_redis_url(default_url.group(1)).client_url == "redis://localhost:6379/0"
    parser = cli.build_parser()
    planned: list[set[str]] = []
    for k in shards:
        argv = shlex.split(command.replace("${{ matrix.shard }}", str(k)).replace("${{ github.run_id }}", "123")
                           .replace('"$BUDGET"', "90s").replace('"$(nproc)"', "2")
                           .replace('"$BATCHFUZZ_REDIS"', default_url.group(1)))
        assert argv[:2] == ["batchfuzz", "fuzz"]
        args = parser.parse_args(argv[1:])  # the real parser: every flag exists and every value parses
        assert args.func is fuzz_command.run and args.shard == (k, n) and args.seed == 123 and args.profile == "nightly"
        assert args.database == default_url.group(1) and args.report == "reports/nightly" and args.workers == 2
        planned.append({i.shard_key for i in controller.plan(fuzz_command.request(args))})
    everything = {i.shard_key for i in _plan("--profile", "nightly", planted=False)}  # the workflow's profile
    assert set().union(*planned) == everything and sum(map(len, planned)) == len(everything)  # the N shards partition the plan

    merge_argv = shlex.split(_run_step(merge_job, "batchfuzz merge-reports"))
    args = parser.parse_args(merge_argv[1:])
    assert args.dirs == ["shards/*/reports/nightly"] and args.report == "reports/nightly"
    assert args.corpus == "corpus" and args.corpus_from == ["shards/*/corpus"]

    uses = {s.get("uses", "").split("@")[0]: s for s in fuzz_job["steps"] + merge_job["steps"]}
    upload = next(s for s in fuzz_job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    download = uses["actions/download-artifact"]
    for k in shards:
        name = upload["with"]["name"].replace("${{ matrix.shard }}", str(k)).replace("${{ github.run_id }}", "123")
        assert fnmatch.fnmatchcase(name, download["with"]["pattern"].replace("${{ github.run_id }}", "123"))
    assert "actions/cache/restore" in [s.get("uses", "").split("@")[0] for s in fuzz_job["steps"]]
    save = uses["actions/cache/save"]
    assert save in merge_job["steps"] and save["with"]["path"] == wf["env"]["BATCHFUZZ_DATABASE"]
    assert merge_job["needs"] == "fuzz" and merge_job["if"] == "always()"
    assert all(s.get("if") == "always()" for s in merge_job["steps"][merge_job["steps"].index(download) + 2:])


def test_the_workflows_merge_step_runs_on_downloaded_artifacts(tmp_path: Path) -> None:
    """The merge job's shell commands, run in a directory laid out as download-artifact leaves it."""
    wf = _workflow()
    merge_job = wf["jobs"]["merge"]
    n = len(wf["jobs"]["fuzz"]["strategy"]["matrix"]["shard"])
    for k in range(1, n + 1):
        art = tmp_path / "shards" / f"nightly-fuzz-123-shard-{k}"
        d = _write_shard(tmp_path / "tmp", k, n)
        shutil.copytree(d, art / "reports" / "nightly")
        (art / "corpus").mkdir(parents=True)
        (art / "corpus" / "README.md").write_text("the corpus\n")
        (art / ".hypothesis" / "batchfuzz" / f"key{k}").mkdir(parents=True)
        (art / ".hypothesis" / "batchfuzz" / f"key{k}" / "value").write_bytes(b"example")
    corpus.save(tmp_path / "shards" / "nightly-fuzz-123-shard-1" / "corpus", _entry(tmp_path))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_"))}
    env["PYTHONPATH"] = str(REPO)
    merge_cmd = _run_step(merge_job, "batchfuzz merge-reports").replace("batchfuzz", f"{sys.executable} -m batchfuzz", 1)
    r = subprocess.run(["bash", "-c", merge_cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr  # the planted failures
    s = json.loads((tmp_path / "reports" / "nightly" / "summary.json").read_text())
    assert s["shards"]["complete"] and s["totals"]["items"] == len(_plan())
    assert len(corpus.files(tmp_path / "corpus")) == 1
    r = subprocess.run(["bash", "-c", _run_step(merge_job, "cp -a")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / ".hypothesis" / "batchfuzz").iterdir()) == [f"key{k}" for k in range(1, n + 1)]
