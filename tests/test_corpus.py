"""The failure corpus: every corpus file replayed as an explicit test case,
plus the corpus mechanics (saving, dedupe, loading, replay, the CLI) on files
written into temporary directories.

``test_corpus_entry_passes`` is the regression suite that fuzzing grows: one
case per file under the repository's own ``corpus/`` (or ``$BATCHFUZZ_CORPUS``),
named explicitly: batchfuzz's default corpus is the working directory's. It
fails while the recorded bug is there, and passes once it is fixed.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from batchfuzz import cli, codec, registry, runner
from batchfuzz.case import Case
from batchfuzz.execution import InProcess
from batchfuzz.fuzz import corpus
from batchfuzz.targets import load_function

# --------------------------------------------------------------------------- the corpus itself

REPOSITORY_CORPUS = Path(__file__).resolve().parent.parent / "corpus"


def _corpus_params() -> list[Any]:
    root = Path(os.environ[corpus.ENV_VAR]).absolute() if os.environ.get(corpus.ENV_VAR) else REPOSITORY_CORPUS
    paths = corpus.files(root)
    if not paths:
        return [pytest.param(None, id="empty", marks=pytest.mark.skip(reason=f"no corpus entries under {root}: no failure recorded yet"))]
    return [pytest.param(p, id=str(p.relative_to(root)) if p.is_relative_to(root) else p.name) for p in paths]


def _replay_targets() -> dict[str, str]:
    """``$BATCHFUZZ_REPLAY_TARGETS`` (``CONTRACT=MODULE:FUNCTION,...``): the user's
    functions to replay entries recorded against a user's function with (the
    corpus never loads one by itself)."""
    pairs = [p.partition("=") for p in os.environ.get("BATCHFUZZ_REPLAY_TARGETS", "").split(",") if p.strip()]
    return {c: spec for c, _, spec in pairs}


def _replay_engines() -> list[str]:
    """``$BATCHFUZZ_REPLAY_ENGINES`` (``wheel:PATH,dir:PATH,...``): the engine
    releases entries recorded against an engine binding are replayed on (the
    corpus never runs a release a file names by itself)."""
    return [p.strip() for p in os.environ.get("BATCHFUZZ_REPLAY_ENGINES", "").split(",") if p.strip()]


@pytest.mark.parametrize("path", _corpus_params())
def test_corpus_entry_passes(path: Path) -> None:
    entry = corpus.load(path)  # a malformed file errors here, naming the file
    outcome = corpus.replay(entry, targets=_replay_targets(), engines=_replay_engines())
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
    r = runner.hunt(c, namespace["split"], c.property(prop),
                    runner.HuntOptions(settings(max_examples=200, derandomize=True, database=None, deadline=None)), target_name="planted")
    assert r.failure is not None
    return r.failure


def _failure(spec: str, prop: str = "max_is_ceil") -> runner.Failure:
    return _failure_of(prop)


def _entry_data(spec: str, prop: str = "max_is_ceil") -> dict[str, Any]:
    return corpus.make_entry_data(_failure(spec, prop), target=spec, device="cpu", found={"seed": 0, "profile": "test"},
                                  reproduction="split(3, 5)")


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
    assert (e.contract, e.target, e.property, e.device, e.domain) == (CONTRACT, spec, "max_is_ceil", "cpu", "spec")
    assert e.id == data["id"] and e.kind == "violation" and e.error_type == "PropertyViolation"
    assert e.case.args == _failure(spec).case.args  # derandomized: the same shrunk case
    raw = json.loads(path.read_text())
    for key in ("inputs", "reproduction", "versions", "date", "failure", "spec"):
        assert raw[key], key
    assert raw["versions"]["hypothesis"] and raw["versions"]["batchfuzz"]
    assert set(raw["inputs"]) == set(e.case.args)


def test_a_case_of_the_same_property_is_one_origin_the_smaller_kept(tmp_path: Path, planted: Path) -> None:
    """The same bug shrunk to another local minimum (another night, another
    seed) is not a second entry while the first still fails; a smaller one
    replaces it (it once came back "already known" and the larger case stayed:
    issue 37 item 2); once the entry passes, a new failure is a new bug."""
    spec = f"{planted}:split"
    root = tmp_path / "corpus"
    first = _entry_data(spec)  # the shrunk (3, 5)
    contract = registry.get(CONTRACT)

    def with_case(args: dict[str, int], context: dict[str, int]) -> dict[str, Any]:
        case = {"args": args, "context": context}
        return dict(first, case=case, id=corpus.entry_id(CONTRACT, spec, "cpu", "spec", first["property"],
                                                         codec.decode_case(case)))

    larger = with_case({"num_reqs": 169, "num_tokens": 215}, {"max_model_len": 215})
    with InProcess(contract, load_function(spec)) as ex:
        saved = corpus.save_failure(root, larger, ex)
        assert saved.new and corpus.files(root) == [saved.path]
        larger_again = corpus.save_failure(root, with_case({"num_reqs": 3, "num_tokens": 134}, {"max_model_len": 45}), ex)
        assert larger_again.new and larger_again.replaced == [saved.path]  # (3, 134) is smaller than (169, 215)
        smaller = corpus.save_failure(root, first, ex)
        assert smaller.new and smaller.replaced == [larger_again.path] and corpus.files(root) == [smaller.path]
        again = corpus.save_failure(root, larger, ex)
        assert (again.path, again.new) == (smaller.path, False) and corpus.files(root) == [smaller.path]
    planted.write_text(FIXED)  # once the entry passes, a new failure of the property is a new bug
    with InProcess(contract, load_function(spec)) as fixed:
        after = corpus.save_failure(root, larger, fixed)
    assert after.new and corpus.files(root) == [after.path]


def test_replay_fails_until_the_bug_is_fixed(tmp_path: Path, planted: Path) -> None:
    spec = f"{planted}:split"
    path, _ = corpus.save(tmp_path, _entry_data(spec, "within_max_model_len"))
    # Without --target the entry is skipped: a corpus file never makes batchfuzz load a file.
    skipped = corpus.replay(corpus.load(path))
    assert skipped.status == "skipped" and "--target" in skipped.message
    outcome = corpus.replay(corpus.load(path), targets={CONTRACT: spec})
    assert outcome.fails and outcome.error_type == "PropertyViolation"
    text = corpus.describe(outcome)
    assert str(path) in text and "within_max_model_len" in text and "split(" in text
    planted.write_text(FIXED)
    assert corpus.replay(corpus.load(path), targets={CONTRACT: spec}).status == "passes"


def test_registry_implementation_entry_replays(tmp_path: Path, planted: Path) -> None:
    """An entry naming a registry implementation binds it to the stored device;
    the project's implementations are correct, so the planted case passes."""
    c = registry.get(CONTRACT)
    impl = c.implementations[0]
    data = corpus.make_entry_data(_failure(f"{planted}:split"), target=f"impl:{impl.name}@cpu", device="cpu")
    path, _ = corpus.save(tmp_path, data)
    e = corpus.load(path)
    assert e.target == f"impl:{impl.name}@cpu"
    assert corpus.replay(e).status == "passes"


def test_cuda_entry_is_skipped_without_a_gpu(tmp_path: Path, planted: Path) -> None:
    import torch

    c = registry.get(CONTRACT)
    impl = next((i for i in c.implementations if "cuda" in i.devices), None)
    if impl is None or torch.cuda.is_available():
        pytest.skip("needs a torch implementation and no CUDA device")
    data = corpus.make_entry_data(_failure(f"{planted}:split"), target=f"impl:{impl.name}@cuda", device="cuda")
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
    (lambda d: dict(d, target=["x"]), r"field 'target' must be a target reference string"),
    (lambda d: dict(d, target="impl:numpy"), r"field 'target': an implementation target is impl:NAME@DEVICE"),
    (lambda d: "[" * 200000, r"nested deeper than 64 levels"),
    (lambda d: dict(d, case={"args": {"num_reqs": 20_000_000, "num_tokens": 20_000_000}}), r"num_reqs = 20000000 is larger"),
    (lambda d: dict(d, format="batchfuzz-corpus/1", target=None, implementation="numpy"), None),
], ids=["json", "not-object", "missing", "format", "case-type", "dtype", "dataclass", "target-type", "target-ref",
        "nesting", "case-size", "format-1-upgrades"])
def test_malformed_file_gets_a_clear_error_naming_it(tmp_path: Path, planted: Path, mutate: Any, match: str | None) -> None:
    p = _write(tmp_path, "broken.json", mutate(_valid(planted)))
    if match is None:  # not malformed: an entry of the earlier format is read as the current one
        assert corpus.load(p).target == "impl:numpy@cpu"
        return
    with pytest.raises(corpus.CorpusError, match=match) as info:
        corpus.load(p)
    assert str(p) in str(info.value)


def test_binary_and_oversized_files_are_rejected_by_name(tmp_path: Path) -> None:
    binary = tmp_path / CONTRACT / "binary.json"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(corpus.CorpusError, match=r"binary.json: not a text file"):
        corpus.load(binary)
    big = tmp_path / CONTRACT / "big.json"
    big.write_text(" " * (corpus.MAX_FILE_BYTES + 1))
    with pytest.raises(corpus.CorpusError, match=r"big.json: .* larger than a corpus file may be"):
        corpus.load(big)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("contract", "no_such_contract", r"unknown contract 'no_such_contract'"),
    ("property", "no_such_property", r"has no property 'no_such_property'"),
    ("target", "impl:no_such_impl@cpu", r"has no implementation 'no_such_impl'"),
    ("case", {"args": {"requests": 3, "tokens": 5}, "context": {}}, r"arguments \['requests', 'tokens'\] are not"),
    ("case", {"args": {"num_reqs": 5, "num_tokens": 3}, "context": {}}, r"not an input of split_dummy_tokens's spec domain"),
    ("domain", "nightly", r"has no domain 'nightly'"),
    ("during", "x\nimport os", r"field 'during' 'x\\nimport os' is set for property 'max_is_ceil'"),
])
def test_an_entry_that_does_not_fit_its_contract_is_malformed(tmp_path: Path, planted: Path, field: str, value: Any,
                                                              match: str) -> None:
    data = dict(_valid(planted), target="impl:numpy@cpu", **{field: value}) if field != "target" else \
        dict(_valid(planted), target=value)
    if field == "target":  # an entry written for that target (its id is its content's address)
        data["id"] = corpus.entry_id(CONTRACT, value, "cpu", "spec", data["property"], corpus.decode_case(data["case"]))
    p = _write(tmp_path, "stale.json", data)
    with pytest.raises(corpus.CorpusError, match=match) as info:
        corpus.replay(corpus.load(p))
    assert str(p) in str(info.value)


def test_a_file_target_is_never_loaded_by_the_corpus(tmp_path: Path) -> None:
    """An entry naming ``helper.py:f`` does not run helper.py's top-level code:
    it is skipped unless ``--target`` names the function."""
    marker = tmp_path / "executed"
    helper = tmp_path / "helper.py"
    helper.write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n\ndef f(r, n):\n    return [n // r] * r\n")
    data = corpus.make_entry_data(_failure_of("max_is_ceil"), target=f"{helper}:f", device="cpu")
    path, _ = corpus.save(tmp_path / "corpus", data)
    assert corpus.replay(corpus.load(path)).status == "skipped"
    assert cli.main(["replay", str(path)]) == 4  # skipped: nothing replayed
    assert not marker.exists()


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
    with pytest.raises(corpus.CorpusError, match="does not fit split_dummy_tokens"):
        corpus.replay(e)  # a string where a count belongs: malformed, and nothing runs the payload
    assert not marker.exists()


def test_default_dir_honours_the_environment_else_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(corpus.ENV_VAR, str(tmp_path / "elsewhere"))
    assert corpus.default_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv(corpus.ENV_VAR)
    monkeypatch.chdir(tmp_path)
    assert corpus.default_dir() == tmp_path / "corpus"  # the user's project, never batchfuzz's own tree
    assert not corpus.default_dir().is_relative_to(Path(corpus.__file__).resolve().parent.parent)


def test_replay_command_exit_codes(tmp_path: Path, planted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "corpus"
    assert cli.main(["replay", str(tmp_path / "empty")]) == 2  # a path that does not exist
    (tmp_path / "empty").mkdir()
    assert cli.main(["replay", str(tmp_path / "empty")]) == 4  # nothing replayed: no entry found
    path, _ = corpus.save(root, _entry_data(f"{planted}:split"))
    target = ["--target", f"{CONTRACT}={planted}:split"]
    assert cli.main(["replay", str(root)]) == 4  # its one entry skipped (a user's function, not named)
    assert "1 skipped" in capsys.readouterr().out
    assert cli.main(["replay", str(root), *target]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and str(path) in out and "1 still fail" in out
    planted.write_text(FIXED)
    assert cli.main(["replay", str(path), *target]) == 0
    # Garbage files are named, and the valid entries are still replayed.
    _write(root, "broken.json", "{")
    (root / CONTRACT / "binary.json").write_bytes(b"\xff\xfe\x00")
    assert cli.main(["replay", "-q", str(root), *target]) == 2
    out = capsys.readouterr().out
    assert "broken.json: not valid JSON" in out and "binary.json: not a text file" in out
    assert "3 corpus entries: 1 pass, 0 still fail, 0 skipped, 2 malformed" in out


def test_entry_ids_are_stable_and_distinct() -> None:
    case = Case({"num_reqs": 3, "num_tokens": 5}, {"max_model_len": 2})
    a = corpus.entry_id(CONTRACT, "impl:numpy@cpu", "cpu", "spec", "max_is_ceil", case)
    assert a == corpus.entry_id(CONTRACT, "impl:numpy@cpu", "cpu", "spec", "max_is_ceil", case.copy())
    assert len({a,
                corpus.entry_id(CONTRACT, "impl:torch@cpu", "cpu", "spec", "max_is_ceil", case),
                corpus.entry_id(CONTRACT, "impl:numpy@cpu", "cuda", "spec", "max_is_ceil", case),
                corpus.entry_id(CONTRACT, "impl:numpy@cpu", "cpu", "engine", "max_is_ceil", case),
                corpus.entry_id(CONTRACT, "impl:numpy@cpu", "cpu", "spec", "sum_is_num_tokens", case),
                corpus.entry_id(CONTRACT, "impl:numpy@cpu", "cpu", "spec", "max_is_ceil", Case({"num_reqs": 3, "num_tokens": 6}))}) == 6
