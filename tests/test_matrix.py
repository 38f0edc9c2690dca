"""The release matrix's verdict rules and tables (``batchfuzz.matrix``),
on cells and bindings made here; tests/test_engines_vllm.py runs the real
command on a real release."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from batchfuzz import matrix
from batchfuzz.engines import Bound, ReleaseSource, SourceError


def _cell(release: str, verdict: str, **kw: object) -> matrix.Cell:
    return matrix.Cell(release=release, function="pkg/mod.py:Runner.split", contract="split_dummy_tokens",
                       domain="engine", verdict=verdict, **kw)  # type: ignore[arg-type]


def test_a_binding_that_is_not_bound_is_its_own_verdict_without_running() -> None:
    for status in ("absent", "unbindable"):
        b = Bound("eng 1.0", "pkg/mod.py:f", "split_dummy_tokens", status, reason=f"it is {status}")
        cell = matrix.run_cell(b, budget_s=1, timeout_s=1, seed=0)
        assert (cell.release, cell.verdict, cell.reason, cell.examples) == ("1.0", status, f"it is {status}", 0)


def test_exit_code_says_whether_anything_is_news() -> None:
    fail = _cell("1", "fail", property="p", counterexample={"args": {"num_reqs": "3"}})
    assert matrix.exit_code([_cell("1", "pass"), _cell("2", "absent")]) == 0
    assert matrix.exit_code([_cell("1", "pass"), fail]) == 1
    # A cell that could not be checked has its own code, below a counterexample's.
    assert matrix.exit_code([_cell("1", "unbindable", reason="changed")]) == 4
    assert matrix.exit_code([_cell("1", "error", reason="worker died")]) == 4
    assert matrix.exit_code([_cell("1", "unbindable", reason="changed"), fail]) == 1
    assert matrix.exit_code([_cell("1", "incomplete"), _cell("2", "pass")]) == 3
    assert matrix.exit_code([_cell("1", "incomplete"), fail]) == 1
    # A split-search row that is no token split is no finding.
    assert matrix.exit_code([_cell("1", "not-split", reason="not a token split"), _cell("2", "pass")]) == 0


def test_the_markdown_table_has_a_column_per_release_and_compact_counterexamples() -> None:
    args = {"num_scheduled_tokens": "np.array([1], dtype=np.int32)", "num_reqs_padded": "2",
            "buffers": "DummyBuffers(seq_lens=np.array([0, 0, 0], dtype=np.int32), query_start_loc=np.array([0, 0], dtype=np.int32))"}
    cells = [_cell("0.1", "fail", property="matches_oracle", counterexample={"args": args}), _cell("0.2", "pass")]
    md = matrix.to_markdown(cells).splitlines()
    assert md[0] == "| function | contract | 0.1 | 0.2 |"
    assert md[2] == ("| `mod.py:Runner.split` | split_dummy_tokens | **fail** `matches_oracle` "
                     "`num_scheduled_tokens=[1], num_reqs_padded=2, buffers=DummyBuffers(seq_lens=[0, 0, 0], query_start_loc=[0, 0])` "
                     "| pass |")
    assert "matches_oracle: num_scheduled_tokens=[1]" in matrix.to_text(cells)
    long = {"buffers": "DummyBuffers(" + ", ".join(f"f{i}=np.array([0, 0], dtype=np.int32)" for i in range(9)) + ")"}
    assert matrix.compact_args({"args": long}) == "buffers=DummyBuffers(...)"


class _ToySource(ReleaseSource):
    distribution = "toyengine"
    package = "toyengine"


def _toy_engine(*specs: tuple[str, str]) -> SimpleNamespace:
    return SimpleNamespace(ENGINE="toyengine", ReleaseSource=_ToySource, RELEASES=("1.0",),
                           SPECS=tuple(SimpleNamespace(function=f, contract=c) for f, c in specs))


def test_a_selection_is_checked_against_the_engines_specs() -> None:
    engine = _toy_engine(("pkg/run.py:Runner.split", "split_dummy_tokens"), ("pkg/run.py:Runner.fill", "pad_query_start_loc"))
    keep = matrix.selection(engine, ["*.fill"], None)
    bound = [Bound("toyengine 1.0", s.function, s.contract, "absent", reason="-") for s in engine.SPECS]
    assert [keep(b) for b in bound] == [False, True]
    keep = matrix.selection(engine, None, ["split_dummy_tokens"])
    assert [keep(b) for b in bound] == [True, False]
    with pytest.raises(LookupError, match=r"--function 'Runner.plan' matches no bound function; known: "
                                          r"pkg/run.py:Runner.split, pkg/run.py:Runner.fill"):
        matrix.selection(engine, ["Runner.plan"], None)
    with pytest.raises(LookupError, match=r"--contract: unknown contract 'nope'; known: "):
        matrix.selection(engine, None, ["nope"])
    with pytest.raises(LookupError, match=r"engine 'toyengine' binds to contract\(s\) no_such_contract, which are not registered"):
        matrix.selection(_toy_engine(("pkg/run.py:f", "no_such_contract")), None, None)


def test_release_sources_are_the_engines_own(tmp_path: Path) -> None:
    (tmp_path / "toyengine").mkdir()
    (tmp_path / "toyengine" / "_version.py").write_text('__version__ = "2.1.0"\n')
    engine = _toy_engine()
    (source,) = matrix.release_sources(engine, dirs=[str(tmp_path)])
    assert isinstance(source, _ToySource) and source.version == "2.1.0" and source.ref == f"dir:{tmp_path.resolve()}"
    with pytest.raises(ValueError, match=r"give at least one release"):
        matrix.release_sources(engine)
    with pytest.raises(SourceError, match=r"has no toyengine/ package directory"):
        matrix.release_sources(engine, dirs=[str(tmp_path / "toyengine")])
