"""Honest cells on planted engine code: ``batchfuzz vllm --source`` over a
small fake release (no registry, no vLLM) whose copies of the dummy split
(found by the split search) raise, exit or hang, on the binding's probe input
too. Every call of the engine's code runs in a worker process, the bind-time
probe included; each row is a verdict, and the exit code says which kind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from batchfuzz.cli import main

TOY = "vllm/v1/worker/gpu/toy_runner.py"

# Each function is one copy of the split (its statements write `counts`); the
# planted line is one of them.
_SPLIT = '''
def {name}(num_tokens, num_reqs):
    counts = [num_tokens // num_reqs] * num_reqs
    {planted}
    return counts
'''
# The remainder's tokens on the last N % R requests, as contract A says.
FINE = "counts[num_reqs - num_tokens % num_reqs:] = [num_tokens // num_reqs + 1] * (num_tokens % num_reqs)"
OFF_BY_ONE = "counts[num_reqs] += num_tokens % num_reqs"  # IndexError on every input, (R=3, N=5) included
ONLY_ON_PROBE = FINE.replace("+ 1]", "+ 1 + [0][(num_reqs, num_tokens) == (3, 5)]]")  # IndexError on (R=3, N=5) alone
EXITS = FINE.replace("+ 1]", "+ 1 + __import__('os')._exit({code})]")
HANGS = FINE.replace("+ 1]", "+ 1 + __import__('time').sleep(3600)]")

def _tree(tmp_path: Path, planted: dict[str, str], extra: str = "") -> Path:
    tree = tmp_path / "tree"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "_version.py").write_text("__version__ = version = '0.99.0+planted'\n")
    body = "".join(_SPLIT.format(name=name, planted=line) for name, line in planted.items())
    (tree / TOY).parent.mkdir(parents=True)
    (tree / TOY).write_text(body + extra)
    return tree


def _run(tree: Path, tmp_path: Path, *more: str) -> tuple[int, dict[str, dict[str, Any]]]:
    out = tmp_path / "m.json"
    code = main(["vllm", "--source", str(tree), "--contract", "split_dummy_tokens", "--budget", "8", "--timeout", "2",
                 "--seed", "1", "--max-examples", "20", "--json", str(out), *more])
    rows = json.loads(out.read_text())["rows"]
    return code, {r["function"].split(":")[1].split("#")[0]: r for r in rows if r["function"].startswith(TOY)}


def test_an_engine_bug_raising_on_the_probe_input_is_a_counterexample_not_unbindable(tmp_path: Path) -> None:
    code, rows = _run(_tree(tmp_path, {"off_by_one": OFF_BY_ONE, "only_on_probe": ONLY_ON_PROBE}), tmp_path)
    assert code == 1
    for name in ("off_by_one", "only_on_probe"):
        row = rows[name]
        assert row["verdict"] == "fail" and row["property"] == "raises", row
        assert row["message"] == "list index out of range", row  # the IndexError of the planted line
        assert row["reproduction"] and row["check_command"], row
    # The bug the search meets on every input is shrunk to the smallest step.
    assert json.loads(json.dumps(rows["off_by_one"]["counterexample"]["args"])) == {"num_reqs": "1", "num_tokens": "1"}
    # The one only the probe input meets is that input.
    assert rows["only_on_probe"]["counterexample"]["args"] == {"num_reqs": "3", "num_tokens": "5"}


@pytest.mark.parametrize("code", [0, 3])
def test_engine_code_that_exits_in_its_probe_gives_a_crash_verdict_not_a_silent_exit(tmp_path: Path, code: int) -> None:
    exit_code, rows = _run(_tree(tmp_path, {"exits": EXITS.format(code=code), "fine": FINE}),
                           tmp_path)
    assert exit_code == 1
    assert rows["exits"]["verdict"] == "fail" and rows["exits"]["property"] == "crash", rows["exits"]
    assert rows["fine"]["verdict"] == "pass", rows["fine"]  # the binding after the dead worker's is still made


def test_engine_code_that_hangs_in_its_probe_is_a_timeout_verdict(tmp_path: Path) -> None:
    exit_code, rows = _run(_tree(tmp_path, {"hangs": HANGS}), tmp_path)
    assert exit_code == 1
    assert rows["hangs"]["verdict"] == "fail" and rows["hangs"]["property"] == "timeout", rows["hangs"]


def test_engine_code_that_exits_while_it_is_loaded_is_an_error_row_with_its_own_exit_code(tmp_path: Path) -> None:
    """A default argument runs when the cut-out ``def`` is executed: here it
    ends the process binding the release. The row says so; exit 4, not 0."""
    tree = _tree(tmp_path, {"fine": FINE})
    ubatch = tree / "vllm" / "v1" / "worker" / "ubatch_utils.py"
    ubatch.write_text("def maybe_create_ubatch_slices(should_ubatch, nst, padded, reqs, n, _=__import__('os')._exit(3)):\n"
                      "    return None, None\n")
    (tree / "vllm" / "v1" / "worker" / "dp_utils.py").write_text("def _post_process_ubatch(t, n):\n    return True\n")
    out = tmp_path / "m.json"
    code = main(["vllm", "--source", str(tree), "--contract", "split_ubatches", "--budget", "5", "--timeout", "2",
                 "--seed", "1", "--json", str(out)])
    (row,) = [r for r in json.loads(out.read_text())["rows"] if r["function"].endswith(":maybe_create_ubatch_slices")]
    assert row["verdict"] == "error" and "ended the process that bound it (exit status 3)" in row["reason"], row
    assert code == 4


def test_a_search_row_that_is_not_a_token_split_is_no_finding(tmp_path: Path) -> None:
    layers = ("\ndef layers_per_stage(num_hidden_layers, pp_size):\n"
              "    partitions = [num_hidden_layers // pp_size] * pp_size\n"
              "    partitions[-1] += num_hidden_layers % pp_size\n    return partitions\n")
    code, rows = _run(_tree(tmp_path, {"fine": FINE}, extra=layers), tmp_path)
    assert rows["layers_per_stage"]["verdict"] == "not-split", rows["layers_per_stage"]
    assert "not a token split" in rows["layers_per_stage"]["reason"]
    assert rows["fine"]["verdict"] == "pass" and code == 0
