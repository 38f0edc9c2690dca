"""The release matrix's verdict rules and tables (``batchfuzz.engines.matrix``),
on cells and bindings made here; tests/test_engines_vllm.py runs the real
command on a real release."""

from __future__ import annotations

from batchfuzz.engines import Bound, matrix


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
    assert matrix.exit_code([_cell("1", "unbindable", reason="changed")]) == 1
    assert matrix.exit_code([_cell("1", "incomplete"), _cell("2", "pass")]) == 3
    assert matrix.exit_code([_cell("1", "incomplete"), fail]) == 1


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
