"""``batchfuzz bench --loop`` (batchfuzz.bench.loopbench): on one small contract, in
seconds, its output is consistent (every loop sampled, examples counted,
ratios computed from the measured numbers); timings themselves are not
judged. And the fast contract E labels name exactly the classes the oracles
define."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from batchfuzz import registry
from batchfuzz.bench import loopbench
from batchfuzz.case import Case
from batchfuzz.cli import main
from batchfuzz.contracts._microbatch import labels, shipped_allow_microbatching, splits_of, step_of
from batchfuzz.reference._step import STEP_ARGUMENTS, multi_written_slots, self_overlaps
from batchfuzz.reference.allow_microbatching import allow_microbatching
from batchfuzz.reference.find_conflicts import find_conflicts, harmful_conflicts

CONTRACT = "split_dummy_tokens"
EXAMPLES = 6


@pytest.fixture(scope="module")
def report() -> loopbench.LoopReport:
    return loopbench.measure([CONTRACT], examples=EXAMPLES, repeat=2, seed=3)


def test_every_loop_of_every_property_is_sampled(report: loopbench.LoopReport) -> None:
    names = [p.name for p in registry.get(CONTRACT).properties]
    assert [r.property for r in report.rows] == names
    assert report.targets == {CONTRACT: ["impl:numpy@cpu"]}
    for row in report.rows:
        assert row.failures == []
        for mode in loopbench.MODES:
            samples = row.samples[mode]
            assert len(samples) == 2, (row.property, mode)
            # max_examples bounds every loop; the same seed gives every loop of a repetition the same stream.
            assert all(1 <= s.examples <= EXAMPLES and s.seconds > 0 for s in samples)
        for k in range(2):
            counts = {mode: row.samples[mode][k].examples for mode in loopbench.MODES}
            assert len(set(counts.values())) == 1, (row.property, counts)


def test_ratios_are_computed_from_the_samples(report: loopbench.LoopReport) -> None:
    data = report.to_dict()
    rows = data["properties"]
    ceiling_rates = [s["examples"] / s["seconds"] for r in rows for s in r["samples"]["ceiling"]]
    ceiling = statistics.median(ceiling_rates)
    assert data["ceilings"][CONTRACT] == pytest.approx(ceiling)
    below = []
    for r in rows:
        for mode in loopbench.MODES[1:]:
            median = statistics.median(s["examples"] / s["seconds"] for s in r["samples"][mode])
            assert r["median_rate"][mode] == pytest.approx(median)
            assert r["ratio"][mode] == pytest.approx(median / ceiling)
        if r["ratio"][loopbench.LABELS] < loopbench.GOAL:
            below.append(f"{CONTRACT}.{r['property']}")
    assert data["below_goal"] == below
    json.dumps(data)  # serialisable as it is


def test_tables_show_every_property(report: loopbench.LoopReport) -> None:
    text, markdown = report.to_text(), report.to_markdown()
    for row in report.rows:
        assert row.property in text and f"| {row.property} |" in markdown
        ratio = report.ratio(row, loopbench.ISOLATED)
        assert ratio is not None and f"{100 * ratio:.0f}%" in text
    assert f"| {CONTRACT} | impl:numpy@cpu | {len(report.rows)} |" in markdown  # the per-contract summary


def test_cli_writes_json_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    js, md = tmp_path / "loop.json", tmp_path / "loop.md"
    rc = main(["bench", "--loop", "--loop-contracts", CONTRACT, "--loop-examples", "3", "--repeat", "1", "--loop-target",
               "oracle", "--json", str(js), "--markdown", str(md)])
    out = capsys.readouterr().out
    assert rc == 0, out
    data = json.loads(js.read_text())
    assert data["targets"] == {CONTRACT: ["oracle"]} and data["settings"]["examples"] == 3
    assert {r["property"] for r in data["properties"]} == {p.name for p in registry.get(CONTRACT).properties}
    assert "isolated/ceiling" in out and md.read_text().startswith("Examples per second")


def test_unknown_contract_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--loop", "--loop-contracts", "nope"]) == 2
    assert "--loop-contracts: unknown contract 'nope'; known: " in capsys.readouterr().err


# ---------------------------------------------------------------- contract E labels


def labels_from_oracles(case: Case) -> list[str]:
    """The contract E labels as a composition of the oracles (one call each):
    the definition the one-pass ``labels`` must agree with."""
    step = step_of(case)
    source = case.context.get("source", "?")
    out = [f"source: {source}"] + [f"{source}: {label}" for label in case.context.get("labels", [])]
    args = tuple(case.args[k] for k in STEP_ARGUMENTS)
    conflicts = find_conflicts(*args)
    out.append("conflict" if conflicts else "no conflict")
    exact = allow_microbatching(*args)
    if not exact:
        out.append("unsafe step (a reader before a writer)")
    c, q = step.num_computed_tokens.tolist(), step.num_scheduled_tokens.tolist()
    if any(q[r] == 1 and c[r] > 0 for _g, r, _w, _b in conflicts):
        out.append("conflict read by a q == 1, c > 0 request")
    if any(q[r] > 0 and (t[r, : -(-c[r] // b)] == 0).any() for t, b in zip(step.block_tables, step.block_sizes, strict=True)
           for r in range(len(q)) if c[r] > 0):
        out.append("null block in a read prefix")
    if len(step.block_sizes) > 1:
        out.append("several groups")
    splits = [s for kind, s in splits_of(case, step) if kind != "reader cut"]
    starts = np.cumsum(q) - np.asarray(q, dtype=np.int64)
    ends = starts + np.asarray(q, dtype=np.int64)
    if any(((starts < ts) & (ts < ends)).any() for s in splits for ts, _ in s[1:]):
        out.append("straddling request")
    if any(harmful_conflicts(step, s) for s in splits):
        out.append("harmful conflict under a generated split")
    if self_overlaps(step):
        out.append("ill-formed: self-overlap")
    if multi_written_slots(step):
        out.append("ill-formed: slot written twice")
    shipped = shipped_allow_microbatching(*args)
    if shipped and not exact:
        out.append("shipped check unsound here")
    if exact and not shipped:
        out.append("shipped check vetoes a safe step")
    return out


RARE = ("conflict", "unsafe step (a reader before a writer)", "harmful conflict under a generated split",
        "shipped check unsound here", "shipped check vetoes a safe step", "null block in a read prefix", "straddling request")
# find_conflicts's domain keeps ill-formed steps; allow_microbatching's has only well-formed ones.
ILL_FORMED = ("ill-formed: self-overlap", "ill-formed: slot written twice")


@pytest.mark.parametrize("contract", ["find_conflicts", "allow_microbatching"])
def test_contract_e_labels_are_the_oracles_classes(contract: str) -> None:
    seen: set[str] = set()

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(case=registry.get(contract).domain("spec").cases())
    def check(case: Any) -> None:
        got = labels(case)
        assert got == labels_from_oracles(case)
        seen.update(got)

    check()
    # The comparison met the rarer classes too, not only the common ones.
    for label in RARE + (ILL_FORMED if contract == "find_conflicts" else ()):
        assert label in seen, (label, sorted(seen))
