"""Contract names given by users are checked in one place, ``registry.select``
(``registry.get`` for one name): names, section letters and, where a command
takes them, globs; every pattern that selects nothing is named, with the
known contracts, in one message."""

from __future__ import annotations

import pytest

from batchfuzz import catalogue, registry


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
