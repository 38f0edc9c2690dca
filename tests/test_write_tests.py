"""Regression tests written for you (``batchfuzz.reproduce.regression_test``):

- ``batchfuzz replay CORPUS --write-tests DIR`` writes one pytest file per
  entry; pytest on DIR fails on exactly the entries ``replay`` reports as
  still failing (a registered variant, a user's function with a numpy case,
  a user's function named with ``--target``) and passes on the fixed one (the
  same case on the correct implementation); once the user's function is
  fixed, its test passes;
- ``batchfuzz check ... --write-test DIR`` writes the counterexample's test;
- ``check_contract``'s message carries the ``@batchfuzz.testing.example(...)``
  line, and that decorator makes ``check_contract`` run the case.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import settings

import batchfuzz.testing
from batchfuzz import registry, runner
from batchfuzz.case import Case
from batchfuzz.fuzz import corpus, regressions

REPO = Path(__file__).resolve().parent.parent

BAD = '''
def bad_split(num_reqs, num_tokens):
    out = [num_tokens // num_reqs] * num_reqs
    out[-1] += num_tokens % num_reqs
    return out
'''

FIXED = '''
def bad_split(num_reqs, num_tokens):
    base, extra = divmod(num_tokens, num_reqs)
    return [base] * (num_reqs - extra) + [base + 1] * extra
'''


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path)])
    return env


def _pytest(directory: Path, tmp_path: Path) -> dict[str, str]:
    """pytest on ``directory`` in a subprocess: each test file's outcome (passed, failed)."""
    xml = tmp_path / f"{directory.name}.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist",
                    f"--junitxml={xml}", str(directory)], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                   text=True, timeout=400)
    out = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        out[(case.get("classname") or "").split(".")[-1]] = "failed" if failed else "passed"
    return out


def _entry(root: Path, contract: str, target: str, prop: str, case: Case, during: str = "") -> Path:
    failure = runner.Failure(contract=contract, target=target, property=prop, spec=registry.get(contract).property(prop).spec,
                             case=case, error_type="PropertyViolation", message="recorded", during=during)
    path, _ = corpus.save(root, corpus.make_entry_data(failure, target=target, device="cpu"))
    return path


def _c_failure() -> runner.Failure:
    """A shrunk counterexample of contract C's padding_unwritten variant (numpy arrays in its case)."""
    c = registry.get("pad_query_start_loc")
    for prop in c.properties:
        r = runner.hunt(c, c.variant("padding_unwritten").fn, prop,
                        runner.HuntOptions(settings(max_examples=300, database=None, derandomize=True)),
                        target_name="variant:padding_unwritten")
        if r.failure is not None and r.failure.property == prop.name:
            return r.failure
    raise AssertionError("padding_unwritten broke no property")


def test_written_corpus_tests_fail_exactly_where_replay_fails(tmp_path: Path) -> None:
    (tmp_path / "engine_split.py").write_text(textwrap.dedent(BAD))
    root = tmp_path / "corpus"
    a_case = Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 2})
    c_failure = _c_failure()
    paths = {
        "variant": _entry(root, "split_dummy_tokens", "variant:remainder_to_last.v1_runner", "matches_oracle", a_case),
        "fixed": _entry(root, "split_dummy_tokens", "impl:numpy@cpu", "matches_oracle", a_case),
        "user": _entry(root, "split_dummy_tokens", "theirs:split", "matches_oracle", a_case),
        "arrays": _entry(root, "pad_query_start_loc", "variant:padding_unwritten", c_failure.property, c_failure.case),
    }
    targets = {"split_dummy_tokens": "engine_split:bad_split"}
    sys.path.insert(0, str(tmp_path))
    try:
        replayed = {k: corpus.replay(corpus.load(p), targets=targets, isolate=False).status for k, p in paths.items()}
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("engine_split", None)
    assert replayed == {"variant": "fails", "fixed": "passes", "user": "fails", "arrays": "fails"}

    out = tmp_path / "regressions"
    r = subprocess.run([sys.executable, "-m", "batchfuzz", "replay", str(root), "--write-tests", str(out),
                        "--target", "split_dummy_tokens=engine_split:bad_split"],
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 tests written" in r.stdout
    stem = {k: f"test_{corpus.load(p).contract}_{corpus.load(p).id}" for k, p in paths.items()}
    assert sorted(f.stem for f in out.glob("*.py")) == sorted(stem.values())
    user_test = (out / f"{stem['user']}.py").read_text()
    assert "from engine_split import bad_split" in user_test and "def test_split_dummy_tokens_matches_oracle_" in user_test

    outcomes = _pytest(out, tmp_path)
    want = {stem[k]: "failed" if v == "fails" else "passed" for k, v in replayed.items()}
    assert outcomes == want

    # fixed, the user's test passes; the others are unchanged
    (tmp_path / "engine_split.py").write_text(textwrap.dedent(FIXED))
    assert _pytest(out, tmp_path) == {**want, stem["user"]: "passed"}


def test_replay_write_tests_skips_what_replay_skips(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    _entry(root, "split_dummy_tokens", "theirs:split", "matches_oracle", Case({"num_reqs": 3, "num_tokens": 5}, {}))
    said = io.StringIO()
    counts = regressions.write_tests([root], tmp_path / "out", targets={}, out=said)
    assert counts == {"written": 0, "skipped": 1, "malformed": 0}
    assert "names a user's function (theirs:split)" in said.getvalue() and "0 tests written" in said.getvalue()
    assert not list((tmp_path / "out").glob("*.py"))


def test_check_write_test_writes_the_counterexample(tmp_path: Path) -> None:
    (tmp_path / "engine_split.py").write_text(textwrap.dedent(BAD))
    out = tmp_path / "written"
    r = subprocess.run([sys.executable, "-m", "batchfuzz", "check", "split_dummy_tokens", "engine_split:bad_split",
                        "--seed", "1", "--budget", "60", "--no-isolation", "--write-test", str(out)],
                       cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    files = list(out.glob("test_*.py"))
    assert len(files) == 1 and f"regression test written: {files[0]}" in r.stdout
    assert _pytest(out, tmp_path) == {files[0].stem: "failed"}
    (tmp_path / "engine_split.py").write_text(textwrap.dedent(FIXED))
    assert _pytest(out, tmp_path) == {files[0].stem: "passed"}


def _split_wrong_at_3_5(num_reqs: int, num_tokens: int) -> list[int]:
    base, extra = divmod(num_tokens, num_reqs)
    out = [base] * (num_reqs - extra) + [base + 1] * extra
    if (num_reqs, num_tokens) == (3, 5):
        out = [1, 1, 3]
    return out


def test_check_contract_names_the_example_line_and_runs_it() -> None:
    with pytest.raises(batchfuzz.testing.Counterexample) as info:
        batchfuzz.testing.check_contract("split_dummy_tokens", _bad_everywhere, max_examples=50)
    assert "@batchfuzz.testing.example('split_dummy_tokens', num_reqs=" in str(info.value)

    @batchfuzz.testing.example("split_dummy_tokens", num_reqs=3, num_tokens=5, max_model_len=2)
    def users_test() -> None:
        batchfuzz.testing.check_contract("split_dummy_tokens", _split_wrong_at_3_5, max_examples=1,
                                         properties=["matches_oracle"])

    with pytest.raises(batchfuzz.testing.Counterexample) as info:
        users_test()
    assert info.value.failure.case.args == {"num_reqs": 3, "num_tokens": 5}
    # an example without every argument of the contract is an error naming them
    with pytest.raises(ValueError, match="lacks the argument"):
        batchfuzz.testing.example("split_dummy_tokens", num_reqs=3)(users_test.__wrapped__)()  # type: ignore[attr-defined]


def _bad_everywhere(num_reqs: int, num_tokens: int) -> list[int]:
    out = [num_tokens // num_reqs] * num_reqs
    out[-1] += num_tokens % num_reqs
    return out


def test_corpus_text_in_a_written_test_is_data_never_code(tmp_path: Path) -> None:
    """A crafted entry for impl:numpy@cpu (it passes) whose ``spec``,
    ``failure.error_type``, ``failure.message``, ``failure.exit`` and folder
    name each try to start a statement (a newline, or ``\"\"\"`` out of the
    docstring) that would create a marker file: the written test carries
    them as literals; pytest passes it and no marker appears. The same file
    under a name that is not its id is malformed, reported by name."""
    marker = tmp_path / "injected"
    code = f"open({str(marker)!r}, 'w').close()"
    root = tmp_path / f'corpus"""\n{code}\n"""'
    path = _entry(root, "split_dummy_tokens", "impl:numpy@cpu", "matches_oracle",
                  Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 2}))
    data = json.loads(path.read_text())
    data["spec"] = f"x\n{code}\n#"
    data["failure"].update(error_type=f"E\n{code}\n#", message=f"m\r{code}\r#", exit=f"x\n{code}")
    path.write_text(json.dumps(data))
    counts = regressions.write_tests([root], tmp_path / "out", targets={}, out=io.StringIO())
    assert counts == {"written": 1, "skipped": 0, "malformed": 0}
    (written,) = (tmp_path / "out").glob("test_*.py")
    text = written.read_text()
    assert all(code not in line or line.lstrip().startswith("found = ") for line in text.splitlines()), text
    assert _pytest(tmp_path / "out", tmp_path) == {written.stem: "passed"}
    assert not marker.exists(), "pytest on a written test ran code from the corpus file"

    misnamed = path.with_name("0123456789abcdef.json")
    path.rename(misnamed)
    said = io.StringIO()
    assert regressions.write_tests([root], tmp_path / "again", targets={}, out=said)["malformed"] == 1
    assert f"{misnamed}: the file's name is not its id" in said.getvalue()
    assert corpus.replay_paths([misnamed], {}, isolate=False, out=said)["malformed"] == 1
