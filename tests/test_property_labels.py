"""Every property is labelled safety or documented choice (issue 39, item 3):
the label is checked when a record is built, each contract's section of
docs/contracts.md lists its choices, and ``check`` and the release matrix
print the label of a failing property."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from batchfuzz import matrix, registry, runner
from batchfuzz.case import Case
from batchfuzz.cli import main

CONTRACTS_MD = Path(__file__).resolve().parent.parent / "docs" / "contracts.md"


def test_every_property_of_every_contract_is_labelled() -> None:
    for c in registry.contracts():
        assert {p.label for p in c.properties} <= set(registry.LABELS), c.name
        assert any(p.label == registry.SAFETY for p in c.properties), c.name


def test_an_unlabelled_or_mislabelled_property_is_a_record_error() -> None:
    c = registry.get("split_dummy_tokens")
    unlabelled = (dataclasses.replace(c.properties[0], label=""), *c.properties[1:])
    with pytest.raises(registry.RecordError, match=r"'split_dummy_tokens': properties without a label .*\['matches_oracle'\]"):
        dataclasses.replace(c, properties=unlabelled)
    with pytest.raises(registry.RecordError, match=r"property 'p': label must be one of \('safety', 'choice'\), got 'policy'"):
        registry.Property("p", "s", lambda target, case: None, label="policy")


def _documented_choices(section: str) -> set[str]:
    """The properties the section's "Labels" line names as documented choices."""
    text = CONTRACTS_MD.read_text()
    body = re.search(rf"^## Contract {section}:.*?(?=^## )", text, flags=re.DOTALL | re.MULTILINE)
    assert body, f"docs/contracts.md has no section for contract {section}"
    line = re.search(r"^- \*\*Labels\.\*\* (.*)$", body.group(0), flags=re.MULTILINE)
    assert line, f"contract {section}'s section has no Labels line"
    if line.group(1).startswith("Every property is safety"):
        return set()
    named = re.match(r"Documented choice: ([^.]*)\. Why: ", line.group(1))
    assert named, line.group(1)
    return set(re.findall(r"`(\w+)`", named.group(1)))


def test_each_contracts_docs_name_its_documented_choices() -> None:
    for c in registry.contracts():
        by_section = [d for d in registry.contracts() if d.section[0] == c.section[0]]
        choices = {p.name for d in by_section for p in d.properties if p.label == registry.CHOICE}
        assert _documented_choices(c.section[0]) == choices, c.name


def test_the_harness_properties_are_safety() -> None:
    c = registry.get("coordinate_dp")
    assert (c.property_label("crash"), c.property_label("graph_runnable"), c.property_label("split_when_agreed")) == (
        "safety", "safety", "choice")


def test_check_prints_and_records_the_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = tmp_path / "tails.py"
    # The remainder at the head: safe (within ceil(N / R)), only not the engine's placement.
    module.write_text("from batchfuzz.reference.split_dummy_tokens import split_dummy_tokens\n\n"
                      "def head(num_reqs, num_tokens):\n"
                      "    return list(split_dummy_tokens(num_reqs, num_tokens))[::-1]\n")
    report = tmp_path / "r.json"
    assert main(["check", "split_dummy_tokens", f"{module}:head", "--exhaustive", "--scope", "ci", "--no-isolation",
                 "--json", str(report)]) == 1
    assert "COUNTEREXAMPLE: property matches_oracle [choice] (" in capsys.readouterr().out
    assert json.loads(report.read_text())["label"] == "choice"


def test_the_matrix_shows_the_label_and_hunts_safety_first() -> None:
    cell = matrix.Cell(release="1", function="pkg/mod.py:f", contract="split_dummy_tokens", domain="engine", verdict="fail",
                       property="max_is_ceil", label="safety", counterexample={"args": {"num_reqs": "3"}})
    assert "| **fail** `max_is_ceil` [safety] `num_reqs=3` |" in matrix.to_markdown([cell])
    assert "max_is_ceil [safety]: num_reqs=3" in matrix.to_text([cell])
    order = [p.label for p in matrix._safety_first(registry.get("split_dummy_tokens"))]
    assert order == sorted(order, key=lambda label: label != "safety") and order[-1] == "choice"


def test_a_failing_cell_records_its_propertys_label() -> None:
    cell = matrix.Cell(release="1", function="pkg/mod.py:f", contract="coordinate_dp", domain="engine", verdict="pass")
    failure = runner.Failure("coordinate_dp", "t", "split_when_agreed", "spec", Case({"num_reqs": 1}), "PropertyViolation", "m")
    matrix._record_failure(cell, failure)
    assert (cell.verdict, cell.property, cell.label) == ("fail", "split_when_agreed", "choice")
    assert cell.to_json()["label"] == "choice"
