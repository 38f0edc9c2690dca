"""Strategies for contract E1, the conflict set (docs/contracts.md, contract E).

Domains:

- ``spec``: general steps (well-formed, and raw ones that no scheduler makes:
  a block id repeated inside a row, a slot written twice; the conflict set is
  well defined on any step) and realizable steps;
- ``engine``: realizable steps only, the steps a prefix-caching scheduler
  produces (``batchfuzz.scheduler_model``).

Cases carry the splits the properties simulate (``_steps`` says which).
Shrinks as ``_steps`` says: fewer requests and groups, block size 1, small
counts, null cells.
"""

from __future__ import annotations

from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.reference._step import STEP_ARGUMENTS, check_step, is_well_formed
from batchfuzz.strategies._steps import step_cases, step_reductions, step_size
from batchfuzz.strategies._validate import check_choice

DOMAINS = ("spec", "engine")


def cases(domain: str = "spec") -> st.SearchStrategy[Case]:
    """Contract E1 cases of ``domain``."""
    check_choice("domain", domain, DOMAINS)
    return step_cases(raw=True, realizable_only=domain == "engine")


def in_domain(case: Case, domain: str) -> bool:
    """A valid step; in the engine domain also a well-formed one (realizable
    steps are well-formed; well-formedness is the part of realizability a
    predicate can check)."""
    try:
        step = check_step(*(case.args[k] for k in STEP_ARGUMENTS))
    except (TypeError, ValueError, KeyError):
        return False
    return domain != "engine" or is_well_formed(step)


size = step_size
reductions = step_reductions
