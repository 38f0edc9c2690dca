"""Targets that try to escape what their worker promises (issue 36, items 9
and 12): processes started in a new session or as a double-forked daemon end
with the worker and are counted, and a target that rewrites the judge's code
is a crash naming what it changed. The targets are in tests/hostile.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.execution import PASSED, Isolated

from . import hostile

# The sleeper checks look at every process of the machine (``_sleepers``), so two of these tests on two
# xdist workers at once would count each other's sleepers: one worker runs them all (``--dist loadgroup``,
# conftest.py).
pytestmark = pytest.mark.xdist_group("sleepers")

CONTRACT = "split_dummy_tokens"
HOSTILE = Path(hostile.__file__)
REPO = HOSTILE.resolve().parent.parent


def _case(r: int, n: int) -> Case:
    return Case({"num_reqs": r, "num_tokens": n}, {"max_model_len": n})


def _sleepers() -> list[int]:
    """The live processes named ``hostile.MARKER`` (zombies have no argv)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    argv0 = fh.read().split(b"\0")[0]
            except OSError:
                continue
            if argv0 == hostile.MARKER.encode():
                found.append(int(name))
    return found


@pytest.fixture
def no_sleepers() -> object:
    """Fails a test that leaves a sleeper behind, after ending it."""
    assert _sleepers() == [], "a sleeper of an earlier run is still there"
    yield
    left = _sleepers()
    for pid in left:
        os.kill(pid, 9)
    assert left == [], f"left behind: {left}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER and /proc are Linux's")
@pytest.mark.parametrize("fn", ["new_session", "daemon"])
def test_processes_in_a_new_session_end_with_the_worker_and_are_counted(fn: str, no_sleepers: object) -> None:
    ex = Isolated(registry.get(CONTRACT), f"{HOSTILE}:{fn}")
    for n in range(3, 6):
        assert ex.check("sum_is_num_tokens", _case(2, n), 60).status == PASSED
    assert len(_sleepers()) == 3  # one a call, each in a session of its own
    ex.close()
    assert _sleepers() == [] and ex.orphans == 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER and /proc are Linux's")
def test_a_daemon_started_by_a_call_that_crashes_ends_with_the_worker(no_sleepers: object) -> None:
    """The call calls ``sys.exit`` after leaving a daemon: a crash, and the
    worker waits until its parent has ended the daemon before it ends."""
    from batchfuzz.execution import CRASH

    ex = Isolated(registry.get(CONTRACT), f"{HOSTILE}:daemon_then_exit")
    with ex:
        for n in range(3, 5):
            assert ex.check("sum_is_num_tokens", _case(2, n), 60).status == CRASH
            assert _sleepers() == []
        assert ex.orphans == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER and /proc are Linux's")
def test_check_ends_a_daemon_and_says_how_many(tmp_path: Path, no_sleepers: object) -> None:
    """The command's note and report count what it ended; nothing is left.
    Each call forks twice: on a loaded machine one can outlast the 1 s
    timeout a 3 s budget implies, hence an explicit one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = str(REPO)
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-m", "batchfuzz", "check", CONTRACT, f"{HOSTILE}:daemon", "--property",
                        "sum_is_num_tokens", "--min-examples", "1", "--budget", "3", "--timeout", "60", "--json", str(report)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 3), r.stdout + r.stderr
    data = json.loads(report.read_text())
    n = data["orphans_ended"]  # a sleeper a call: at least one an example
    assert n >= max(1, data["examples"]) and f"note: the target left {n} process" in r.stdout, r.stdout


def test_a_target_that_rewrites_the_judges_code_is_a_crash_naming_it() -> None:
    """``evaluate.__code__`` replaced on the first call: that call is a crash
    naming the judge's function, and the next case is judged by the real code."""
    from batchfuzz.execution import CRASH, FAILED, TAMPERED

    with Isolated(registry.get(CONTRACT), f"{HOSTILE}:rewrites_judge") as ex:
        out = ex.check("matches_oracle", _case(2, 7), 60)
        assert (out.status, out.error_type) == (CRASH, TAMPERED), out
        assert "batchfuzz.execution.evaluation.evaluate.__code__" in out.message, out
        assert ex.check("matches_oracle", _case(3, 7), 60).status in (CRASH, FAILED)  # caught again, never "passed"


def test_a_rewritten_property_or_judge_is_put_back_in_process() -> None:
    """The in-process check (a user's target, ``watch``) sees a rewritten
    code object or property and puts it back."""
    from batchfuzz import execution

    before = execution.snapshot_harness()
    code = execution.evaluate.__code__
    prop = registry.get(CONTRACT).property("matches_oracle")
    check = prop.check
    execution.evaluate.__code__ = hostile._passes.__code__
    object.__setattr__(prop, "check", lambda target, case: None)
    changed = execution.tampering(before)
    assert "batchfuzz.execution.evaluation.evaluate.__code__" in changed and "the property matches_oracle's check" in changed
    assert execution.evaluate.__code__ is code and prop.check is check
