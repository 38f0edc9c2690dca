"""The registry of contracts (``batchfuzz.registry``). Contract names given
by users are checked in one place, ``registry.select`` (``registry.get`` for
one name): names, section letters and, where a command takes them, globs;
every pattern that selects nothing is named, with the known contracts, in
one message. Every record is complete (implementations, properties, error
inputs, five mutants, known property names, a default and a ``ci`` scope)
and takes its inputs from its strategies module, one way."""

from __future__ import annotations

import importlib

import pytest

from batchfuzz import catalogue, plugins, registry
from batchfuzz.contracts import split_ubatches as split_ubatches_record
from batchfuzz.strategies import split_ubatches as split_ubatches_strategies


def test_select_names_letters_and_globs() -> None:
    every = registry.contracts()
    assert registry.select(None) == every
    first = every[0]
    assert registry.select([first.name]) == [first]
    assert registry.select([first.section]) == [c for c in every if c.section == first.section]
    assert registry.select(["split_*"], globs=True) == [c for c in every if c.name.startswith("split_")]
    with pytest.raises(registry.UnknownName, match=r"^unknown contract 'split_\*'; known: "):
        registry.select(["split_*"])  # a glob only where the caller takes globs


def test_every_unknown_pattern_is_named_once_in_one_message() -> None:
    known = ", ".join(sorted(c.name for c in registry.contracts()))
    with pytest.raises(registry.UnknownName) as info:
        registry.select(["nope", registry.contracts()[0].name, "zz*"], globs=True)
    assert str(info.value) == f"unknown contracts 'nope', 'zz*'; known: {known}"
    with pytest.raises(registry.UnknownName) as one:
        registry.get("nope")
    assert str(one.value) == f"unknown contract 'nope'; known: {known}"
    with pytest.raises(LookupError, match=r"^unknown contract 'nope'; known: "):
        catalogue.variants(["nope"])


def test_registry_is_complete() -> None:
    for c in registry.contracts():
        assert c.implementations, c.name
        assert c.properties, c.name
        assert c.error_inputs, c.name
        assert len([v for v in c.variants if v.origin == "mutant"]) >= 5, c.name
        for v in c.variants:
            for name in v.caught_by:
                c.property(name)  # raises on a typo


def test_every_record_takes_its_strategies_module_once() -> None:
    for contract in registry.contracts():
        assert contract.inputs is not None, contract.name
        strategies = importlib.import_module(contract.inputs.module)
        assert plugins.check_strategies(strategies) == bool(contract.scopes)
        assert contract.size is strategies.size and contract.reductions is strategies.reductions
        assert [d.name for d in contract.domains] == [d.name for d in contract.inputs.domains]


def test_a_record_gives_its_inputs_one_way() -> None:
    record = split_ubatches_record.CONTRACT
    fields = {f: getattr(record, f) for f in ("name", "title", "section", "signature", "arguments", "oracle", "implementations",
                                             "properties", "error_inputs", "variants")}
    with pytest.raises(registry.RecordError, match=r"gives inputs= and size: give them through inputs="):
        registry.Contract(**fields, inputs=registry.input_space(split_ubatches_strategies, {"spec": "s"}),
                          size=lambda case: ())  # a second source that disagrees with the strategies module's
    with pytest.raises(registry.RecordError, match=r"domains must start with 'spec'"):
        registry.Contract(**fields)  # neither inputs= nor domains=


@pytest.mark.parametrize("name", [c.name for c in registry.contracts()])
def test_every_contract_has_a_default_and_a_ci_scope(name: str) -> None:
    names = [s.name for s in registry.get(name).scopes]
    assert registry.DEFAULT_SCOPE in names and "ci" in names
