"""The known-bug catalogue, one test per registered variant (generated from
the registry), plus the catalogue's own machinery and command.

Per variant, under the ``ci`` profile with ``max_examples`` =
``catalogue.MAX_EXAMPLES`` (the same settings as ``batchfuzz catalogue``,
whatever profile the session runs):

- the primary property (``caught_by[0]``) finds a counterexample;
- the shrunk counterexample equals the documented ``canonical`` form, or is
  no larger than it (``catalogue.compare``);
- every other property in ``caught_by`` fails too, on the shrunk case or in
  a search of its own. This complements ``test_every_property_can_fail``
  (tests/test_contracts.py): that test asks that each property kill *some*
  variant listing it; this one that no variant lists a property that does
  not kill it.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from batchfuzz import catalogue, registry, reproduce
from batchfuzz.case import Case
from batchfuzz.cli import main
from batchfuzz.reference.make_dummy import DummyBuffers
from batchfuzz.registry import Contract, Variant
from tests.generate import variant_params


@pytest.mark.parametrize(("contract", "variant"), variant_params())
def test_variant_is_caught_with_its_canonical_counterexample(contract: Contract, variant: Variant) -> None:
    e = catalogue.run_variant(contract, variant)
    problems = e.problems()
    if not problems:
        if e.stream > 1 and e.ci_case is not None:
            warnings.warn(f"{contract.name}/{variant.name}: the ci stream shrank to {catalogue.compact_args(e.ci_case.args)}; "
                          f"stream {e.stream} reached the documented form (the strategy shrinks this bug unreliably)",
                          stacklevel=1)
        return
    lines = [f"{contract.name}/{variant.name} ({variant.description}):", *(f"  - {p}" for p in problems)]
    if e.case is not None:
        lines.append(f"  shrunk:    {catalogue.compact_args(e.case.args)}")
    if variant.canonical is not None:
        lines.append(f"  canonical: {catalogue.compact_args(variant.canonical)}")
    if e.failure is not None:
        repro = reproduce.reproduction(e.failure, f"variant:{variant.name}")
        lines += ["--- reproduction ---", repro] if len(repro) <= 2000 else [
            f"(reproduction too long to print: `batchfuzz catalogue --contract {contract.name} --variant {variant.name} "
            "--json PATH` writes it)"]
    pytest.fail("\n".join(lines), pytrace=False)


def test_every_variant_has_a_complete_row() -> None:
    """Every variant of every contract is catalogued, and the names are unique
    within a contract (the test ids and table rows depend on it)."""
    for c in registry.contracts():
        names = [v.name for v in c.variants]
        assert len(names) == len(set(names)), f"{c.name}: duplicate variant names {names}"
        for v in c.variants:
            assert v.origin in ("shipped", "mutant"), (c.name, v.name, v.origin)
            assert v.description and "\n" not in v.description, (c.name, v.name)
            assert v.caught_by, (c.name, v.name)
    assert {c.name for c, _ in catalogue.variants()} == {c.name for c in registry.contracts() if c.variants}


# ---------------------------------------------------------------- comparison rules


def _contract() -> Contract:
    return registry.get("split_dummy_tokens")


def test_compare_equal_smaller_larger() -> None:
    c = _contract()
    case = Case({"num_reqs": 2, "num_tokens": 3})
    assert catalogue.compare(c, case, {"num_reqs": 2, "num_tokens": 3})[0] == "equal"
    assert catalogue.compare(c, case, {"num_reqs": 3, "num_tokens": 5})[0] == "smaller"
    verdict, detail = catalogue.compare(c, case, {"num_reqs": 2, "num_tokens": 2})
    assert verdict == "larger" and "(2, 3, 0) is larger than the canonical form's size (2, 2, 0)" in detail
    # a partial canonical form constrains only the keys it names
    assert catalogue.compare(c, case, {"num_reqs": 2})[0] == "equal"
    assert catalogue.compare(c, case, None)[0] == "undocumented"
    assert catalogue.compare(c, case, {"num_blocks": 1})[0] == "larger"


def test_same_value_dtype_is_pinned_only_by_numpy_canonical_values() -> None:
    a32 = np.array([0, 1], dtype=np.int32)
    assert catalogue.same_value(a32, [0, 1])
    assert catalogue.same_value(a32, np.array([0, 1], dtype=np.int32))
    assert not catalogue.same_value(a32, np.array([0, 1], dtype=np.int64))
    assert not catalogue.same_value(a32, [0, 1, 2])


def test_dataclasses_compare_field_by_field() -> None:
    c = registry.get("make_dummy")
    small = DummyBuffers.zeros(1, 1, np.int32)
    big = DummyBuffers.zeros(2, 1, np.int32)
    case = Case({"num_reqs": 1, "num_tokens": 1, "buffers": small})
    assert catalogue.compare(c, case, {"num_reqs": 1, "num_tokens": 1, "buffers": DummyBuffers.zeros(1, 1, np.int32)})[0] == "equal"
    assert catalogue.compare(c, case, {"num_reqs": 1, "num_tokens": 1, "buffers": big})[0] == "smaller"
    verdict, _ = catalogue.compare(c, Case({"num_reqs": 1, "num_tokens": 1, "buffers": big}), {"buffers": small})
    assert verdict == "larger"
    stale = DummyBuffers.zeros(1, 1, np.int32)
    stale.positions[:] = 7
    assert catalogue.compare(c, Case({"num_reqs": 1, "num_tokens": 1, "buffers": stale}), {"buffers": small})[0] == "larger"


def test_compact_rendering() -> None:
    assert catalogue.compact(np.zeros(6, dtype=np.int32)) == "[0×6]"
    assert catalogue.compact([1, 2, 2, 2]) == "[1, 2, 2, 2]"
    assert catalogue.compact(((0, 1), (0, 3))) == "((0, 1), (0, 3))"
    long = catalogue.compact(list(range(40)))
    assert long.endswith("(len 40)") and "…" in long


def test_splice_markdown_keeps_the_surrounding_text() -> None:
    table = f"{catalogue.BEGIN_MARKER}\nNEW\n{catalogue.END_MARKER}\n"
    doc = f"intro\n\n{catalogue.BEGIN_MARKER}\nOLD\n{catalogue.END_MARKER}\n\noutro\n"
    out = catalogue.splice_markdown(doc, table)
    assert out.startswith("intro\n") and out.endswith("\n\noutro\n") and "NEW" in out and "OLD" not in out
    assert catalogue.splice_markdown(None, table) == table
    # markers quoted in prose before the real block do not confuse it
    quoted = f"see `{catalogue.END_MARKER}`\n\n" + doc
    assert catalogue.splice_markdown(quoted, table) == f"see `{catalogue.END_MARKER}`\n\n" + out
    with pytest.raises(ValueError, match="no catalogue markers"):
        catalogue.splice_markdown("a README without markers\n", table)


# ---------------------------------------------------------------- the command


def test_catalogue_command_writes_markdown_and_json(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    md, js = tmp_path / "cat.md", tmp_path / "cat.json"
    md.write_text(f"# Title\n\n{catalogue.BEGIN_MARKER}\n{catalogue.END_MARKER}\n\nafter\n")
    rc = main(["catalogue", "--contract", "A", "--variant", "remainder_to_first", "--variant", "drop_remainder",
               "--markdown", str(md), "--json", str(js)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "2/2 variants caught" in out
    text = md.read_text()
    assert text.startswith("# Title\n") and text.endswith("after\n")
    assert "| `remainder_to_first` | mutant |" in text and "`num_reqs=2, num_tokens=3`" in text
    report = json.loads(js.read_text())
    assert report["ok"] == 2 and report["max_examples"] == catalogue.MAX_EXAMPLES
    row = report["entries"][0]
    assert row["variant"] == "remainder_to_first" and row["verdict"] == "equal"
    assert row["case"]["args"] == {"num_reqs": 2, "num_tokens": 3}
    assert row["examples_to_find"] >= 1 and row["seconds"] >= row["seconds_to_find"]


def test_catalogue_command_fails_on_a_wrong_canonical_form(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """Exit 1 when a shrunk case is larger than the documented one."""
    import dataclasses

    c = registry.get("split_dummy_tokens")
    wrong = tuple(dataclasses.replace(v, canonical={"num_reqs": 1, "num_tokens": 1}) if v.name == "drop_remainder" else v
                  for v in c.variants)
    monkeypatch.setitem(registry._CONTRACTS, c.name, dataclasses.replace(c, variants=wrong))
    rc = main(["catalogue", "--contract", c.name, "--variant", "drop_remainder", "--primary-only"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "BAD" in out and "larger" in out


def test_catalogue_command_usage_errors(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["catalogue", "--contract", "no_such_contract"]) == 2
    assert main(["catalogue", "--contract", "A", "--variant", "no_such_variant"]) == 2
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    assert main(["catalogue", "--contract", "A", "--variant", "drop_remainder", "--markdown", str(readme)]) == 2
    assert readme.read_text() == "no markers here\n"
    backwards = f"{catalogue.END_MARKER}\n{catalogue.BEGIN_MARKER}\n"  # an end marker only before the begin marker
    readme.write_text(backwards)
    assert main(["catalogue", "--contract", "A", "--variant", "drop_remainder", "--markdown", str(readme)]) == 2
    assert readme.read_text() == backwards
    assert "no catalogue markers" in capsys.readouterr().err
