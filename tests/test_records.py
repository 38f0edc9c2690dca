"""The typed records of ``summary.json`` (``batchfuzz.fuzz.records``): a run's
summary, written through them by ``report.build_summary``, reads back
through them unchanged; keys they do not know are kept; a missing or
mistyped field is an error naming the file, where in it, and the field; a
summary of a run before origins were still merges."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchfuzz.fuzz import merge
from batchfuzz.fuzz.records import ContractRecord, FailureRecord, RecordError, RunReport, Totals
from tests.test_merge_reports import _plan, _summary, _write_shard


def test_a_summary_reads_back_typed_and_writes_the_same_json() -> None:
    summary = _summary(_plan())
    record = RunReport.from_json(summary, "summary.json")
    assert isinstance(record.totals, Totals) and record.totals.failures == len(summary["failures"]) == 2
    contract = record.contracts["split_dummy_tokens"]
    assert isinstance(contract, ContractRecord)
    impl = next(iter(contract.implementations.values()))
    assert all(p.status for p in impl.properties.values())
    assert all(isinstance(f, FailureRecord) and f.contract == "split_dummy_tokens" for f in record.failures)
    assert [o.properties for o in record.origins] == [o["properties"] for o in summary["origins"]]
    assert record.to_json() == summary
    assert json.dumps(record.to_json()) == json.dumps(summary)  # the same keys, in the same order


def test_keys_the_records_do_not_know_are_kept() -> None:
    summary = _summary(_plan())
    summary["timeline"] = [{"t": 0.5, "examples": 10}]  # what another writer adds
    next(iter(summary["contracts"].values()))["plot"] = {"kind": "bar"}
    summary["failures"][0]["found_at_example"] = 3
    again = RunReport.from_json(summary, "summary.json").to_json()
    assert again == summary and again["timeline"] == [{"t": 0.5, "examples": 10}]


@pytest.mark.parametrize(("damage", "match"), [
    (lambda s: s.pop("totals"), r"^summary\.json: missing field 'totals'$"),
    (lambda s: s["totals"].pop("items_run"), r"^summary\.json: totals: missing field 'items_run'$"),
    (lambda s: s.update(partial="no"), r"^summary\.json: field 'partial' must be bool, got str$"),
    (lambda s: s["failures"][1].pop("implementation"), r"^summary\.json: failures\[1\]: missing field 'implementation'$"),
    (lambda s: s["errors"][0].update(message=None), r"^summary\.json: errors\[0\]: field 'message' must be str, got NoneType$"),
    (lambda s: next(iter(next(iter(s["contracts"].values()))["implementations"].values()))["properties"].update(
        p={"status": "passed", "examples": 1}), r"^summary\.json: split_dummy_tokens/\S+/p: missing field 'seconds'$"),
    (lambda s: s["notes"].append(7), r"field 'notes\[\d+\]' must be str, got int"),
])
def test_a_missing_or_mistyped_field_is_named_with_its_file(damage: Any, match: str) -> None:
    summary = _summary(_plan())
    damage(summary)
    with pytest.raises(RecordError, match=match):
        RunReport.from_json(summary, "summary.json")


def test_load_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_summary(_plan())))
    assert RunReport.load(path).status == "failed"
    path.write_text("{\"tool\": \"batchfuzz\"}")
    with pytest.raises(RecordError, match=rf"^{path}: missing field 'partial'$"):
        RunReport.load(path)
    with pytest.raises(RecordError, match=rf"^{tmp_path / 'nothing.json'}: missing$"):
        RunReport.load(tmp_path / "nothing.json")


def test_a_report_from_before_origins_still_merges(tmp_path: Path) -> None:
    """Written before summaries had origins: no "origins", no totals.origins, no failure's "origin"."""
    dirs = []
    for k in (1, 2):
        d = _write_shard(tmp_path, k, 2)
        s = json.loads((d / "summary.json").read_text())
        s.pop("origins")
        s["totals"].pop("origins")
        for f in s["failures"]:
            f.pop("origin", None)
        (d / "summary.json").write_text(json.dumps(s))
        dirs.append(d)
    merged = merge.merge_dirs(dirs)
    # without origins every failure is its own
    assert merged.summary["totals"]["origins"] == len(merged.summary["failures"]) == 2
