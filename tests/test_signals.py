"""Signals at the edges of a fuzz run (issue 36, items 7 and 13b), sent at defined points, not after a delay.

A ``sitecustomize`` module on the command's ``PYTHONPATH`` sends the
signal from inside the ``batchfuzz fuzz`` process itself: during start-up,
when a given module of the registry's import is being imported (the import
that takes seconds, where a handler that raises leaves a module half made); after the
command returned, when the interpreter tears its modules down (where Python
has put its own handlers back to the default). The verdicts depend on what
the run wrote and its exit code, never on time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ONE_ITEM = ["--contract", "split_dummy_tokens", "--impl", "impl:numpy@cpu", "--property", "matches_oracle"]

# Sends signal SIGNAL to the fuzz process when it starts importing MODULE (once): $SIGNAL_AT_IMPORT is MODULE:SIGNAL.
_AT_IMPORT = '''
import os, signal, sys

_MODULE, _SIGNAL = os.environ["SIGNAL_AT_IMPORT"].split(":")


class _SignalAtImport:
    sent = False

    def find_spec(self, name, path=None, target=None):
        if name == _MODULE and not self.sent and sys.argv[1:2] == ["fuzz"]:
            self.sent = True
            os.kill(os.getpid(), getattr(signal, _SIGNAL))
        return None


sys.meta_path.insert(0, _SignalAtImport())
'''

# Sends SIGTERM to the fuzz process as the interpreter tears the modules down, after the command returned.
_AT_TEARDOWN = '''
import os, signal, sys

_ARGV = sys.argv  # the same list the command line fills


class _SignalAtTeardown:
    def __del__(self):
        if _ARGV[1:2] == ["fuzz"]:
            os.kill(os.getpid(), signal.SIGTERM)


_kept = _SignalAtTeardown()
'''


def _fuzz(tmp_path: Path, site: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(site)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_"))}
    full.update(PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{REPO}", **env)
    cmd = [sys.executable, "-m", "batchfuzz", "fuzz", *ONE_ITEM, "--report", str(tmp_path / "report"), "--corpus",
           str(tmp_path / "corpus"), "--progress", "lines", "--no-database", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=full, capture_output=True, text=True, timeout=400)


# Modules start-up's registry import brings in (numpy, Hypothesis, the strategies: seconds on a busy machine).
# It imported torch too until issue 37 made the registry light; the fuzz process itself imports no torch now.
@pytest.mark.parametrize(("signame", "module"), [("SIGTERM", "hypothesis.strategies"), ("SIGINT", "batchfuzz.strategies._steps")])
def test_a_signal_while_torch_is_imported_ends_start_up_with_a_partial_report(tmp_path: Path, signame: str,
                                                                              module: str) -> None:
    """The signal comes in the middle of an import of start-up's registry
    import: that import completes, start-up stops at its next safe point, a
    partial report is written, exit 128+N, no traceback."""
    r = _fuzz(tmp_path, _AT_IMPORT, "--budget", "60", SIGNAL_AT_IMPORT=f"{module}:{signame}")
    out = r.stdout + r.stderr
    assert r.returncode == 128 + getattr(signal, signame), out
    assert "Traceback" not in out, out
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert s["partial"] is True and s["interrupted_by"] == f"{signame} received during start-up", s["interrupted_by"]
    assert s["totals"]["items_not_run"] == s["totals"]["items"] == 1


def test_a_signal_after_the_reports_leaves_the_exit_code_theirs(tmp_path: Path) -> None:
    """SIGTERM once the reports are written and the command has returned (as
    the interpreter finalizes): the exit code is the complete report's (0,
    passed), not 143 beside it."""
    r = _fuzz(tmp_path, _AT_TEARDOWN, "--profile", "ci", "--budget", "120")
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert s["status"] == "passed" and s["partial"] is False, s["status"]
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_signal_inside_an_import_waits_and_a_second_one_stops_at_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up handler itself: inside an import the first signal is kept
    for the next safe point, a second raises at once (an import that never
    ends must not make the run unstoppable); outside an import it raises."""
    from batchfuzz.fuzz import controller
    from batchfuzz.usage import PENDING_SIGNALS

    (tmp_path / "signalled_module.py").write_text(
        "import sys\nfrom batchfuzz.fuzz import controller\nRESULTS = []\n"
        "controller._signal_at_start(15, sys._getframe())\nRESULTS.append('deferred')\n"
        "try:\n    controller._signal_at_start(2, sys._getframe())\n"
        "except controller._StartInterrupted as exc:\n    RESULTS.append(exc.signum)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    PENDING_SIGNALS.clear()
    try:
        import signalled_module

        assert signalled_module.RESULTS == ["deferred", 2] and PENDING_SIGNALS == []
        controller._signal_at_start(15, sys._getframe())  # raises: not in an import
    except controller._StartInterrupted as exc:
        assert exc.signum == 15
    else:
        pytest.fail("a signal outside an import must stop start-up")
    finally:
        PENDING_SIGNALS.clear()
        sys.modules.pop("signalled_module", None)
    PENDING_SIGNALS.append(15)  # what an import deferred: the next safe point acts on it
    with pytest.raises(controller._StartInterrupted):
        controller._safe_point()
    assert PENDING_SIGNALS == []
