"""``--steps engine|model`` of the release matrix (``batchfuzz engine``,
``batchfuzz vllm``; ``batchfuzz.matrix.cell_domain``): cells of a
contract over scheduled steps run on the domain that source feeds, the
others stay on their engine domain and say so; the header line, the table's
``steps`` column and the JSON rows say which source each cell used, and a
failing cell's check line carries ``--steps``.

The toy engine of tests/test_toy_engine.py (no contract over steps) gives the
cells that say so, and the usage error where vLLM's scheduler cannot be
imported (a ``vllm`` package that fails to import, put first on the path);
one real cell, vLLM 0.33.0's ``_allow_microbatching`` on steps from the
installed vLLM's scheduler, runs where that scheduler imports and the wheel
can be had (skipped, saying why, otherwise). Verdicts are driven by example
counts (``--max-examples``), not by time.
"""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

import pytest

from tests.test_toy_engine import _run, toy  # noqa: F401  (toy is the shared fixture)

ALLOW = "vllm/v1/worker/gpu_model_runner.py:GPUModelRunner._allow_microbatching"


def test_a_cells_domain_and_step_source_follow_the_one_rule() -> None:
    """``cell_domain``: ``engine_steps.steps_domain`` per contract; without
    ``--steps`` the engine domain, whose source is the model's for contract E."""
    from batchfuzz import matrix

    assert matrix.cell_domain("allow_microbatching", None) == ("engine", "model", "")
    assert matrix.cell_domain("find_conflicts", "model") == ("engine", "model", "")
    assert matrix.cell_domain("split_dummy_tokens", None) == ("engine", "", "")
    domain, source, note = matrix.cell_domain("split_ubatches", "model")  # contract D draws counts, not model steps
    assert (domain, source) == ("engine", "") and note.startswith("--steps model: contract 'split_ubatches' has no domain")
    cell = matrix.Cell(release="1", function="f.py:g", contract="allow_microbatching", domain="engine", verdict="fail",
                       property="p", target="engine:x", steps="model")
    assert matrix.check_command(cell, 5, "model") == "batchfuzz check allow_microbatching engine:x --steps model --property p --seed 5"
    assert matrix.check_command(cell, 5) == "batchfuzz check allow_microbatching engine:x --domain engine --property p --seed 5"
    with pytest.raises(ValueError, match=r"--steps must be one of 'model', 'engine', got 'replay'"):
        matrix.check_steps("replay")


def test_cells_without_the_step_source_stay_on_the_engine_domain_and_say_so(toy: tuple[Path, dict[str, str]]) -> None:  # noqa: F811
    root = toy[0]
    r = _run(toy, "engine", "toyengine", "--source", str(root / "checkout"), "--contract", "pad_query_start_loc",
             "--steps", "model", "--max-examples", "10", "--budget", "240", "--seed", "3", "--no-isolation",
             "--json", str(root / "steps.json"))
    assert r.returncode == 1, r.stdout + r.stderr  # the fill is wrong (tests/test_toy_engine.py), whatever the steps
    assert "--steps model (steps from batchfuzz's scheduler model where a contract has them, else the engine domain)" \
        in r.stdout.splitlines()[0], r.stdout
    data = json.loads((root / "steps.json").read_text())
    assert data["steps"] == "model"
    [row] = data["rows"]
    assert (row["domain"], row["steps"], row["verdict"]) == ("engine", "", "fail"), row
    assert row["steps_note"] == ("--steps model: contract 'pad_query_start_loc' has no domain of scheduled steps from "
                                 "'model' (it is not a contract over scheduled steps): the cell ran on its engine domain")
    lines = r.stdout.splitlines()
    table = [lines[1], next(line for line in lines if line.startswith("1.4.0 "))]  # the header, the cell's row
    assert table[0].split()[3] == "steps" and table[1].split()[3] == "none", table
    # no --steps for a contract without it: the check line names the domain the cell ran on
    assert " --domain engine --property " in row["check_command"] and "--steps" not in row["check_command"], row


def test_steps_engine_without_vllm_is_a_usage_error_saying_why(toy: tuple[Path, dict[str, str]],  # noqa: F811
                                                                tmp_path: Path) -> None:
    root, env = toy
    hidden = tmp_path / "no_vllm" / "vllm"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("no vLLM in this test")\n')
    r = _run((root, dict(env, PYTHONPATH=f"{hidden.parent}:{env['PYTHONPATH']}")), "engine", "toyengine", "--source",
             str(root / "checkout"), "--steps", "engine", "--max-examples", "5")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--steps engine: vLLM's scheduler cannot be imported here (ImportError: no vLLM in this test)" in r.stderr, r.stderr
    assert "cells" not in r.stdout  # refused before any cell ran


@pytest.fixture(scope="module")
def wheel() -> Path:
    from batchfuzz import engines, vllm_scheduler

    why = vllm_scheduler.import_error()
    if why is not None:
        pytest.skip(why)
    try:
        return engines.fetch_wheel("vllm", "0.33.0")
    except engines.SourceError as exc:
        pytest.skip(f"cannot download vllm==0.33.0 from the package registry: {exc}")


def test_the_shipped_microbatching_check_fails_on_steps_from_vllms_scheduler(wheel: Path, tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """One cell (one release, one function): its steps come from the
    installed vLLM's scheduler, its counterexample is a shrunk workload, and
    its check line carries ``--steps engine``."""
    from batchfuzz.cli import main

    out = tmp_path / "m.json"
    code = main(["vllm", "--wheel", str(wheel), "--function", "*._allow_microbatching", "--steps", "engine",
                 "--max-examples", "300", "--budget", "600", "--seed", "3", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 1, printed
    [row] = json.loads(out.read_text())["rows"]
    assert (row["function"], row["domain"], row["steps"], row["verdict"]) == (ALLOW, "engine-steps", "engine", "fail"), row
    assert row["property"] in ("sound_under_engine_splits", "sound_under_adversarial_splits"), row
    workload = ast.literal_eval(row["counterexample"]["context"]["workload"])
    # shrunk to the smallest class: one step, two identical prompts arriving together (a same-step prefix hit)
    assert workload["num_steps"] == 1 and [r[:2] for r in workload["requests"]] == [workload["requests"][0][:2]] * 2, workload
    line = row["check_command"]
    assert shlex.split(line)[4:6] == ["--steps", "engine"] and "--domain" not in line, line
    assert f"--- check it again: {line}" in printed and "engine_step_args(workload, recorded)" in row["reproduction"]
