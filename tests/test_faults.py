"""The faults of issue 19, each tried as a test that holds: corpus files that
would run code or stop the replay, hostile targets, resource limits, bad
durations. Every test here is driven by example counts or by the fault
itself, never by a short wall-clock budget.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import cli, corpus
from batchfuzz.case import Case

CONTRACT = "split_dummy_tokens"
LORA = "vllm/v1/worker/gpu/lora_utils.py:create_lora_capture_hook"

# A "release" whose bound function writes a marker when it runs: what a
# corpus file could point an engine reference at.
_RELEASE_FILE = """\
def create_lora_capture_hook(lora_config, runner):
    open({marker!r}, "w").write("ran")

    def hook(num_active_loras, num_reqs, num_tokens):
        base, rem = divmod(num_tokens, num_reqs)
        runner.maybe_select_dummy_loras(lora_config, [base + (i >= num_reqs - rem) for i in range(num_reqs)])

    return hook
"""


def _release(tmp_path: Path) -> tuple[Path, Path]:
    root, marker = tmp_path / "release", tmp_path / "executed"
    f = root / LORA.split(":")[0]
    f.parent.mkdir(parents=True)
    f.write_text(_RELEASE_FILE.format(marker=str(marker)))
    return root, marker


def _entry(target: str, **changes: Any) -> dict[str, Any]:
    case = Case({"num_reqs": 2, "num_tokens": 5}, {})
    data: dict[str, Any] = {
        "format": corpus.FORMAT, "id": corpus.entry_id(CONTRACT, target, "cpu", "spec", "matches_oracle", case),
        "contract": CONTRACT, "target": target, "device": "cpu", "domain": "spec", "property": "matches_oracle",
        "during": "", "spec": "", "failure": {"kind": "violation", "error_type": "PropertyViolation", "message": ""},
        "case": {"args": {"num_reqs": 2, "num_tokens": 5}, "context": {}},
    }
    data.update(changes)
    return data


def _save(root: Path, data: dict[str, Any], name: str | None = None) -> Path:
    p = root / CONTRACT / (name or f"{data['id']}.json")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data))
    return p


# --------------------------------------------------------------------------- a corpus file runs code


def test_an_engine_release_a_corpus_file_names_is_not_run_unless_the_user_names_it(tmp_path: Path) -> None:
    """``engine:vllm::dir:SOME/DIR::...`` in a corpus file: the entry is
    skipped (saying how to replay it) and the directory's code never runs,
    in ``corpus.replay`` and in ``batchfuzz replay``; named with
    ``--engine dir:SOME/DIR``, it is replayed."""
    release, marker = _release(tmp_path)
    target = f"engine:vllm::dir:{release}::{LORA}::{CONTRACT}"
    path = _save(tmp_path / "corpus", _entry(target))
    outcome = corpus.replay(corpus.load(path), isolate=False)
    assert outcome.status == "skipped" and f"--engine dir:{release}" in outcome.message, outcome
    assert cli.main(["replay", "--no-isolation", str(path)]) == 0
    assert not marker.exists(), "a corpus file made batchfuzz run code from a directory it named"
    # Named by the user, the release is replayed (and its code runs: the user chose it).
    assert corpus.replay(corpus.load(path), engines=[f"dir:{release}"], isolate=False).status == "passes"
    assert marker.exists()
    marker.unlink()
    assert cli.main(["replay", "--no-isolation", "--engine", f"dir:{release}", str(path)]) == 0 and marker.exists()


def test_an_engine_release_named_by_another_path_is_not_a_licence(tmp_path: Path) -> None:
    """Naming one release does not let a corpus file run another."""
    release, marker = _release(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    target = f"engine:vllm::dir:{release}::{LORA}::{CONTRACT}"
    path = _save(tmp_path / "corpus", _entry(target))
    assert corpus.replay(corpus.load(path), engines=[f"dir:{other}", "installed:"], isolate=False).status == "skipped"
    assert not marker.exists()


# --------------------------------------------------------------------------- bad corpus files


def test_bad_corpus_files_are_each_reported_by_name_and_the_others_still_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An integer past Python's int-string limit, a symbolic link to
    /dev/zero (size 0, endless), a FIFO named x.json (a read would block), a
    link out of the corpus: each is named as malformed, without reading it
    forever, and the good entries before and after it are still replayed."""
    root = tmp_path / "corpus"
    good = _entry("impl:numpy@cpu")
    _save(root, good, "a-good.json")
    _save(root, good, "z-good.json")
    folder = root / CONTRACT
    (folder / "b-bigint.json").write_text(json.dumps(good).replace('"num_tokens": 5', '"num_tokens": ' + "7" * 5000))
    (folder / "c-zero.json").symlink_to("/dev/zero")
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(good))
    (folder / "d-outside.json").symlink_to(outside)
    os.mkfifo(folder / "x.json")
    assert cli.main(["replay", "--no-isolation", str(root)]) == 2
    out = capsys.readouterr().out
    assert "b-bigint.json: not valid JSON for a corpus file: Exceeds the limit (4300 digits)" in out, out
    assert "c-zero.json: a symbolic link (to '/dev/zero')" in out, out
    assert "d-outside.json: a symbolic link" in out, out
    assert "x.json: not a regular file (a FIFO)" in out, out
    assert "6 corpus entries: 2 pass, 0 still fail, 0 skipped, 4 malformed" in out, out


@pytest.mark.parametrize(("changes", "match"), [
    ({"device": "tpu"}, r"field 'device' must be one of cpu, cuda, got 'tpu'"),
    ({"device": "cuda; rm -rf /"}, r"field 'device' must be one of cpu, cuda"),
])
def test_a_device_that_is_not_one_is_malformed(tmp_path: Path, changes: dict[str, Any], match: str) -> None:
    p = _save(tmp_path, _entry("impl:numpy@cpu", **changes), "entry.json")
    with pytest.raises(corpus.CorpusError, match=match) as info:
        corpus.load(p)
    assert str(p) in str(info.value)


def test_an_id_that_is_not_the_content_address_is_malformed(tmp_path: Path) -> None:
    """An entry whose case (or target, property...) was edited after it was
    written no longer matches its id: malformed, naming both."""
    data = _entry("impl:numpy@cpu")
    p = _save(tmp_path, dict(data, case={"args": {"num_reqs": 3, "num_tokens": 5}, "context": {}}), "entry.json")
    with pytest.raises(corpus.CorpusError, match=rf"field 'id' '{data['id']}' is not the address of the file's content"):
        corpus.replay(corpus.load(p), isolate=False)
    assert corpus.replay(corpus.load(_save(tmp_path, data, "ok.json")), isolate=False).status == "passes"
