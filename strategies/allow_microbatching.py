"""Strategies for contract E2, the split-agnostic decision (docs/contracts.md, contract E).

Domains:

- ``spec``: well-formed general steps and realizable steps. Ill-formed steps
  (a request reading a slot it writes itself, a slot written twice; no
  engine produces them) are left out: there the simulation reports
  violations that the contract's conflicts do not explain, and a target
  built on the definitions would be blamed for inputs outside the domain
  where they mean what they say (docs/contracts.md);
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
    """Contract E2 cases of ``domain``."""
    check_choice("domain", domain, DOMAINS)
    return step_cases(raw=False, realizable_only=domain == "engine")


def in_domain(case: Case, domain: str) -> bool:
    """A valid, well-formed step (realizable steps are well-formed;
    well-formedness is the part of realizability a predicate can check)."""
    try:
        step = check_step(*(case.args[k] for k in STEP_ARGUMENTS))
    except (TypeError, ValueError, KeyError):
        return False
    return is_well_formed(step)


size = step_size
reductions = step_reductions
