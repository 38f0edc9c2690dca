"""Contract M (``tbo_dp_agree``) bound to SGLang: on a tiny two-batch-overlap
module in SGLang's layout written here (the gathered tensor 3-D in the old
module path, 2-D in the new; the flags combined by ``min`` or by ``max``), and
on SGLang 0.4.9 and 0.5.8 downloaded at test time into the cache (skipped,
with the reason, when the registry cannot be reached). Verdicts are driven by
example counts, not time."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from batchfuzz import engines, matrix
from batchfuzz.engines import SourceError, sglang

FORWARD_MODE = '''
    from enum import IntEnum


    class ForwardMode(IntEnum):
        EXTEND = 1
        DECODE = 2
        IDLE = 4
        TARGET_VERIFY = 5
    '''

# A DP preparer in SGLang's shape, written for this test. COLUMN reads the
# gathered tensor's flag and mode columns; COMBINE folds the ranks' flags.
PREPARER = '''
    from sglang.srt.model_executor.forward_batch_info import ForwardMode


    class TboDPAttentionPreparer:
        def compute_output(self, gathered):
            flags = [int(x) for x in gathered[COLUMN 0].tolist()]
            modes = [int(x) for x in gathered[COLUMN 1].tolist()]
            mode, same = self._compute_global_forward_mode(modes)
            ok = self.enable_two_batch_overlap and COMBINE(flags) and same
            return (self.local_tbo_split_seq_index, mode) if ok else (None, None)

        @staticmethod
        def _compute_global_forward_mode(modes):
            voting = [m for m in modes if m != ForwardMode.IDLE.value]
            if not voting or not TboDPAttentionPreparer._is_all_same(voting):
                return None, False
            return ForwardMode(voting[0]), True

        @staticmethod
        def _is_all_same(values):
            return len(set(values)) == 1
    '''


def _tree(root: Path, path: str, combine: str) -> Path:
    column = ":, 0," if path == sglang.TBO_OLD else ":,"
    files = {"sglang/__init__.py": "", "sglang/_version.py": '__version__ = version = "9.0.0"\n',
             "sglang/srt/model_executor/forward_batch_info.py": FORWARD_MODE,
             path: PREPARER.replace("COLUMN", column).replace("COMBINE", combine)}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    return root


def _dp_rows(source: engines.ReleaseSource) -> dict[str, engines.Bound]:
    return {b.function.split(":")[0]: b for b in sglang.bindings(source) if b.contract == "tbo_dp_agree"}


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("sglang_dp")
    return {"old": _tree(base / "old", sglang.TBO_OLD, "min"), "new": _tree(base / "new", sglang.TBO_NEW, "min"),
            "any": _tree(base / "any", sglang.TBO_NEW, "max")}


def test_each_layout_is_bound_through_its_adapter(trees: dict[str, Path]) -> None:
    for layout, path, other in (("old", sglang.TBO_OLD, sglang.TBO_NEW), ("new", sglang.TBO_NEW, sglang.TBO_OLD)):
        rows = _dp_rows(sglang.ReleaseSource.from_dir(trees[layout]))
        assert rows[path].status == "bound", rows[path]
        assert rows[other].status == "absent" and "is not in this source tree" in rows[other].reason
        target = rows[path].target
        assert target is not None
        # the idle rank does not vote; each rank keeps its own split index
        assert target([True, True], ["idle", "decode"], [0, 3], True) == [(0, "decode"), (3, "decode")]
        assert target([True, False], ["extend", "extend"], [1, 2], True) == [(None, None)] * 2
        assert target([True, True], ["extend", "target_verify"], [1, 2], True) == [(None, None)] * 2
        assert engines.resolve(rows[path].ref)([True], ["extend"], [4], False) == [(None, None)]
        with pytest.raises(ValueError, match=r"forward_modes\[0\] must be one of"):
            target([True], ["prefill"], [0], True)


def test_a_layout_that_does_not_fit_is_unbindable(tmp_path: Path) -> None:
    # a 2-D preparer under the old path: the 3-D adapter's tensor is read as (dp, 1) rows
    tree = _tree(tmp_path, sglang.TBO_OLD, "min")
    text = (tree / sglang.TBO_OLD).read_text().replace(":, 0, 0", ":, 0, 0, 0").replace(":, 0, 1", ":, 0, 1, 0")
    (tree / sglang.TBO_OLD).write_text(text)
    row = _dp_rows(sglang.ReleaseSource.from_dir(tree))[sglang.TBO_OLD]
    assert row.status == "unbindable" and "TboDPAttentionPreparer.compute_output" in row.reason, row


def test_the_matrix_passes_min_and_shrinks_max(trees: dict[str, Path]) -> None:
    good = _dp_rows(sglang.ReleaseSource.from_dir(trees["new"]))[sglang.TBO_NEW]
    bad = _dp_rows(sglang.ReleaseSource.from_dir(trees["any"]))[sglang.TBO_NEW]
    cell = matrix.run_cell(good, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=40)
    assert cell.verdict == "pass", cell
    cell = matrix.run_cell(bad, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=60)
    assert (cell.verdict, cell.property) == ("fail", "runs_only_if_every_rank_can"), cell
    assert cell.counterexample is not None
    assert cell.counterexample["args"] == {"can_run_tbo": "[True, False]", "forward_modes": "['extend', 'extend']",
                                           "split_seq_index": "[0, 0]", "enable_two_batch_overlap": "True"}


def _release(version: str) -> engines.Bound:
    try:
        wheel = engines.fetch_wheel("sglang", version, timeout_s=120)
    except SourceError as exc:
        pytest.skip(f"the package registry cannot be reached or has no sglang {version}: {exc}")
    path = sglang.TBO_OLD if version == "0.4.9" else sglang.TBO_NEW
    return _dp_rows(sglang.ReleaseSource.from_wheel(wheel))[path]


def test_real_releases_from_the_registry() -> None:
    old = _release("0.4.9")
    assert old.status == "bound" and old.target is not None, old
    # SGLang 0.4.9 takes an idle rank for a decode one: all-idle ranks run overlap, in decode mode
    assert old.target([True, True], ["idle", "idle"], [0, 0], True) == [(0, "decode"), (0, "decode")]
    cell = matrix.run_cell(old, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=40)
    assert (cell.verdict, cell.property) == ("fail", "mode_of_busy_ranks"), cell
    assert cell.counterexample is not None and cell.counterexample["args"]["forward_modes"] == "['idle']", cell
    new = _release("0.5.8")
    assert new.status == "bound" and new.target is not None, new
    assert new.target([True, True], ["idle", "idle"], [0, 0], True) == [(None, None)] * 2
    assert new.target([True, True], ["idle", "extend"], [0, 2], True) == [(0, "extend"), (2, "extend")]
