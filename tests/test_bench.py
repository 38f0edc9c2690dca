"""Smoke test of ``batchfuzz bench --quick``: it runs, prints the table, writes
JSON with every scenario's medians, and exact and oracle decide alike."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from batchfuzz.cli import main
from batchfuzz.commands.bench import shipped_allow_numpy


def test_bench_quick_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    rc = main(["bench", "--quick", "--scenarios", "mixed/G1,prefill-heavy/G3", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "exact/shipped" in text and "mixed/G1" in text and "prefill-heavy/G3" in text
    report = json.loads(out.read_text())
    assert sorted(s["name"] for s in report["scenarios"]) == ["mixed/G1", "prefill-heavy/G3"]
    for sc in report["scenarios"]:
        med = sc["median_seconds"]
        assert med["exact numpy"] > 0 and med["shipped numpy"] > 0 and med["oracle"] > 0
        assert sc["samples"]["oracle"] == 1 and sc["samples"]["exact numpy"] == 3
        for step in sc["steps"]:
            assert step["results"]["exact numpy"] == step["results"]["oracle"]
            assert step["num_reqs"] >= 1


def test_bench_bad_scenario_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--quick", "--scenarios", "nope"]) == 2
    assert "matches none of" in capsys.readouterr().err


def test_shipped_numpy_matches_spec_example() -> None:
    """A reader with q > 1 whose whole block another request writes: veto; the
    same reader with q == 1 is not a reader for the shipped check: allow."""
    tables = [np.array([[1, 2], [1, 3]])]
    assert shipped_allow_numpy(np.array([0, 2]), np.array([3, 2]), tables, [2]) is False
    assert shipped_allow_numpy(np.array([0, 2]), np.array([3, 1]), tables, [2]) is True
