"""The reports' page, ``index.html`` (:mod:`batchfuzz.fuzz.page`).

The page builder from hand-made summaries: escaping of every text a summary
carries, the timeline's segments, the kernel line only where a failure has a
``confirm`` record, the history from earlier report directories. Then in a real
browser: a tiny real ``fuzz --report`` run with a planted failing target, and a
``merge-reports --history`` of it, opened in headless Chromium; what the DOM
holds is checked against what ``summary.json`` holds (never against timings),
and a screenshot of each page is kept under ``$BATCHFUZZ_ARTIFACTS`` (else the
test's own temporary directory). Skipped, saying so, without Chromium.
"""

from __future__ import annotations

import copy
import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from batchfuzz import cli
from batchfuzz.fuzz import page
from batchfuzz.usage import UsageError
from tests.test_corpus import BUGGY, CONTRACT
from tests.test_fuzz_job import _env

HOSTILE = '<script>alert("x")</script> $\\alpha$ & co'


def _summary(impl: str = "impl:numpy@cpu", *, started: str = "2026-12-01T02:00:00+00:00",
             timeline: list[list[float]] | None = None, failure: dict[str, Any] | None = None) -> dict[str, Any]:
    """A summary as summary.json holds it, reduced to what the page reads."""
    failures = [failure] if failure else []
    return {
        "tool": "batchfuzz", "partial": False, "interrupted_by": None, "status": "failed" if failures else "passed",
        "started": started, "finished": started, "wall_seconds": 12.0, "budget_seconds": 10.0, "profile": "dev",
        "seed": 7, "workers": 1, "device": "cpu", "replay_command": f"batchfuzz fuzz --target {CONTRACT}={impl}",
        "versions": {"batchfuzz": "0"}, "notes": [f"a note about {impl}"], "errors": [], "failures": failures,
        "totals": {"examples": 300, "failures": len(failures), "new_corpus_entries": len(failures), "errors": 0,
                   "items": 1, "items_run": 1, "items_not_run": 0, "throughput": 25.0},
        "contracts": {CONTRACT: {
            "examples": 300, "seconds": 3.0, "cases_per_second": 100.0, "failures": len(failures), "errors": 0,
            "items": 1, "items_run": 1,
            "coverage": {"R == 1": {"examples": 200, "fraction": 0.6667}, f"<u>{impl}</u>": {"examples": 30, "fraction": 0.1}},
            "implementations": {impl: {
                "status": "failed" if failures else "passed", "examples": 300, "seconds": 3.0, "cases_per_second": 100.0,
                "failures": failures, "coverage": {}, "scores": {}, "settings": {},
                "properties": {"matches_oracle": {"examples": 300, "seconds": 3.0, "status": "passed", "slices": 2,
                                                  "reason": "", "timeline": timeline if timeline is not None
                                                  else [[2.0, 100, 1.0], [6.0, 300, 3.0]]}},
            }},
        }},
    }


def _failure(impl: str, **extra: Any) -> dict[str, Any]:
    return {"contract": CONTRACT, "implementation": impl, "property": "matches_oracle", "error_type": "PropertyViolation",
            "message": f"got <img src=x> from {impl}\nsecond line", "corpus_file": "corpus/x.json", "new": True,
            "reproduction": f"result = split(3, 5)  # </pre><script>{impl}</script>", **extra}


def test_every_text_of_the_summary_is_escaped() -> None:
    text = page.build_page(_summary(HOSTILE, failure=_failure(HOSTILE)))
    assert "<script" not in text and "<img" not in text and "<u>" not in text
    assert html.escape(HOSTILE) in text  # the table, the notes, the failure's heading
    assert html.escape(f"result = split(3, 5)  # </pre><script>{HOSTILE}</script>") in text
    # Inside the plots (SVG text): the name escaped, and its $...$ left as written, not set as mathematics.
    rates = text[text.index('<figure class="rates"'):text.index('<h2 id="coverage"')]
    assert "<svg" in rates and "$\\alpha$ &amp; co" in rates
    coverage = text[text.index('<figure class="coverage"'):]
    assert "&lt;u&gt;" in coverage and "R == 1" in coverage


def test_the_page_opens_on_what_failed() -> None:
    """The failures come right after the run's facts, before the implementations and every chart (issue 37 item 7),
    one section per origin listing the properties it breaks, and a case not fully shrunk says so."""
    s = _summary(failure=_failure("t", shrink_complete=False))
    s["origins"] = [{**_failure("t", shrink_complete=False), "properties": ["matches_oracle", "max_is_ceil"],
                     "description": "wrong answer", "failures": 2}]
    text = page.build_page(s)
    heads = [text.index(f'<h2 id="{name}"') for name in ("failures", "items", "rates", "coverage")]
    assert heads == sorted(heads), heads
    failures = text[heads[0]:heads[1]]
    assert failures.count('<div class="failure">') == 1 and "matches_oracle, max_is_ceil" in failures
    assert "NOT FULLY SHRUNK" in failures
    assert "NOT FULLY SHRUNK" not in page.build_page(_summary(failure=_failure("t")))


def test_no_network_at_view_time() -> None:
    text = page.build_page(_summary(failure=_failure("impl:numpy@cpu")))
    assert "<script" not in text and "<link" not in text and "@import" not in text
    # Nothing the browser would load: no src, every href (SVG's xlink:href included) and url() within the page.
    assert re.findall(r"\ssrc=", text.replace("&lt;img src=x&gt;", "")) == []
    assert {h[:1] for h in re.findall(r'href="([^"]*)"', text)} <= {"#"}
    assert {u[:1] for u in re.findall(r"url\(([^)]*)\)", text)} <= {"#"}


def test_a_slice_is_a_segment_at_its_own_rate() -> None:
    xs, ys = page._segments([[2.0, 10, 1.0], [5.0, 40, 2.0], [6.0, 40, 2.0]])  # the last slice ran no time: no segment
    assert xs[:2] == [1.0, 2.0] and ys[:2] == [10.0, 10.0] and math.isnan(xs[2])
    assert xs[3:5] == [4.0, 5.0] and ys[3:5] == [30.0, 30.0] and len(xs) == 6


def test_without_a_timeline_or_labels_the_page_says_so() -> None:
    s = _summary(timeline=[])
    s["contracts"][CONTRACT]["coverage"] = {}
    text = page.build_page(s)
    assert '<figure class="rates"' not in text and f"no timeline recorded for: {CONTRACT}" in text
    assert '<figure class="coverage"' not in text and f"no input-class labels recorded for: {CONTRACT}" in text


def test_the_kernel_consequence_only_where_confirm_said_it() -> None:
    assert 'class="kernel"' not in page.build_page(_summary(failure=_failure("t")))
    confirmed = _failure("t", confirm={"kernel": "prefill", "verdict": "consequence", "consequence": "read outside its row"})
    text = page.build_page(_summary(failure=confirmed))
    assert 'class="kernel"' in text and "read outside its row" in text and "prefill" in text


def test_history_from_earlier_report_directories(tmp_path: Path) -> None:
    for name, started, examples in (("b", "2026-11-30T02:00:00+00:00", 500), ("a", "2026-11-29T02:00:00+00:00", 400)):
        s = _summary(started=started)
        s["totals"]["examples"] = examples
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(s))
    nights = page.read_history([str(tmp_path / "b"), str(tmp_path / "a")])
    assert [n["examples"] for n in nights] == [400, 500]  # oldest first, whatever the order given
    text = page.build_page(_summary(), nights)
    history = text[text.index('<h2 id="history"'):]
    assert "<svg" in history and history.count("<tr>") == 1 + 3  # the head, two earlier nights, this one
    assert str(tmp_path / "a") in history and "this report" in history
    assert '<h2 id="history"' not in page.build_page(_summary())
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text("{")
    with pytest.raises(UsageError, match=r"--history .*bad: .*not valid JSON.*--history .*missing: cannot read"):
        page.read_history([str(tmp_path / "bad"), str(tmp_path / "missing")])


def test_the_page_is_a_function_of_the_summary() -> None:
    s = _summary(failure=_failure("t"))
    before = copy.deepcopy(s)
    assert page.build_page(s) == page.build_page(before) and s == before


# --------------------------------------------------------------------------- in a browser


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium installed (apt-get install chromium): the page is not opened in a browser")


class _Dom(HTMLParser):
    """The DOM as Chromium dumped it: the reproductions' texts, the figures' classes and their SVG texts."""

    def __init__(self) -> None:
        super().__init__()
        self.reproductions: list[str] = []
        self.figures: list[str] = []
        self.svg_texts: list[str] = []
        self.paths = 0
        self.order: list[str] = []  # the ids of the page's sections, top to bottom
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "h2":
            self.order.append(str(a.get("id")))
        if tag == "pre" and a.get("class") == "reproduction":
            self._in = "pre"
            self.reproductions.append("")
        elif tag == "figure":
            self.figures.append(str(a.get("class")))
        elif tag == "text":
            self._in = "text"
            self.svg_texts.append("")
        elif tag == "path":
            self.paths += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("pre", "text"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "pre":
            self.reproductions[-1] += data
        elif self._in == "text":
            self.svg_texts[-1] += data


def _open(chromium: str, index: Path, shot: Path, profile: Path) -> str:
    """The page's DOM after Chromium rendered it; its screenshot at ``shot``."""
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}"]
    dom = subprocess.run([*common, "--dump-dom", index.as_uri()], capture_output=True, text=True, timeout=120, check=True)
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1280,2000", index.as_uri()],
                   capture_output=True, text=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no screenshot at {shot}"
    return dom.stdout


def test_a_fuzz_report_and_its_merge_open_in_chromium(tmp_path: Path) -> None:
    chromium = _chromium()
    artifacts = Path(os.environ.get("BATCHFUZZ_ARTIFACTS") or tmp_path)
    artifacts.mkdir(parents=True, exist_ok=True)
    planted = tmp_path / "planted_split.py"
    planted.write_text(BUGGY)
    report = tmp_path / "report"
    # Derandomized (ci): a fixed stream of examples per item, which finds the planted bug; the budget, far
    # beyond what the items need, is not reached even on a loaded machine.
    r = subprocess.run([sys.executable, "-m", "batchfuzz", "fuzz", "--report", str(report), "--corpus", str(tmp_path / "corpus"),
                        "--progress", "none", "--profile", "ci", "--budget", "600s", "--contract", CONTRACT,
                        "--property", "matches_oracle", "--property", "sum_is_num_tokens", "--impl", "impl:numpy@cpu",
                        "--impl", f"{planted}:*", "--target", f"{CONTRACT}={planted}:split"],
                       cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 1, r.stdout + r.stderr
    s = json.loads((report / "summary.json").read_text())
    assert s["failures"], "the planted target's failure is not in the summary"

    dom_text = _open(chromium, report / "index.html", artifacts / "page-fuzz.png", tmp_path / "chromium")
    dom = _Dom()
    dom.feed(dom_text)
    contract = s["contracts"][CONTRACT]
    for name in contract["implementations"]:
        assert html.escape(name, quote=False) in dom_text, name
    timelines = [p["timeline"] for i in contract["implementations"].values() for p in i["properties"].values()]
    assert all(timelines) and dom.figures.count("rates") == 1 and dom.figures.count("coverage") == 1
    assert dom.paths > 10
    assert set(contract["coverage"]) <= set(dom.svg_texts), "an input class of the summary is not on the page"
    assert [f["reproduction"] for f in s["origins"]] == dom.reproductions
    assert dom.order.index("failures") < dom.order.index("rates") < dom.order.index("coverage"), dom.order

    merged = tmp_path / "merged"
    assert cli.main(["merge-reports", str(report), "--report", str(merged), "--history", str(report)]) == 1
    dom_text = _open(chromium, merged / "index.html", artifacts / "page-merged.png", tmp_path / "chromium")
    dom = _Dom()
    dom.feed(dom_text)
    assert "history" in dom.figures and str(report) in dom_text
    assert [f["reproduction"] for f in s["origins"]] == dom.reproductions
    assert dom.order.index("failures") < dom.order.index("rates"), dom.order


def test_an_unreadable_history_is_a_usage_error_before_anything_runs(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-night"
    assert cli.main(["fuzz", "--contract", CONTRACT, "--no-database", "--report", str(tmp_path / "r"),
                     "--history", str(missing)]) == 2
    assert f"--history {missing}: cannot read" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before the report directory was made
    shard = tmp_path / "shard"
    shard.mkdir()
    assert cli.main(["merge-reports", str(shard), "--report", str(tmp_path / "m"), "--history", str(missing)]) == 2
    assert f"--history {missing}: cannot read" in capsys.readouterr().err
    assert not (tmp_path / "m" / "index.html").exists()
