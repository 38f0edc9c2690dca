"""``batchfuzz bench``: the --quick smoke test (it runs, prints the table, writes
JSON with every scenario's medians, exact and oracle decide alike) and the default drop-in comparison
with the engine's own function cut out of a cached vLLM wheel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from batchfuzz.cli import main
from batchfuzz.contracts._microbatch import shipped_vectorised


def test_bench_quick_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    rc = main(["bench", "--variants", "--quick", "--scenarios", "mixed/G1,prefill-heavy/G3", "--json", str(out)])
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
    assert main(["bench", "--variants", "--quick", "--scenarios", "nope"]) == 2
    assert "matches none of" in capsys.readouterr().err


def test_shipped_numpy_matches_spec_example() -> None:
    """A reader with q > 1 whose whole block another request writes: veto; the
    same reader with q == 1 is not a reader for the shipped check: allow."""
    tables = [np.array([[1, 2], [1, 3]])]
    assert shipped_vectorised(2, np.array([0, 2]), np.array([3, 2]), tables, [2]) is False
    assert shipped_vectorised(2, np.array([0, 2]), np.array([3, 1]), tables, [2]) is True


# ---------------------------------------------------------------- the drop-in comparison with the engine's own function

def _cached_wheel(version: str) -> Path:
    """A vLLM wheel already in the cache (never downloaded here), else skip."""
    from batchfuzz.engines import cache_dir

    found = sorted((cache_dir() / "wheels").glob(f"vllm-{version}-*.whl"))
    if not found:
        pytest.skip(f"no vllm {version} wheel in {cache_dir() / 'wheels'} (batchfuzz vllm --release {version} fetches it)")
    return found[0]


def test_bench_drop_in_times_the_real_shipped_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--vllm-wheel``: the release's own ``_allow_microbatching`` is timed on
    every step, decides as our copy of it, and the ratios against it are printed."""
    wheel = _cached_wheel("0.33.0")
    out = tmp_path / "r.json"
    rc = main(["bench", "--quick", "--scenarios", "mixed/G3,decode-heavy/G1", "--repeat", "2", "--devices", "cpu",
               "--vllm-wheel", str(wheel), "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "exact/engine" in text and "vllm 0.33.0 GPUModelRunner._allow_microbatching" in text
    report = json.loads(out.read_text())
    assert report["mismatches"] == [] and report["settings"]["engine"] is True
    for sc in report["scenarios"]:
        assert sc["median_seconds"]["engine"] > 0 and sc["ratios"]["exact/engine"] > 0
        assert sc["median_seconds"]["find torch cpu"] > 0
        for step in sc["steps"]:
            d = step["decisions"]
            assert d["engine"] == d["shipped"] and d["torch cpu"] == d["exact"] and d["find torch cpu"] == d["find"]


def test_bench_drop_in_exits_1_when_the_engine_disagrees(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A release whose function decides otherwise than our copy: MISMATCH and exit 1."""
    from batchfuzz.engines import vllm

    wheel = _cached_wheel("0.33.0")
    real = vllm.allow_microbatching_on_steps

    def contrary(source: Any) -> Any:
        prepare = real(source)
        return lambda *a: (lambda f=prepare(*a): not f())

    monkeypatch.setattr(vllm, "allow_microbatching_on_steps", contrary)
    rc = main(["bench", "--quick", "--scenarios", "mixed/G1", "--repeat", "1", "--no-oracle", "--devices", "none",
               "--vllm-wheel", str(wheel)])
    text = capsys.readouterr().out
    assert rc == 1 and "MISMATCH mixed/G1: step 0: engine" in text


def test_bench_vllm_wheel_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--variants", "--quick", "--vllm-wheel", str(tmp_path / "x.whl")]) == 2
    assert "not to --variants" in capsys.readouterr().err
    assert main(["bench", "--quick", "--vllm-wheel", str(tmp_path / "x.whl")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_bench_vllm_wheel_before_the_check_existed(capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM 0.27 has no ``_allow_microbatching``: a usage error saying so."""
    wheel = _cached_wheel("0.27.0")
    assert main(["bench", "--quick", "--vllm-wheel", str(wheel)]) == 2
    assert "ships from 0.28.0" in capsys.readouterr().err
