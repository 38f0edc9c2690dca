"""Hypothesis's observability records name what batchfuzz checked
(``batchfuzz.observability``): a ``check`` (switched on by ``--observe``), a
``fuzz`` job over two job processes (switched on by Hypothesis's own
environment variable) and ``check_contract`` inside a user's pytest file
write ``test_case`` records to ``.hypothesis/observed/`` of the directory
they run in, each with ``property`` ``CONTRACT.PROPERTY`` and
``metadata.batchfuzz`` naming the contract, property, target and domain;
the records of a buggy target include failed ones.

Every run here is bounded by examples (``--min-examples``, the derandomized
``ci`` profile, ``max_examples``), not by seconds: the budgets are generous
ceilings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from batchfuzz import registry

REPO = Path(__file__).resolve().parent.parent
STATUSES = {"passed", "failed", "gave_up"}

BAD_SPLIT = '''
def bad_split(num_reqs, num_tokens):
    out = [num_tokens // num_reqs] * num_reqs
    out[-1] += num_tokens % num_reqs
    return out
'''


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _run(argv: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_env(**extra), capture_output=True, text=True, timeout=400)


def _records(cwd: Path) -> list[dict[str, Any]]:
    """Every ``test_case`` record under ``cwd/.hypothesis/observed``."""
    files = sorted((cwd / ".hypothesis" / "observed").glob("*_testcases.jsonl"))
    assert files, f"no observability file under {cwd / '.hypothesis' / 'observed'}"
    records = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    assert all(r["type"] == "test_case" for r in records)
    return records


def _check_names(records: list[dict[str, Any]], contract: str, target: str, domain: str = "spec") -> None:
    props = {p.name for p in registry.get(contract).properties}
    for r in records:
        meta = r["metadata"]["batchfuzz"]
        assert r["property"] == f"{contract}.{meta['property']}", r["property"]
        assert meta["property"] in props
        assert (meta["contract"], meta["target"], meta["domain"]) == (contract, target, domain)
        assert r["status"] in STATUSES


def test_check_observe_writes_named_records(tmp_path: Path) -> None:
    target = "variant:remainder_to_last.v1_runner"
    r = _run([sys.executable, "-m", "batchfuzz", "check", "split_dummy_tokens", target, "--observe", "--seed", "1",
              "--budget", "60", "--min-examples", "10"], tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    records = _records(tmp_path)
    _check_names(records, "split_dummy_tokens", target)
    meta = records[0]["metadata"]["batchfuzz"]
    assert meta["target_kind"] == "variant" and meta["variant"] == "remainder_to_last.v1_runner"
    assert "batchfuzz_version" in meta
    failed = [x for x in records if x["status"] == "failed"]
    assert failed and {x["property"] for x in failed} == {"split_dummy_tokens.matches_oracle"}
    assert all(x["status_reason"] for x in failed)
    # batchfuzz's input-class labels are the records' features (Tyche plots them)
    assert any(x["features"] for x in records)
    # --observe leaves out Hypothesis's line coverage of generated examples (batchfuzz's
    # lines, not the target's); its explain phase still traces the shrinking of a failure
    assert all(x["coverage"] is None for x in records if x["metadata"]["phase"] == "generate")


def test_fuzz_job_processes_write_under_hypothesis_switch(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(textwrap.dedent(BAD_SPLIT))
    props = ("matches_oracle", "sum_is_num_tokens")
    argv = [sys.executable, "-m", "batchfuzz", "fuzz", "--profile", "ci", "--workers", "2", "--budget", "120",
            "--contract", "split_dummy_tokens", "--impl", "impl:numpy@cpu", "--impl", "bad.py:*",
            "--target", "split_dummy_tokens=bad.py:bad_split", "--report", str(tmp_path / "report"),
            "--corpus", str(tmp_path / "corpus"), "--progress", "none", "--no-database"]
    for p in props:
        argv += ["--property", p]
    r = _run(argv, tmp_path, HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY="1", HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER="1")
    assert r.returncode == 1, r.stdout + r.stderr
    records = _records(tmp_path)
    seen = {(x["metadata"]["batchfuzz"]["target"], x["property"]) for x in records}
    assert seen == {(t, f"split_dummy_tokens.{p}") for t in ("impl:numpy@cpu", "bad.py:bad_split") for p in props}
    for target in ("impl:numpy@cpu", "bad.py:bad_split"):
        _check_names([x for x in records if x["metadata"]["batchfuzz"]["target"] == target], "split_dummy_tokens", target)
    impl_meta = next(x["metadata"]["batchfuzz"] for x in records if x["metadata"]["batchfuzz"]["target"] == "impl:numpy@cpu")
    assert (impl_meta["implementation"], impl_meta["device"]) == ("numpy", "cpu")
    failed = {x["property"] for x in records if x["status"] == "failed"}
    assert failed == {"split_dummy_tokens.matches_oracle"}
    assert all(x["status"] == "passed" for x in records if x["metadata"]["batchfuzz"]["target"] == "impl:numpy@cpu")


def test_check_contract_in_pytest_names_the_property_not_the_test(tmp_path: Path) -> None:
    (tmp_path / "engine_split.py").write_text(textwrap.dedent(BAD_SPLIT))
    (tmp_path / "test_mine.py").write_text(textwrap.dedent('''
        import batchfuzz.testing
        from engine_split import bad_split

        def test_split():
            batchfuzz.testing.check_contract("split_dummy_tokens", bad_split, max_examples=30)
    '''))
    r = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist",
              "test_mine.py"], tmp_path, HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY="1",
             HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER="1")
    assert r.returncode == 1, r.stdout + r.stderr
    records = _records(tmp_path)
    _check_names(records, "split_dummy_tokens", "engine_split:bad_split")
    assert {x["metadata"]["batchfuzz"]["pytest_nodeid"] for x in records} == {"test_mine.py::test_split"}
    # Which property fails first depends on the search (random outside CI): any of the contract's, named as such.
    props = {p.name for p in registry.get("split_dummy_tokens").properties}
    assert any(x["status"] == "failed" and x["property"].partition(".")[::2] in {("split_dummy_tokens", p) for p in props}
               for x in records)


def test_every_callback_gets_check_contracts_records_named_and_labelled() -> None:
    """A callback of one's own (as Tyche or HypoFuzz register) receives
    ``check_contract``'s records as ``CONTRACT.PROPERTY`` with
    ``metadata.batchfuzz``, not the bare property name several contracts
    share (issue 37 item 9); removing the callback removes it."""
    from hypothesis.internal.observability import add_observability_callback, remove_observability_callback

    from batchfuzz import testing

    seen: list[Any] = []
    add_observability_callback(seen.append)
    try:
        testing.check_contract("split_dummy_tokens", lambda num_reqs, num_tokens: [num_tokens // num_reqs] * num_reqs,
                               max_examples=5, properties=["sum_is_num_tokens"])
    except testing.Counterexample:
        pass
    finally:
        remove_observability_callback(seen.append)
    from hypothesis.internal import observability as obs

    assert not any(f == seen.append for f in obs._callbacks.get(threading.get_ident(), []))
    cases = [x for x in seen if x.type == "test_case"]
    assert cases and {x.property for x in cases} == {"split_dummy_tokens.sum_is_num_tokens"}, {x.property for x in cases}
    meta = cases[0].metadata.to_json()["batchfuzz"]
    assert (meta["contract"], meta["property"], meta["domain"]) == ("split_dummy_tokens", "sum_is_num_tokens", "spec")
