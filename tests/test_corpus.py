"""The failure corpus: every corpus file replayed as an explicit test case,
plus the corpus mechanics (saving, dedupe, loading, replay, the CLI) on files
written into temporary directories.

``test_corpus_entry_passes`` is the regression suite that fuzzing grows: one
case per file under the project's ``corpus/`` (or ``$BATCHFUZZ_CORPUS``). It
fails while the recorded bug is there, and passes once it is fixed.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from batchfuzz import cli, corpus, registry, runner
from batchfuzz.case import Case
from batchfuzz.targets import load_target

# --------------------------------------------------------------------------- the corpus itself


def _corpus_params() -> list[Any]:
    root = corpus.default_dir()
    paths = corpus.files(root)
    if not paths:
        return [pytest.param(None, id="empty", marks=pytest.mark.skip(reason=f"no corpus entries under {root}: no failure recorded yet"))]
    return [pytest.param(p, id=str(p.relative_to(root)) if p.is_relative_to(root) else p.name) for p in paths]


@pytest.mark.parametrize("path", _corpus_params())
def test_corpus_entry_passes(path: Path) -> None:
    entry = corpus.load(path)  # a malformed file errors here, naming the file
    outcome = corpus.replay(entry)
    if outcome.status == "skipped":
        pytest.skip(outcome.message)
    if outcome.fails:
        pytest.fail(corpus.describe(outcome), pytrace=False)


# --------------------------------------------------------------------------- mechanics, in tmp dirs

CONTRACT = "split_dummy_tokens"  # the foundation contract: a stable, simple signature for planted targets

BUGGY = """\
import numpy as np

def split(num_reqs, num_tokens):
    out = np.full(num_reqs, num_tokens // num_reqs, dtype=np.int64)
    out[-1] += num_tokens % num_reqs  # planted: the whole remainder on the last request
    return out
"""

FIXED = """\
import numpy as np

def split(num_reqs, num_tokens):
    base, rem = divmod(num_tokens, num_reqs)
    out = np.full(num_reqs, base, dtype=np.int64)
    if rem:
        out[num_reqs - rem:] += 1  # fixed: one extra token on each of the last rem requests
    return out
"""


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    p = tmp_path / "planted_split.py"
    p.write_text(BUGGY)
    return p


@functools.cache
def _failure_of(prop: str) -> runner.Failure:
    """The planted bug's shrunk failure of ``prop``, found once per session."""
    namespace: dict[str, Any] = {}
    exec(compile(BUGGY, "<planted>", "exec"), namespace)
    c = registry.get(CONTRACT)
    r = runner.hunt(c, namespace["split"], c.property(prop), target_name="planted",
                    run_settings=settings(max_examples=200, derandomize=True, database=None, deadline=None))
    assert r.failure is not None
    return r.failure


def _failure(spec: str, prop: str = "max_is_ceil") -> runner.Failure:
    return _failure_of(prop)


def _entry_data(spec: str, prop: str = "max_is_ceil") -> dict[str, Any]:
    return corpus.make_entry_data(_failure(spec, prop), implementation=None, target=spec, device="cpu",
                                  found={"seed": 0, "profile": "test"})


def test_failure_is_saved_once_and_round_trips(tmp_path: Path, planted: Path) -> None:
    spec = f"{planted}:split"
    data = _entry_data(spec)
    root = tmp_path / "corpus"
    path, new = corpus.save(root, data)
    assert new and path == root / CONTRACT / f"{data['id']}.json"
    again, new_again = corpus.save(root, _entry_data(spec))  # the same failure found again
    assert again == path and not new_again
    assert corpus.files(root) == [path]
    e = corpus.load(path)
    assert (e.contract, e.target, e.implementation, e.property, e.device) == (CONTRACT, spec, None, "max_is_ceil", "cpu")
    assert e.id == data["id"] and e.kind == "violation" and e.error_type == "PropertyViolation"
    assert e.case.args == _failure(spec).case.args  # derandomized: the same shrunk case
    raw = json.loads(path.read_text())
    for key in ("inputs", "reproduction", "versions", "date", "failure", "spec"):
        assert raw[key], key
    assert raw["versions"]["hypothesis"] and raw["versions"]["batchfuzz"]
    assert set(raw["inputs"]) == set(e.case.args)


def test_open_duplicate_with_another_case_is_not_saved(tmp_path: Path, planted: Path) -> None:
    spec = f"{planted}:split"
    root = tmp_path / "corpus"
    first = _entry_data(spec)
    corpus.save(root, first)
    # The same bug shrunk to a different local minimum (another night, another seed):
    other = dict(first, id="0" * 16, case={"args": {"num_reqs": 3, "num_tokens": 134}, "context": {"max_model_len": 45}})
    target = load_target(spec)
    assert corpus.open_duplicate(root, other, target) == corpus.path_for(root, first)
    planted.write_text(FIXED)  # once the first entry passes, a new failure of the property is a new bug
    assert corpus.open_duplicate(root, other, load_target(spec)) is None


def test_replay_fails_until_the_bug_is_fixed(tmp_path: Path, planted: Path) -> None:
    spec = f"{planted}:split"
    path, _ = corpus.save(tmp_path, _entry_data(spec, "within_max_model_len"))
    outcome = corpus.replay(corpus.load(path))
    assert outcome.fails and outcome.error_type == "PropertyViolation"
    text = corpus.describe(outcome)
    assert str(path) in text and "within_max_model_len" in text and "split(" in text
    planted.write_text(FIXED)
    assert corpus.replay(corpus.load(path)).status == "passes"


def test_registry_implementation_entry_replays(tmp_path: Path, planted: Path) -> None:
    """An entry naming a registry implementation binds it to the stored device;
    the project's implementations are correct, so the planted case passes."""
    c = registry.get(CONTRACT)
    impl = c.implementations[0]
    data = corpus.make_entry_data(_failure(f"{planted}:split"), implementation=impl.name, target=None, device="cpu")
    path, _ = corpus.save(tmp_path, data)
    e = corpus.load(path)
    assert e.target_name == f"{impl.name}@cpu"
    assert corpus.replay(e).status == "passes"


def test_cuda_entry_is_skipped_without_a_gpu(tmp_path: Path, planted: Path) -> None:
    import torch

    c = registry.get(CONTRACT)
    impl = next((i for i in c.implementations if "cuda" in i.devices), None)
    if impl is None or torch.cuda.is_available():
        pytest.skip("needs a torch implementation and no CUDA device")
    data = corpus.make_entry_data(_failure(f"{planted}:split"), implementation=impl.name, target=None, device="cuda")
    path, _ = corpus.save(tmp_path, data)
    assert corpus.replay(corpus.load(path)).status == "skipped"


def _write(tmp_path: Path, name: str, payload: Any) -> Path:
    p = tmp_path / CONTRACT / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    return p


def _valid(planted: Path) -> dict[str, Any]:
    return _entry_data(f"{planted}:split")


@pytest.mark.parametrize(("mutate", "match"), [
    (lambda d: "{not json", r"not valid JSON \(line 1"),
    (lambda d: [1, 2], r"must hold a JSON object, got list"),
    (lambda d: {k: v for k, v in d.items() if k != "property"}, r"missing field 'property'"),
    (lambda d: dict(d, format="batchfuzz-corpus/0"), r"unsupported format"),
    (lambda d: dict(d, case="num_reqs=3"), r"field 'case' must be an object, got str"),
    (lambda d: dict(d, case={"args": {"x": {"ndarray": [1], "dtype": "object"}}}), r"'case' does not decode: unsupported array dtype"),
    (lambda d: dict(d, case={"args": {"x": {"dataclass": "Popen", "fields": {}}}}), r"does not decode: unknown dataclass 'Popen'"),
    (lambda d: dict(d, implementation="numpy"), r"exactly one of 'implementation' and 'target'"),
], ids=["json", "not-object", "missing", "format", "case-type", "dtype", "dataclass", "both-targets"])
def test_malformed_file_gets_a_clear_error_naming_it(tmp_path: Path, planted: Path, mutate: Any, match: str) -> None:
    p = _write(tmp_path, "broken.json", mutate(_valid(planted)))
    with pytest.raises(corpus.CorpusError, match=match) as info:
        corpus.load(p)
    assert str(p) in str(info.value)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("contract", "no_such_contract", r"unknown contract 'no_such_contract'"),
    ("property", "no_such_property", r"has no property 'no_such_property'"),
    ("target", "/no/such/file.py:f", r"cannot load target"),
])
def test_unreplayable_entry_names_the_file(tmp_path: Path, planted: Path, field: str, value: str, match: str) -> None:
    p = _write(tmp_path, "stale.json", dict(_valid(planted), **{field: value}))
    with pytest.raises(corpus.CorpusError, match=match) as info:
        corpus.replay(corpus.load(p))
    assert str(p) in str(info.value)


def test_loading_never_executes_code(tmp_path: Path, planted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "executed"
    payload = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    d = _valid(planted)
    d["inputs"] = {"num_reqs": payload, "num_tokens": payload}
    d["reproduction"] = payload
    d["case"] = {"args": {"num_reqs": payload, "num_tokens": 4}, "context": {"max_model_len": payload}}
    p = _write(tmp_path, "hostile.json", d)
    e = corpus.load(p)
    assert e.case.args["num_reqs"] == payload  # a string, never evaluated
    corpus.replay(e)  # the target sees a string and fails; nothing runs the payload
    assert not marker.exists()


def test_default_dir_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(corpus.ENV_VAR, str(tmp_path / "elsewhere"))
    assert corpus.default_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv(corpus.ENV_VAR)
    repo = Path(corpus.__file__).resolve().parent.parent
    expected = repo / "corpus" if (repo / "pyproject.toml").is_file() else Path.cwd() / "corpus"
    assert corpus.default_dir() == expected


def test_replay_command_exit_codes(tmp_path: Path, planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "corpus"
    assert cli.main(["replay", str(tmp_path / "empty")]) == 2  # a path that does not exist
    (tmp_path / "empty").mkdir()
    assert cli.main(["replay", str(tmp_path / "empty")]) == 0
    path, _ = corpus.save(root, _entry_data(f"{planted}:split"))
    assert cli.main(["replay", str(root)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and str(path) in out and "1 still fail" in out
    planted.write_text(FIXED)
    assert cli.main(["replay", str(path)]) == 0
    _write(root, "broken.json", "{")
    assert cli.main(["replay", "-q", str(root)]) == 2
    out = capsys.readouterr().out
    assert "broken.json: not valid JSON" in out and "1 malformed" in out


def test_entry_ids_are_stable_and_distinct() -> None:
    case = Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 2})
    a = corpus.entry_id(CONTRACT, "numpy", None, "cpu", "max_is_ceil", case)
    assert a == corpus.entry_id(CONTRACT, "numpy", None, "cpu", "max_is_ceil", case.copy())
    assert len({a,
                corpus.entry_id(CONTRACT, "torch", None, "cpu", "max_is_ceil", case),
                corpus.entry_id(CONTRACT, "numpy", None, "cuda", "max_is_ceil", case),
                corpus.entry_id(CONTRACT, "numpy", None, "cpu", "sum_is_num_tokens", case),
                corpus.entry_id(CONTRACT, "numpy", None, "cpu", "max_is_ceil", Case({"num_reqs": 3, "num_tokens": 6}))}) == 5
