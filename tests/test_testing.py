"""``batchfuzz.testing.check_contract`` in a user's own test suite: a pytest
file outside the repository fails, with the reproduction in its message, for
the remainder-to-last split that shipped, and passes for a correct one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from batchfuzz import testing

REPO = Path(__file__).resolve().parent.parent

USER_TESTS = '''
import batchfuzz.testing

from engine_split import even_split, remainder_to_last


def test_even_split():
    batchfuzz.testing.check_contract("split_dummy_tokens", even_split, max_examples=50)


def test_remainder_to_last():
    batchfuzz.testing.check_contract("split_dummy_tokens", remainder_to_last, max_examples=200)
'''

ENGINE_SPLIT = '''
def even_split(num_reqs, num_tokens):
    base, extra = divmod(num_tokens, num_reqs)
    return [base] * (num_reqs - extra) + [base + 1] * extra


def remainder_to_last(num_reqs, num_tokens):
    out = [num_tokens // num_reqs] * num_reqs
    out[-1] += num_tokens % num_reqs
    return out
'''


def test_a_users_pytest_file_fails_with_the_reproduction(tmp_path: Path) -> None:
    (tmp_path / "engine_split.py").write_text(textwrap.dedent(ENGINE_SPLIT))
    (tmp_path / "test_engine_split.py").write_text(textwrap.dedent(USER_TESTS))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "test_engine_split.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "1 failed, 1 passed" in out
    assert "Counterexample: split_dummy_tokens: property" in out
    assert "from engine_split import remainder_to_last" in out
    assert "remainder_to_last(3, 5)" in out  # the shrunk and reduced call
    # A short report (issue 37 item 9): the property and the case first, and none of batchfuzz's own source.
    assert "fails on num_reqs=3, num_tokens=5, max_model_len=2" in out, out
    assert "def check_contract" not in out and "runner.hunt(" not in out and "testing.py:" not in out, out
    assert len(out.splitlines()) < 45, out


PER_PROPERTY_TESTS = '''
import batchfuzz.testing

from engine_split import even_split, remainder_to_last

test_even = batchfuzz.testing.contract_tests("split_dummy_tokens", even_split, max_examples=30)
test_last = batchfuzz.testing.contract_tests("split_dummy_tokens", remainder_to_last, max_examples=200,
                                             properties=["matches_oracle", "sum_is_num_tokens", "max_is_ceil"])
'''


def test_contract_tests_give_one_pytest_test_per_property(tmp_path: Path) -> None:
    """``contract_tests`` makes a pytest test per property (issue 37 item 9): each passes or fails on its own."""
    (tmp_path / "engine_split.py").write_text(textwrap.dedent(ENGINE_SPLIT))
    (tmp_path / "test_per_property.py").write_text(PER_PROPERTY_TESTS)
    from batchfuzz import registry

    n = len(registry.get("split_dummy_tokens").properties)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEp", "-p", "no:cacheprovider", "-p", "no:randomly",
                        "test_per_property.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert f"2 failed, {n + 1} passed" in out, out
    assert "FAILED test_per_property.py::test_last[matches_oracle]" in out
    assert "FAILED test_per_property.py::test_last[max_is_ceil]" in out
    assert "PASSED test_per_property.py::test_last[sum_is_num_tokens]" in out
    assert "PASSED test_per_property.py::test_even[matches_oracle]" in out


SLOW_USER_TESTS = '''
import time

import batchfuzz.testing
from engine_split import even_split


def slow_split(num_reqs, num_tokens):
    time.sleep(0.3)  # past Hypothesis's default deadline (200 ms) on any machine
    return even_split(num_reqs, num_tokens)


def test_slow_split():
    batchfuzz.testing.check_contract("split_dummy_tokens", slow_split, max_examples=3)
'''


def test_check_contract_in_a_users_run_measures_no_time(tmp_path: Path) -> None:
    """Under Hypothesis's default settings (a 200 ms deadline, the ``too_slow``
    health check: what a user's suite without a profile has), a correct
    target that takes 300 ms a call passes: a busy machine, like a slow
    target, changes no verdict of ``check_contract``."""
    (tmp_path / "engine_split.py").write_text(textwrap.dedent(ENGINE_SPLIT))
    (tmp_path / "test_slow_split.py").write_text(textwrap.dedent(SLOW_USER_TESTS))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "test_slow_split.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "1 passed" in out, out


def test_counterexample_is_an_assertion_error_carrying_the_failure() -> None:
    def bad(num_reqs: int, num_tokens: int) -> list[int]:
        out = [num_tokens // num_reqs] * num_reqs
        out[-1] += num_tokens % num_reqs
        return out

    with pytest.raises(AssertionError) as info:
        testing.check_contract("split_dummy_tokens", bad, max_examples=200, properties=["max_is_ceil"])
    assert isinstance(info.value, testing.Counterexample)
    assert info.value.failure.property == "max_is_ceil"
    assert info.value.failure.case.args == {"num_reqs": 3, "num_tokens": 5}


def test_check_contract_takes_a_domain_and_rejects_bad_arguments() -> None:
    def fill(nst: np.ndarray, p: int, out: np.ndarray | None = None) -> np.ndarray:
        q = np.zeros(p + 1, dtype=np.int64) if out is None else out[: p + 1]
        q[1 : nst.size + 1] = np.cumsum(nst)
        q[nst.size + 1 :] = nst.sum()  # relies on q[0] == 0 in the buffer: true in the engine domain only
        return q

    testing.check_contract("pad_query_start_loc", fill, domain="engine", max_examples=60)
    with pytest.raises(testing.Counterexample):
        testing.check_contract("pad_query_start_loc", fill, domain="spec", max_examples=200)
    with pytest.raises(KeyError, match="has no domain 'nightly'"):
        testing.check_contract("pad_query_start_loc", fill, domain="nightly")
    with pytest.raises(ValueError, match="max_examples must be a positive int, got 0"):
        testing.check_contract("pad_query_start_loc", fill, max_examples=0)
    with pytest.raises(KeyError, match="unknown contract 'nope'"):
        testing.check_contract("nope", fill)


ENGINE_FILLS = '''
import numpy as np

def fill(num_scheduled_tokens, num_reqs_padded, out=None):
    """Right where the engine calls it: it leaves out[0] alone (the engine's buffer starts zeroed)."""
    nst, p = num_scheduled_tokens, num_reqs_padded
    q = np.zeros(p + 1, dtype=np.int32) if out is None else out[: p + 1]
    q[1 : nst.size + 1] = np.cumsum(nst)
    q[nst.size + 1 :] = nst.sum()
    return q

def unpadded(num_scheduled_tokens, num_reqs_padded, out=None):
    """The shipped bug: the padded entries keep what an earlier step left there."""
    nst, p = num_scheduled_tokens, num_reqs_padded
    q = np.zeros(p + 1, dtype=np.int32) if out is None else out[: p + 1]
    q[0] = 0
    q[1 : nst.size + 1] = np.cumsum(nst)
    return q
'''


@pytest.mark.parametrize(("fn", "domain", "code"), [("fill", "engine", 0), ("fill", "spec", 1), ("unpadded", "engine", 1)])
def test_check_on_the_engine_domain(tmp_path: Path, fn: str, domain: str, code: int) -> None:
    """``batchfuzz check pad_query_start_loc FILE:fill --domain engine`` passes a fill that
    is right on the inputs the engine produces and fails it on ``spec``; the padding bug
    fails on the engine domain too, with a counterexample that lies in it (R >= 1). The spec domain
    fails ``fill`` within its first 12 examples (seed 2), far fewer than 4 s gives every property."""
    (tmp_path / "fills.py").write_text(ENGINE_FILLS)
    report = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "batchfuzz", "check", "pad_query_start_loc", f"{tmp_path}/fills.py:{fn}",
                        "--domain", domain, "--budget", "4", "--seed", "2", "--json", str(report)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == code, r.stdout + r.stderr
    data = json.loads(report.read_text())
    assert data["domain"] == domain
    if code == 1 and domain == "engine":
        assert data["case"]["args"]["num_scheduled_tokens"]["ndarray"], data["case"]  # R >= 1
