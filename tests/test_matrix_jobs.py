"""``--jobs N`` of the release matrix (``batchfuzz.matrix.run_matrix``):
cells run side by side, and everything the command says comes in the order
one job gives, whatever order the cells finish in; ``--jobs`` is a positive
integer; Ctrl-C ends the command and every worker it started.

The cells are those of tests/test_matrix_planted.py's fake release (copies
of the dummy split found by the split search; no registry, no vLLM), driven
by example counts (``--max-examples``), not by time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchfuzz import matrix
from batchfuzz.cli import main
from batchfuzz.engines import Bound
from tests.test_matrix_planted import FINE, OFF_BY_ONE, _tree

# The first copy sleeps in every call: with two jobs, the cells after it end first.
SLOW = FINE.replace("+ 1]", "+ 1 + (__import__('time').sleep(0.01) or 0)]")


class _Heard:
    def __init__(self) -> None:
        self.said: list[str] = []

    def binding(self, release: str) -> None:
        self.said.append(f"binding {release}")

    def bound(self, release: str, rows: list[Bound], seconds: float) -> None:
        self.said.append(f"bound {release}: {len(rows)}")

    def start(self, bound: Bound) -> None:
        pass

    def cell(self, cell: matrix.Cell) -> None:
        self.said.append(f"cell {cell.function}")


def test_entries_are_reported_in_their_order_whatever_order_they_finish_in() -> None:
    heard = _Heard()
    report = matrix._InOrder(heard)
    slots = [report.reserve() for _ in range(4)]
    cells = [matrix.Cell("1", f"f{k}", "c", "engine", "pass") for k in range(3)]
    report.fill(slots[3], cells[2])
    report.fill(slots[2], cells[1])
    assert heard.said == [] and report.cells == []  # the release's entry, first, is not there yet
    report.fill(slots[0], matrix._Released("1", [], 0.0))
    assert heard.said == ["binding 1", "bound 1: 0"]
    report.fill(slots[1], cells[0])
    assert heard.said == ["binding 1", "bound 1: 0", "cell f0", "cell f1", "cell f2"] and report.cells == cells


def test_cells_side_by_side_only_where_each_runs_isolated_and_off_vllms_scheduler() -> None:
    run = matrix.CellRun(budget_s=1, timeout_s=1, seed=0)
    assert matrix.cells_at_once(3, run) == (3, "")
    assert matrix.cells_at_once(3, matrix.CellRun(1, 1, 0, isolate=False))[0] == 1
    assert matrix.cells_at_once(3, matrix.CellRun(1, 1, 0, steps="engine"))[0] == 1
    assert matrix.cells_at_once(1, matrix.CellRun(1, 1, 0, isolate=False)) == (1, "")


def test_two_jobs_report_in_the_order_of_the_bindings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The rows (printed and in the JSON) come in the order of the release's
    bindings, as with one job; a failing row has its reproduction under it."""
    from batchfuzz import engines

    tree = _tree(tmp_path, {"slow": SLOW, "off_by_one": OFF_BY_ONE, "fine": FINE})
    vllm = engines.engine("vllm")
    [(_, bindings)] = matrix.engine_releases(vllm, [vllm.ReleaseSource.from_dir(str(tree))])
    keep = matrix.selection(vllm, None, ["split_dummy_tokens"])
    order = [b.function for b in bindings() if keep(b)]
    out = tmp_path / "m.json"
    code = main(["vllm", "--source", str(tree), "--contract", "split_dummy_tokens", "--budget", "60", "--timeout", "5",
                 "--seed", "1", "--max-examples", "10", "--jobs", "2", "--json", str(out)])
    printed = capsys.readouterr().out.splitlines()
    assert code == 1 and printed[0].endswith(", 2 cells at a time"), printed  # the off-by-one copy's counterexample
    cells = [matrix.Cell(**row) for row in json.loads(out.read_text())["rows"]]
    assert [c.function for c in cells] == order
    assert [c.verdict for c in cells if "#" in c.function] == ["pass", "fail", "pass"]  # slow, off_by_one, fine
    table = matrix.to_text(cells, among=(spec.function for spec in vllm.SPECS)).splitlines()[1:]
    rows = [line for line in printed if line.startswith("0.99.0+planted ")]
    assert rows == table
    failing = printed.index(next(line for line in rows if " fail " in line))
    assert printed[failing + 1].startswith("--- reproduction"), printed[failing:failing + 2]


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_jobs_must_be_a_positive_integer(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["vllm", "--source", "/nonexistent", "--jobs", value])
    assert exited.value.code == 2
    assert f"argument --jobs: must be a positive integer, got '{value}'" in capsys.readouterr().err


def _sigint_as_in_a_terminal() -> None:
    """SIGINT at its default, as a terminal's shell starts a command: a test run
    started in the background (``pytest &`` from a script) ignores SIGINT, and
    the command would inherit that and rightly go on ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _in_session(sid: int) -> dict[int, int]:
    """The live processes of session ``sid``: pid -> process group."""
    found = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_bytes().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X") and int(fields[3]) == sid:
            found[int(name)] = int(fields[2])
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the session's processes from /proc")
def test_ctrl_c_ends_the_command_and_every_worker(tmp_path: Path) -> None:
    """Two cells run (each with its isolated worker, a process group of its
    own); Ctrl-C (SIGINT to the command's process group, as a terminal sends
    it) ends the command with 130, and nothing it started is left."""
    tree = _tree(tmp_path, {"a": FINE, "b": FINE, "c": FINE})
    proc = subprocess.Popen([sys.executable, "-m", "batchfuzz", "vllm", "--source", str(tree), "--contract",
                             "split_dummy_tokens", "--budget", "600", "--seed", "1", "--jobs", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_sigint_as_in_a_terminal)
    try:
        for _ in range(600):  # the two cells' workers are up (each leads its own group): at most a minute
            if sum(group == pid for pid, group in _in_session(proc.pid).items() if pid != proc.pid) >= 2:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            pytest.fail(f"the cells' workers never started: {_in_session(proc.pid)}")
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGINT and "interrupted" in err, (proc.returncode, out, err)
    for _ in range(100):  # a worker notices its owner is gone within half a second
        left = _in_session(proc.pid)
        if not left:
            break
        time.sleep(0.1)
    assert not left, {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left}


def test_a_cell_the_harness_cannot_run_is_an_error_row_and_a_binding_error_is_raised() -> None:
    """Side by side as with one job: a cell whose run raises is an ``error``
    row saying so (never a pass), and a release that cannot be bound raises."""
    from batchfuzz.engines import SourceError

    run = matrix.CellRun(budget_s=5, timeout_s=1, seed=0)
    bad = Bound("eng 1.0", "pkg/mod.py:f", "no_such_contract", "bound", ref="eng::dir:/x::pkg/mod.py:f::no_such_contract")
    fine = Bound("eng 1.0", "pkg/mod.py:g", "split_dummy_tokens", "absent", reason="not in this release")
    [error, absent] = matrix.run_matrix([("1.0", lambda: [bad, fine])], run, jobs=2)
    assert (error.verdict, absent.verdict) == ("error", "absent")
    assert error.reason.startswith("running the cell: UnknownName: unknown contract 'no_such_contract'"), error.reason

    def unbound() -> list[Bound]:
        raise SourceError("cannot bind eng 2.0: no package")

    with pytest.raises(SourceError, match=r"cannot bind eng 2\.0"):
        matrix.run_matrix([("1.0", lambda: [fine]), ("2.0", unbound)], run, jobs=2)
