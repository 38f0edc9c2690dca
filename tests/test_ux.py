"""What a new user meets beyond the printed next steps (issue 37): output
folders that are system folders refused, a light start (no torch for
``list``, ``--help`` and usage errors), the words and counters of the
banners, and the engine matrix saying what it does while it downloads and binds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv", [
    ["fuzz", "--report", "/", "--contract", "split_dummy_tokens", "--max-examples", "1"],
    ["fuzz", "--corpus", "/", "--contract", "split_dummy_tokens", "--max-examples", "1"],
    ["fuzz", "--report", "/etc", "--contract", "split_dummy_tokens", "--max-examples", "1"],
    ["fuzz", "--database", "/usr", "--contract", "split_dummy_tokens", "--max-examples", "1"],
    ["check", "split_dummy_tokens", "oracle", "--write-test", "/"],
    ["check", "split_dummy_tokens", "oracle", "--database", "/"],
    ["replay", "--write-tests", "/"],
    ["merge-reports", "shard1", "--report", "/"],
])
def test_a_system_folder_is_refused_as_an_output_folder(argv: list[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``--report /`` as root wrote the report into /: a usage error naming the option, nothing written."""
    from batchfuzz.cli import main

    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir("/"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    flag = next(a for a in argv if a.startswith("--") and argv[argv.index(a) + 1].startswith("/"))
    assert f"batchfuzz: error: {flag} {argv[argv.index(flag) + 1]}: refusing to write" in err, err
    assert sorted(os.listdir("/")) == before
