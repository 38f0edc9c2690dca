"""One failure, one report: a failure's origin (``batchfuzz.fuzz.origin``)
names one corpus entry and one report line, across properties, workers,
shards (``merge-reports``) and nights (the corpus merge).

The rules on outcomes made here; the corpus keeping the smallest case per
origin, in-process; and the whole story in subprocesses: ``tests/hostile.py:raises``
(an ``IndexError`` for three requests or more) fuzzed by every property of
contract A in two shards, run from a temporary working directory with no
``--corpus`` nor ``--report`` (the state lands there, issue 25 item 6), ends as
one corpus entry and one report line. The ``ci`` profile runs each item's
fixed stream once, whole, so the runs end by example counts; only counts are
asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import cli, execution, registry, runner
from batchfuzz.case import Case
from batchfuzz.execution import InProcess
from batchfuzz.fuzz import corpus, merge
from batchfuzz.fuzz.origin import Origin, OriginError, location, one_bug, origin_of
from batchfuzz.fuzz.shards import item_key, select
from tests import hostile

REPO = Path(__file__).resolve().parent.parent
HOSTILE = Path(hostile.__file__)
CONTRACT = "split_dummy_tokens"
TARGET = f"{HOSTILE}:raises"


def _raised(num_reqs: int, num_tokens: int, prop: str) -> runner.Failure:
    """The failure ``hostile.raises`` gives on this case, found by ``prop``."""
    c = registry.get(CONTRACT)
    case = Case({"num_reqs": num_reqs, "num_tokens": num_tokens}, {"max_model_len": num_tokens})
    outcome = execution.evaluate(c, hostile.raises, prop, case)
    assert outcome.status == execution.RAISES, outcome
    return runner.Failure(contract=CONTRACT, target=TARGET, property="raises", spec="the target returns", case=case,
                          error_type=outcome.error_type, message=outcome.message, traceback=outcome.traceback,
                          during=prop)


def _data(failure: runner.Failure) -> dict[str, Any]:
    return corpus.make_entry_data(failure, target=TARGET, device="cpu", found={"seed": 0, "profile": "test"})


# --------------------------------------------------------------------------- the rules


def test_an_exception_is_its_type_and_the_innermost_line_of_the_target() -> None:
    a, b = _raised(3, 5, "matches_oracle"), _raised(4, 9, "sum_is_num_tokens")
    line = next(n for n, text in enumerate(HOSTILE.read_text().splitlines(), 1) if "raise IndexError" in text)
    oa, ob = (origin_of(contract=CONTRACT, target=TARGET, device="cpu", kind=f.kind(), prop=f.property,
                        error_type=f.error_type, traceback=f.traceback, exit=f.exit, case=f.case) for f in (a, b))
    assert oa.location == f"tests/hostile.py:{line}" and oa.error_type == "IndexError"
    assert oa == ob and oa.id == ob.id  # other property, other case: one origin
    assert oa.describe() == f"raises: IndexError at tests/hostile.py:{line}"
    other_target = origin_of(contract=CONTRACT, target="m:f", device="cpu", kind="raises", prop="raises",
                             error_type="IndexError", traceback=a.traceback, exit="", case=a.case)
    assert other_target.id != oa.id
    assert Origin.from_json(oa.to_json(), "x") == oa


def test_library_frames_are_passed_over_and_the_other_kinds() -> None:
    import numpy as np

    try:
        np.repeat([1], [-1])  # raises inside numpy, called from this line
    except ValueError:
        import traceback

        text = traceback.format_exc()
    here = location(text)
    assert here.startswith("tests/test_origin.py:"), here
    assert location("no frames here") == ""
    case = Case({"num_reqs": 3, "num_tokens": 5}, {})
    common: dict[str, Any] = {"contract": CONTRACT, "target": TARGET, "device": "cpu", "error_type": "", "traceback": "",
                              "exit": "", "case": case}
    t1 = origin_of(kind="timeout", prop="timeout", **common)
    t2 = origin_of(kind="timeout", prop="timeout", **{**common, "case": Case({"num_reqs": 9, "num_tokens": 9}, {})})
    assert t1 == t2 and t1.describe() == "timeout"
    segv = origin_of(kind="crash", prop="crash", **{**common, "exit": "killed by signal 11 (SIGSEGV)"})
    assert segv.describe() == "crash: killed by signal 11 (SIGSEGV)" and segv != t1
    v1 = origin_of(kind="violation", prop="matches_oracle", **common)
    v2 = origin_of(kind="violation", prop="matches_oracle", **{**common, "case": Case({"num_reqs": 3, "num_tokens": 7}, {})})
    # A wrong answer's origin is its case: the same case found by another property is the same origin.
    assert v1 != v2 and v1 == origin_of(kind="violation", prop="max_is_ceil", **common)
    assert v1.describe() == "wrong answer"
    # Two cases are one bug when the smaller breaks the larger's property, or the larger breaks all the smaller breaks:
    assert one_bug(["matches_oracle", "max_is_ceil"], ["matches_oracle"], "max_is_ceil")
    assert one_bug(["matches_oracle", "max_is_ceil"], ["matches_oracle", "max_is_ceil", "dummy_attention_in_bounds"],
                   "dummy_attention_in_bounds")
    # and not when each breaks a property the other does not (a wrong sum, an unsorted split: two bugs).
    assert not one_bug(["matches_oracle", "sum_is_num_tokens"], ["matches_oracle", "non_decreasing"], "non_decreasing")
    with pytest.raises(OriginError, match=r"x: field 'origin\.id'"):
        Origin.from_json({**v1.to_json(), "id": "0" * 16}, "x")
    with pytest.raises(OriginError, match="kind must be one of"):
        Origin(CONTRACT, TARGET, "cpu", "bug")


def test_the_corpus_keeps_one_entry_per_origin_the_smallest_case(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    c = registry.get(CONTRACT)
    with InProcess(c, hostile.raises, TARGET) as ex:
        first = corpus.save_failure(root, _data(_raised(4, 9, "matches_oracle")), ex)
        assert first.new and corpus.files(root) == [first.path]
        larger = corpus.save_failure(root, _data(_raised(5, 11, "sum_is_num_tokens")), ex)
        assert (larger.path, larger.new) == (first.path, False)  # its origin has a smaller entry
        smaller = corpus.save_failure(root, _data(_raised(3, 3, "max_is_ceil")), ex)
        assert smaller.new and smaller.replaced == [first.path] and corpus.files(root) == [smaller.path]
    kept = corpus.load(smaller.path)
    assert kept.case.args == {"num_reqs": 3, "num_tokens": 3} and kept.data["origin"]["error_type"] == "IndexError"
    # Once the kept case passes (the bug fixed there), it no longer stands for its origin: a new case replaces it;
    # unless this run wrote it (run_started before its file): then it is not re-checked.
    with InProcess(c, hostile.even, TARGET) as fixed:
        same_run = corpus.save_failure(root, _data(_raised(4, 4, "matches_oracle")), fixed, run_started=0.0)
        assert (same_run.path, same_run.new) == (smaller.path, False)
        again = corpus.save_failure(root, _data(_raised(4, 4, "matches_oracle")), fixed)
    assert again.new and again.replaced == [smaller.path] and corpus.files(root) == [again.path]


def test_a_night_merged_into_the_corpus_keeps_the_smaller_case(tmp_path: Path) -> None:
    c = registry.get(CONTRACT)
    with InProcess(c, hostile.raises, TARGET) as ex:
        night1 = corpus.save_failure(tmp_path / "n1", _data(_raised(4, 9, "matches_oracle")), ex)
        night2 = corpus.save_failure(tmp_path / "n2", _data(_raised(3, 5, "sum_is_num_tokens")), ex)
    dest = tmp_path / "standing"
    targets = {CONTRACT: TARGET}  # the user's function the merge replays the entries against, as replay --target
    first = merge.merge_corpora([tmp_path / "n1"], dest, targets=targets)
    assert len(first.copied) == 1 and not first.replaced
    second = merge.merge_corpora([tmp_path / "n2"], dest, targets=targets)
    assert len(second.copied) == 1 and len(second.replaced) == 1, second
    assert [p.name for p in corpus.files(dest)] == [night2.path.name]
    third = merge.merge_corpora([tmp_path / "n1"], dest, targets=targets)  # the larger case again: kept out
    assert not third.copied and len(third.same_origin) == 1 and [p.name for p in corpus.files(dest)] == [night2.path.name]
    assert night1.path.exists()  # a source is never changed
    # Without the function to replay them on, a smaller case is copied beside its origin's entry, never over it.
    unchecked = tmp_path / "unchecked"
    merge.merge_corpora([tmp_path / "n1"], unchecked)
    beside = merge.merge_corpora([tmp_path / "n2"], unchecked)
    assert "copied beside" in beside.replaced[0] and len(corpus.files(unchecked)) == 2, beside


def _variant_entry(root: Path, r: int, n: int, origin: dict[str, Any] | None = None) -> Path:
    """A corpus entry of contract A's variant that puts the whole remainder on
    the last request (wrong at R=3, N=5; right for one request), saved by its
    id; ``origin``: the one it records instead of its own (a crafted file)."""
    target = "variant:remainder_to_last.v1_runner"
    failure = runner.Failure(contract=CONTRACT, target=target, property="matches_oracle", spec="s",
                             case=Case({"num_reqs": r, "num_tokens": n}, {"max_model_len": n}),
                             error_type="PropertyViolation", message="m")
    data = corpus.make_entry_data(failure, target=target, device="cpu")
    if origin is not None:
        data["origin"] = origin
    return corpus.save(root, data)[0]


def test_a_crafted_smaller_passing_entry_with_a_real_origin_does_not_replace_the_real_failure(tmp_path: Path) -> None:
    """Issue 36 item 6: a smaller entry that passes, recording the origin of a
    real failure, replaced it in the merge (replay: "1 still fail" became "1
    pass"). The merge replays a candidate before it replaces: the real entry
    stays; and a real failure arriving after such an entry replaces it, larger
    as it is. The origin a file records is never taken for its own."""
    real = _variant_entry(tmp_path / "real", 3, 5)
    crafted = _variant_entry(tmp_path / "crafted", 1, 1, origin=json.loads(real.read_text())["origin"])
    assert corpus.replay(corpus.load(crafted), isolate=False).status == "passes"
    assert corpus.load(crafted).origin.id == corpus.load(real).origin.id  # as the file claims

    dest = tmp_path / "standing"
    merge.merge_corpora([tmp_path / "real"], dest)
    result = merge.merge_corpora([tmp_path / "crafted"], dest)
    assert not result.copied and "it passes on replay" in result.same_origin[0], result
    assert corpus.replay_paths([dest], {}, quiet=True)["fails"] == 1

    planted = tmp_path / "planted-first"
    merge.merge_corpora([tmp_path / "crafted"], planted)  # no entry of its origin there: copied (it records a failure)
    after = merge.merge_corpora([tmp_path / "real"], planted)
    assert after.copied == [f"{CONTRACT}/{real.name}"] and "which passes on replay" in after.replaced[0], after
    assert [p.name for p in corpus.files(planted)] == [real.name]


# --------------------------------------------------------------------------- the whole story


def _fuzz(cwd: Path, *args: str, target: str = TARGET) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = str(REPO)
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "batchfuzz", "fuzz", "--contract", CONTRACT, "--impl", target.rsplit(":", 1)[0] + ":*",
                           "--target", f"{CONTRACT}={target}", "--profile", "ci", "--no-database", "--budget", "240s",
                           "--workers", "1", "--no-isolation", "--seed", "7", "--progress", "none", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=400)


def _split_over_two_shards(properties: list[str]) -> tuple[str, dict[int, list[str]]]:
    """TARGET spelled (``DIR/./FILE``, one more ``/.`` each try) so that each of
    two shards holds some of its items: the keys hold the checkout's path, and
    on about 1 checkout in 128 every item of one spelling lands in one shard."""
    for dots in range(16):
        target = f"{HOSTILE.parent}{'/.' * dots}/{HOSTILE.name}:raises"
        owned = {k: select(properties, lambda p, t=target: item_key(CONTRACT, t, "cpu", p), k, 2) for k in (1, 2)}
        if all(owned.values()):
            return target, owned
    raise AssertionError(f"no spelling of {TARGET} splits its items over two shards")


def test_a_target_that_raises_under_every_property_in_two_shards_is_one_entry_and_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    properties = {p.name for p in registry.get(CONTRACT).properties}
    target, owned = _split_over_two_shards(sorted(properties))
    shards = []
    for k in (1, 2):
        cwd = tmp_path / f"shard{k}"
        r = _fuzz(cwd, "--shard", f"{k}/2", target=target)
        out = r.stdout + r.stderr
        assert r.returncode == 1, out
        # No --corpus, no --report: the state is the working directory's.
        assert len(corpus.files(cwd / "corpus")) == 1, out
        summary = json.loads((cwd / "reports" / "fuzz" / "summary.json").read_text())
        assert summary["corpus"] == str(cwd / "corpus")
        assert sorted(f["during"] for f in summary["failures"]) == sorted(owned[k])  # every property failed
        assert len(summary["origins"]) == 1 and summary["totals"]["origins"] == 1, summary["origins"]
        origin = summary["origins"][0]
        assert origin["properties"] == sorted(owned[k]) and origin["description"].startswith("raises: IndexError at ")
        assert all(f["corpus_file"] == origin["corpus_file"] for f in summary["failures"])
        assert out.count("\nFAILED ") == 1, out
        assert (cwd / "reports" / "fuzz" / "summary.md").read_text().count("\n**split_dummy_tokens / ") == 1
        shards.append((cwd, summary))
    merged = tmp_path / "merged"
    code = cli.main(["merge-reports", *(str(cwd / "reports" / "fuzz") for cwd, _ in shards), "--report", str(merged),
                     "--corpus", str(tmp_path / "corpus"), "--corpus-from", *(str(cwd / "corpus") for cwd, _ in shards)])
    captured = capsys.readouterr()
    out = captured.out
    assert code == 1, out + captured.err
    summary = json.loads((merged / "summary.json").read_text())
    assert len(summary["failures"]) == len(properties) and summary["totals"]["origins"] == 1
    assert summary["origins"][0]["properties"] == sorted(properties) and summary["origins"][0]["shards"] == [1, 2]
    assert out.count("FAILED ") == 1, out
    assert len(corpus.files(tmp_path / "corpus")) == 1, out


USER_SPLIT = '''\
def bad(num_reqs, num_tokens):
    """The whole remainder on the last request: bad(3, 5) == [1, 1, 3]."""
    out = [num_tokens // num_reqs] * num_reqs
    out[-1] += num_tokens % num_reqs
    return out
'''


def _fuzz_user(cwd: Path, spec: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "batchfuzz", "fuzz", "--contract", CONTRACT, "--impl", spec,
                           "--target", f"{CONTRACT}={spec}", "--profile", "ci", "--no-database", "--budget", "240s",
                           "--workers", "1", "--no-isolation", "--seed", "7", "--progress", "none"],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=400)


def test_one_buggy_user_function_is_one_entry_and_one_line_and_a_smaller_case_replaces_it(tmp_path: Path) -> None:
    """Issue 37 item 3: the buggy split of a user's module, fuzzed by every
    property of contract A, breaks four of them, each shrinking to its own
    case (three to bad(3, 5), one to a larger case); that is one bug: one
    corpus entry, one report line listing the four properties. A corpus that
    holds a larger case of it (an earlier night's, not fully shrunk) has that
    entry replaced by the smaller case the next run finds (item 2)."""
    (tmp_path / "mysplit.py").write_text(USER_SPLIT)
    spec = f"{tmp_path / 'mysplit.py'}:bad"
    r = _fuzz_user(tmp_path, spec)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    summary = json.loads((tmp_path / "reports" / "fuzz" / "summary.json").read_text())
    assert len(summary["failures"]) >= 2 and len({json.dumps(f["case"]) for f in summary["failures"]}) >= 2, out
    (origin,) = summary["origins"]
    assert set(origin["properties"]) >= {f["property"] for f in summary["failures"]} | {"matches_oracle", "max_is_ceil"}
    assert origin["inputs"] == {"num_reqs": "3", "num_tokens": "5"} and origin["description"] == "wrong answer"
    assert out.count("\nFAILED ") == 1 and ", ".join(origin["properties"]) in out, out
    assert (tmp_path / "reports" / "fuzz" / "summary.md").read_text().count("\n**split_dummy_tokens / ") == 1
    (entry,) = corpus.files(tmp_path / "corpus")
    assert corpus.load(entry).case.args == {"num_reqs": 3, "num_tokens": 5}

    # An earlier night's larger case of the bug, not fully shrunk, in a fresh corpus: the next run replaces it.
    night = tmp_path / "night2"
    night.mkdir()
    (night / "mysplit.py").write_text(USER_SPLIT)
    namespace: dict[str, Any] = {}
    exec(compile(USER_SPLIT, "mysplit", "exec"), namespace)
    c = registry.get(CONTRACT)
    case = Case({"num_reqs": 169, "num_tokens": 215}, {"max_model_len": 215})
    larger = runner.Failure(contract=CONTRACT, target=spec, property="matches_oracle", spec="", case=case,
                            error_type="PropertyViolation", message="wrong", complete=False)
    violates = runner.violated_properties(c, namespace["bad"], case)
    old, _ = corpus.save(night / "corpus", corpus.make_entry_data(larger, target=spec, device="cpu", violates=violates))
    r = _fuzz_user(night, spec)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    (kept,) = corpus.files(night / "corpus")
    assert kept != old and corpus.load(kept).case.args == {"num_reqs": 3, "num_tokens": 5}, out
    summary = json.loads((night / "reports" / "fuzz" / "summary.json").read_text())
    assert any(str(old) in f.get("replaced", []) for f in summary["failures"]), summary["failures"]
    assert "(new)" in out and "already known" not in out, out
