"""``batchfuzz check`` on contract E, with the targets the issue names: a
function that always allows fails, one that never allows passes (its lost
overlap shows as a precision score), and a conflict finder that ignores
every group but the first fails."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from batchfuzz.cli import main

TARGETS = textwrap.dedent('''
    import numpy as np


    def always_allow(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes):
        return True


    def never_allow(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes):
        return False


    def first_group_only(num_computed_tokens, num_scheduled_tokens, block_tables, block_sizes):
        """A slot-level conflict finder that looks at group 0 only."""
        c, q = list(num_computed_tokens), list(num_scheduled_tokens)
        table, size = np.asarray(block_tables[0]), block_sizes[0]
        written = {}
        for w in range(len(c)):
            for p in range(c[w], c[w] + q[w]):
                b = int(table[w, p // size])
                if b:
                    written.setdefault((b, p % size), set()).add(w)
        out = set()
        for r in range(len(c)):
            if q[r] == 0:
                continue
            for p in range(c[r]):
                b = int(table[r, p // size])
                for w in written.get((b, p % size), ()) if b else ():
                    if w != r:
                        out.add((0, r, w, b))
        return out
''')


def _targets(tmp_path: Path) -> str:
    path = tmp_path / "targets.py"
    path.write_text(TARGETS)
    return str(path)


def test_check_fails_a_function_that_always_allows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    rc = main(["check", "allow_microbatching", f"{_targets(tmp_path)}:always_allow", "--budget", "20", "--seed", "1",
               "--json", str(report)])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "COUNTEREXAMPLE" in out and "reads unwritten KV" in out
    assert json.loads(report.read_text())["property"].startswith("sound_under")


def test_check_passes_a_function_that_never_allows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    rc = main(["check", "allow_microbatching", f"{_targets(tmp_path)}:never_allow", "--budget", "3", "--seed", "1",
               "--json", str(report)])
    out = capsys.readouterr().out
    assert rc == 0, out
    scores = json.loads(report.read_text())["scores"]
    assert scores["allowed_steps"] == 0
    assert scores["vetoed_safe_steps"] == scores["safe_steps"] > 0  # precision 0: reported, not failed


def test_check_fails_a_conflict_finder_that_ignores_other_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "find_conflicts", f"{_targets(tmp_path)}:first_group_only", "--budget", "20", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "missing" in out
