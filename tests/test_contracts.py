"""Tests generated from the registry: oracle and implementations against every
property, error inputs, and known buggy variants. No contract is named here:
adding a contract to the registry adds its tests."""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

from batchfuzz import reproduce, runner
from batchfuzz.registry import Contract, ErrorInput, Implementation, Property
from tests.generate import error_params, impl_params, oracle_params

# Generation without the shrink phase: finding a failure is what a "can fail" test asks.
_FIND_ONLY = (Phase.explicit, Phase.reuse, Phase.generate)


def _fail_with(result: runner.HuntResult) -> None:
    f = result.failure
    assert f is not None
    pytest.fail(
        f"{f.contract}/{f.target}: property {f.property} failed ({f.error_type}): {f.message}\n"
        f"--- reproduction ---\n{reproduce.reproduction(f)}",
        pytrace=False,
    )


@pytest.mark.parametrize(("contract", "prop"), oracle_params())
def test_oracle_satisfies(contract: Contract, prop: Property) -> None:
    r = runner.hunt(contract, contract.oracle, prop, runner.HuntOptions(settings(), extra_examples=contract.examples),
                    target_name="oracle")
    if r.failure:
        _fail_with(r)
    assert r.examples > 0


@pytest.mark.parametrize(("contract", "impl", "device", "prop"), impl_params())
def test_implementation_satisfies(contract: Contract, impl: Implementation, device: str, prop: Property) -> None:
    r = runner.hunt(contract, impl.for_device(device), prop, runner.HuntOptions(settings(), extra_examples=contract.examples),
                    target_name=f"impl:{impl.name}@{device}")
    if r.failure:
        _fail_with(r)
    assert r.examples > 0


@pytest.mark.parametrize(("contract", "target", "device", "error_input"), error_params())
def test_error_inputs(contract: Contract, target: object, device: str, error_input: ErrorInput) -> None:
    fn = target.for_device(device) if isinstance(target, Implementation) else target
    assert callable(fn)
    with pytest.raises(error_input.error, match=error_input.match):
        fn(*error_input.args.values())


@pytest.mark.parametrize(("contract", "prop"), oracle_params())
def test_every_property_can_fail(contract: Contract, prop: Property) -> None:
    """A property that no registered variant breaks is a defect. (Each variant's
    own search, shrunk case and canonical form are tested by the catalogue, so this
    test does not shrink: it asks only whether a failing example is found, the
    contract's explicit examples first as in the tests above; how soon the
    search alone finds each variant is the catalogue's test.)"""
    killers = [v for v in contract.variants if prop.name in v.caught_by]
    assert killers, f"no registered variant of {contract.name} claims to break {prop.name}"
    for v in killers:
        r = runner.hunt(contract, v.fn, prop,
                        runner.HuntOptions(settings(settings(), max_examples=max(settings().max_examples, 200), phases=_FIND_ONLY),
                                           extra_examples=contract.examples),
                        target_name=f"variant:{v.name}")
        if r.failure is not None:
            return
    pytest.fail(f"{prop.name} caught none of {[v.name for v in killers]}")
