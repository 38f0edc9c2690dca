"""Strategies for contract E2, the split-agnostic decision (docs/contracts.md, contract E).

Domains: ``spec``, well-formed general steps and realizable steps (ill-formed
steps, which no engine produces, are left out: there the simulation reports
violations that the contract's conflicts do not explain, docs/contracts.md);
``engine``, realizable steps only (``batchfuzz.scheduler_model``). Cases
carry the splits the properties simulate, and shrink as ``_steps`` says.
"""

from __future__ import annotations

import functools

from batchfuzz.strategies._steps import (
    DOMAINS,
    STEP_SOURCE_DOMAINS,
    contract_cases,
    contract_in_domain,
    scope_specs,
    step_reductions,
    step_size,
)
from batchfuzz.strategies._steps import scope_cases as _scope_cases

__all__ = ["DOMAINS", "SCOPES", "STEP_SOURCE_DOMAINS", "cases", "in_domain", "reductions", "scope_cases", "size"]

cases = functools.partial(contract_cases, ill_formed=False)
in_domain = functools.partial(contract_in_domain, ill_formed=False)
size = step_size
reductions = step_reductions
SCOPES = scope_specs(ill_formed=False)
scope_cases = functools.partial(_scope_cases, ill_formed=False)
