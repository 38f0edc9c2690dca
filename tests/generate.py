"""Parameter lists generated from the registry (contract x implementation x device x property)."""

from __future__ import annotations

from typing import Any

import pytest

from batchfuzz import registry


def _device_marks(device: str) -> list[Any]:
    return [pytest.mark.gpu] if device == "cuda" else []


def impl_params(with_properties: bool = True) -> list[Any]:
    out = []
    for c in registry.contracts():
        for impl in c.implementations:
            for device in impl.devices:
                if with_properties:
                    for p in c.properties:
                        out.append(pytest.param(c, impl, device, p, id=f"{c.name}-{impl.name}-{device}-{p.name}",
                                                marks=_device_marks(device)))
                else:
                    out.append(pytest.param(c, impl, device, id=f"{c.name}-{impl.name}-{device}", marks=_device_marks(device)))
    return out


def oracle_params() -> list[Any]:
    return [pytest.param(c, p, id=f"{c.name}-{p.name}") for c in registry.contracts() for p in c.properties]


def variant_params() -> list[Any]:
    return [pytest.param(c, v, id=f"{c.name}-{v.name}") for c in registry.contracts() for v in c.variants]


def error_params() -> list[Any]:
    out = []
    for c in registry.contracts():
        targets = [("oracle", "cpu", c.oracle)] + [(i.name, d, i) for i in c.implementations for d in i.devices]
        for name, device, t in targets:
            for k, e in enumerate(c.error_inputs):
                out.append(pytest.param(c, t, device, e, id=f"{c.name}-{name}-{device}-{k}", marks=_device_marks(device)))
    return out
