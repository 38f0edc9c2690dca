"""Strategies for contract E1, the conflict set (docs/contracts.md, contract E).

Domains: ``spec``, general steps (well-formed, and raw ones that no scheduler
makes: a block id repeated inside a row, a slot written twice; the conflict
set is well defined on any step) and realizable steps; ``engine``,
realizable steps only, the steps a prefix-caching scheduler produces
(``batchfuzz.scheduler_model``). Cases carry the splits the properties
simulate, and shrink as ``_steps`` says: fewer requests and groups, block
size 1, small counts, null cells.
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

cases = functools.partial(contract_cases, ill_formed=True)
in_domain = functools.partial(contract_in_domain, ill_formed=True)
size = step_size
reductions = step_reductions
SCOPES = scope_specs(ill_formed=True)
scope_cases = functools.partial(_scope_cases, ill_formed=True)
