"""Live progress (batchfuzz.progress): plain lines off a terminal, a rich bar
on one; a command's start does not import rich (or torch)."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchfuzz import cli
from batchfuzz.progress import Progress, interactive

REPO = Path(__file__).resolve().parent.parent


def test_plain_lines_off_a_terminal_and_a_heartbeat_when_silent() -> None:
    out = io.StringIO()
    assert not interactive(out)
    with Progress("things", total=3, stream=out, heartbeat_s=0.05) as bar:
        bar.update(now="the first")
        bar.advance("first: ok")
        deadline = time.monotonic() + 30  # a heartbeat comes after 0.05 s of silence (at most 1 s apart): wait for one
        while "... things" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        bar.say("a note")
        bar.advance("second: ok", n=2)
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    assert lines[0] == "first: ok" and "a note" in lines and lines[-1] == "second: ok"
    beat = next(line for line in lines if line.startswith("... things"))
    assert beat.startswith("... things: 1/3 done in ") and beat.endswith("; now: the first")


def test_a_bar_on_a_terminal() -> None:
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=120)
    with Progress("cells", total=4, console=console) as bar:
        bar.update(now="vllm 0.33.0 split_dummy_tokens")
        bar.advance("a cell: pass")
        bar._bar.refresh()  # draw now, rather than at rich's next tick
    text = buffer.getvalue()
    assert "\x1b[" in text  # drawn with terminal control codes
    assert "cells" in text and "1/4" in text and "vllm 0.33.0 split_dummy_tokens" in text
    assert "a cell: pass" in text


def test_a_catalogue_run_prints_plain_progress_lines(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["catalogue", "--contract", "split_dummy_tokens", "--variant", "remainder_to_first",
                     "--variant", "drop_remainder", "--primary-only", "--max-examples", "50"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "\x1b" not in out
    lines = out.splitlines()
    assert any(line.startswith("[1/2] ok  split_dummy_tokens/remainder_to_first:") for line in lines), out
    assert any(line.startswith("[2/2] ok  split_dummy_tokens/drop_remainder:") for line in lines), out


def test_the_command_line_starts_without_rich_or_torch() -> None:
    code = ("import sys; from batchfuzz import cli; cli.build_parser(); "
            "print(sorted(m for m in ('rich', 'torch') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
