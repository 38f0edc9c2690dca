"""What a target raises stays data (issue 36, items 3 and 5): a lone
surrogate, NUL, ESC or BEL in an exception message, or a 10 MB message,
reaches no terminal, report, corpus entry or observability record as it is.
Every text a target produces is bounded and printable where it is made
(``batchfuzz.text``, applied by ``batchfuzz.execution.Outcome``); the report
writers (``batchfuzz.output``) make what they write printable too.

The targets are ``tests/hostile.py:raises_unprintable`` and ``raises_huge``;
each runs through the real commands in a subprocess (the terminal is a pipe).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from batchfuzz import text
from batchfuzz.fuzz import corpus

REPO = Path(__file__).resolve().parent.parent
HOSTILE = Path(__file__).with_name("hostile.py")
CONTRACT = "split_dummy_tokens"
RAW = ("\x00", "\x1b", "\x07")  # characters that must never be written as they are


def _run(tmp_path: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "batchfuzz", *args], cwd=tmp_path, env=env, capture_output=True,
                          timeout=timeout)


def _fuzz(tmp_path: Path, fn: str, *extra: str) -> subprocess.CompletedProcess[bytes]:
    return _run(tmp_path, "fuzz", "--contract", CONTRACT, "--impl", f"{HOSTILE}:*", "--target",
                f"{CONTRACT}={HOSTILE}:{fn}", "--property", "matches_oracle", "--profile", "ci", "--budget", "20",
                "--no-database", "--report", str(tmp_path / "report"), "--corpus", str(tmp_path / "corpus"),
                "--progress", "lines", *extra)


def _clean(data: bytes, where: str) -> str:
    """``data`` as UTF-8 with none of the raw characters in it."""
    decoded = data.decode("utf-8")  # a lone surrogate cannot be in valid UTF-8: this raises if one was written
    assert not any(ch in decoded for ch in RAW), f"{where} holds a raw control character: {decoded[-2000:]!r}"
    return decoded


def test_the_sanitiser_escapes_and_bounds() -> None:
    assert text.printable("a\ud800b\x00c\x1b[2Jd\x07\te\nf\x85\ufffe") == \
        "a\\ud800b\\x00c\\x1b[2Jd\\x07\te\nf\\x85\\ufffe"
    cut = text.bounded("a" * 10 + "b" * 10_000 + "c" * 10, 100)
    assert cut.startswith("a" * 10) and cut.endswith("c" * 10) and "[... 9920 characters cut ...]" in cut
    assert len(cut) < 200 and text.bounded("short", 100) == "short"


def test_an_unprintable_exception_message_breaks_no_report_terminal_or_command(tmp_path: Path) -> None:
    """The fuzz run ends with its reports (it died with UnicodeEncodeError);
    junit.xml is well-formed (merge-reports reads it back), summary.md and
    the terminal show escapes, not an ESC sequence; ``replay`` and ``check
    --json`` on the same target end with their verdict."""
    r = _fuzz(tmp_path, "raises_unprintable")
    out = _clean(r.stdout + r.stderr, "fuzz's output")
    assert r.returncode == 1, out
    report = tmp_path / "report"
    summary = json.loads((report / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failures"], summary
    assert "\\x1b[2J" in summary["failures"][0]["message"] and "\\ud800" in summary["failures"][0]["message"]
    for name in ("summary.md", "junit.xml", "index.html"):
        _clean((report / name).read_bytes(), name)
    ET.parse(report / "junit.xml")
    merged = _run(tmp_path, "merge-reports", str(report), "--report", str(tmp_path / "merged"))
    assert merged.returncode == 1, _clean(merged.stdout + merged.stderr, "merge-reports' output")

    (entry,) = corpus.files(tmp_path / "corpus")
    _clean(entry.read_bytes(), "the corpus entry")
    replay = _run(tmp_path, "replay", str(entry), "--target", f"{CONTRACT}={HOSTILE}:raises_unprintable")
    said = _clean(replay.stdout + replay.stderr, "replay's output")
    assert replay.returncode == 1 and "1 still fail" in said, said
    check = _run(tmp_path, "check", CONTRACT, f"{HOSTILE}:raises_unprintable", "--budget", "20", "--json",
                 str(tmp_path / "check.json"))
    said = _clean(check.stdout + check.stderr, "check's output")
    assert check.returncode == 1, said
    json.loads(_clean((tmp_path / "check.json").read_bytes(), "check --json"))


def test_a_10_mb_exception_message_is_bounded_everywhere_and_its_entry_replays(tmp_path: Path) -> None:
    """Before: 20 MB on stdout, hundreds of MB of records and reports, and a
    corpus entry of 20 MB that replay refused (over 1 MiB). Now each output
    is bounded by the cut texts, whatever the message's size, and the entry
    replays ("1 still fail")."""
    r = _fuzz(tmp_path, "raises_huge", "--observe")
    assert r.returncode == 1, (r.stdout + r.stderr)[-3000:]
    assert len(r.stdout) + len(r.stderr) < 200_000, len(r.stdout) + len(r.stderr)
    report = tmp_path / "report"
    sizes = {p.name: p.stat().st_size for p in report.iterdir() if p.is_file()}
    assert sizes and all(size < 1_000_000 for size in sizes.values()), sizes
    summary = json.loads((report / "summary.json").read_text())
    message = summary["failures"][0]["message"]
    assert len(message) <= text.MAX_CHARS + 100 and "characters cut ...]" in message, message[:200]
    records = list((tmp_path / ".hypothesis" / "observed").glob("*.jsonl"))
    assert records, "no observability records were written"
    longest = max(len(line) for p in records for line in p.read_bytes().splitlines())
    assert longest < 200_000, f"an observability record of {longest} bytes"

    (entry,) = corpus.files(tmp_path / "corpus")
    assert entry.stat().st_size < corpus.MAX_FILE_BYTES
    replay = _run(tmp_path, "replay", str(entry), "--target", f"{CONTRACT}={HOSTILE}:raises_huge")
    said = (replay.stdout + replay.stderr).decode()
    assert replay.returncode == 1 and "1 still fail, 0 skipped, 0 malformed" in said, said[-3000:]
    assert len(said) < 100_000
