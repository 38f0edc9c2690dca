"""The SGLang engine module (``batchfuzz.engines.sglang``) on a tiny source
tree in SGLang's layout written here (the two-batch-overlap module in its
old and its new place), and on one real release downloaded at test time
into the cache (skipped, with the reason, when the registry cannot be
reached). Verdicts are driven by example counts, not time."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from batchfuzz import engines, matrix
from batchfuzz.engines import SourceError, sglang

FORWARD_MODE = '''
    from enum import IntEnum, auto


    class ForwardMode(IntEnum):
        EXTEND = auto()
        DECODE = auto()
        IDLE = auto()
        TARGET_VERIFY = auto()

        def is_decode(self):
            return self == ForwardMode.DECODE

        def is_idle(self):
            return self == ForwardMode.IDLE

        def is_target_verify(self):
            return self == ForwardMode.TARGET_VERIFY
    '''

# A two-batch-overlap module in SGLang's shape, written for this test: a
# balanced split, and a two-chunk mode whose guard is `guard`.
TBO = '''
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.layers.moe import get_tbo_token_distribution_threshold


    def compute_split_seq_index(forward_mode, num_tokens, extend_lens, token_num_per_seq):
        if forward_mode == ForwardMode.EXTEND:
            return cut(extend_lens) if two_chunk(extend_lens) else balanced(extend_lens)
        if forward_mode.is_decode() or forward_mode.is_target_verify():
            return (num_tokens // token_num_per_seq) // 2
        return 0


    def compute_split_token_index(split_seq_index, forward_mode, extend_seq_lens, token_num_per_seq):
        if forward_mode == ForwardMode.EXTEND:
            if two_chunk(extend_seq_lens):
                return sum(extend_seq_lens) // 2
            return sum(extend_seq_lens[:split_seq_index])
        if forward_mode.is_decode() or forward_mode.is_target_verify():
            return split_seq_index * token_num_per_seq
        return 0


    def balanced(lens):
        best, best_diff, left = 0, None, 0
        for i in range(1, len(lens)):
            left += lens[i - 1]
            diff = abs(2 * left - sum(lens))
            if best_diff is None or diff <= best_diff:
                best, best_diff = i, diff
            else:
                break
        return best


    def cut(lens):
        left = 0
        for i, x in enumerate(lens):
            left += x
            if left > sum(lens) // 2:
                return i
        return 0


    def _is_two_chunk_split_enabled(lens):
        return two_chunk(lens)


    def two_chunk(lens):
        if lens is None:
            return False
        left, thr = sum(lens[:balanced(lens)]), get_tbo_token_distribution_threshold()
        lopsided = left < sum(lens) * thr or left > sum(lens) * (1 - thr)
        return lopsided and GUARD


    class TboForwardBatchPreparer:
        @classmethod
        def prepare_raw(cls, batch, tbo_children_num_token_non_padded):
            is_enable_two_chunk = batch.forward_mode == ForwardMode.EXTEND and _is_two_chunk_split_enabled(
                batch.extend_seq_lens_cpu)
            return launch_children(batch, is_enable_two_chunk)
    '''


def _tree(root: Path, version: str, tbo_path: str, guard: str) -> Path:
    files = {
        "sglang/__init__.py": "",
        "sglang/version.py": "",
        "sglang/_version.py": f'__version__ = version = "{version}"\n',
        "sglang/srt/model_executor/forward_batch_info.py": FORWARD_MODE,
        tbo_path: TBO.replace("GUARD", guard),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    return root


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("sglang")
    # old layout, the two-chunk mode unguarded; new layout, guarded (the cut request keeps a token in each child)
    return {"old": _tree(base / "old", "9.0.0", sglang.TBO_OLD, "True"),
            "new": _tree(base / "new", "9.1.0", sglang.TBO_NEW, "sum(lens[:cut(lens)]) < sum(lens) // 2")}


def _bound(tree: Path) -> engines.Bound:
    rows = sglang.bindings(sglang.ReleaseSource.from_dir(tree))
    assert [b.status for b in rows].count("bound") == 1, [(b.function, b.status, b.reason) for b in rows]
    return next(b for b in rows if b.status == "bound")


def test_each_layout_binds_its_path_and_finds_the_other_absent(trees: dict[str, Path]) -> None:
    for layout, path in (("old", sglang.TBO_OLD), ("new", sglang.TBO_NEW)):
        rows = {b.function.split(":")[0]: b for b in sglang.bindings(sglang.ReleaseSource.from_dir(trees[layout]))
                if b.contract == "tbo_split"}
        assert rows[path].status == "bound" and rows[path].contract == "tbo_split"
        other = rows[sglang.TBO_NEW if layout == "old" else sglang.TBO_OLD]
        assert other.status == "absent" and "is not in this source tree" in other.reason
    bound = _bound(trees["new"])
    assert bound.target("extend", np.array([60, 2, 2], dtype=np.int32), 0.48) == (0, 32, True)
    assert bound.target("target_verify", np.array([3, 3, 3], dtype=np.int32), 0.48) == (1, 3, False)
    assert engines.resolve(bound.ref)("extend", np.array([1], dtype=np.int32), 0.48) == (0, 0, False)
    with pytest.raises(ValueError, match="forward_mode must be one of"):
        bound.target("prefill", np.array([1], dtype=np.int32), 0.48)


def test_the_matrix_passes_the_guarded_split_and_shrinks_the_unguarded_one(trees: dict[str, Path]) -> None:
    cells = {}
    for layout in ("old", "new"):
        b = _bound(trees[layout])
        cells[layout] = matrix.run_cell(b, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=60)
    assert cells["new"].verdict == "pass", cells["new"]
    old = cells["old"]
    assert (old.verdict, old.property) == ("fail", "cut_request_in_both"), old
    assert old.counterexample is not None and old.counterexample["args"]["seq_lens"] == "np.array([1], dtype=np.int32)"


def test_the_two_layouts_stay_apart_in_the_tables() -> None:
    among = [f"{sglang.TBO_OLD}:compute_split_token_index", f"{sglang.TBO_NEW}:compute_split_token_index"]
    assert [matrix.short_function(f, among) for f in among] == [
        "srt/two_batch_overlap.py:compute_split_token_index", "batch_overlap/two_batch_overlap.py:compute_split_token_index"]
    assert matrix.short_function("pkg/mod.py:f", ["pkg/other.py:f"]) == "mod.py:f"


def test_a_real_release_from_the_registry() -> None:
    try:
        wheel = engines.fetch_wheel("sglang", "0.5.8", timeout_s=120)
    except SourceError as exc:
        pytest.skip(f"the package registry cannot be reached or has no sglang 0.5.8: {exc}")
    b = next(x for x in sglang.bindings(sglang.ReleaseSource.from_wheel(wheel)) if x.status == "bound")
    assert b.function == f"{sglang.TBO_NEW}:compute_split_token_index"
    # SGLang 0.5.8's two-chunk mode on one one-token prefill: child A holds request 0 with no token
    assert b.target("extend", np.array([1], dtype=np.int32), 0.48) == (0, 0, True)
    cell = matrix.run_cell(b, budget_s=120, timeout_s=120, seed=1, isolate=False, max_examples=40)
    assert (cell.verdict, cell.property) == ("fail", "cut_request_in_both"), cell
