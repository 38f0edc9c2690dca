"""The interface of where a target runs: :class:`Executor`."""

from __future__ import annotations

from typing import Any

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.execution.outcome import Outcome


class Executor:
    """Where a target runs. ``check`` evaluates one property on one case
    within ``timeout_s`` (``evaluate``); ``describe`` says what the target
    declares (its domain), or why it cannot be used, before any case runs.
    ``submit`` then ``collect`` is ``check`` in two halves: exactly one
    ``collect`` follows each ``submit``, nothing between them. ``overlaps``:
    the target runs between the two (in another process), so the caller's
    work overlaps it (docs/fuzz-loop.md, "Overlap"). ``keeps_cases``: a case
    given to ``check`` is never changed, so a caller need not copy it."""

    contract: registry.Contract
    name: str
    keeps_cases: bool = False
    overlaps: bool = False

    def describe(self) -> dict[str, Any]:
        raise NotImplementedError

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None, *, scores: bool = False) -> Outcome:
        raise NotImplementedError

    def submit(self, prop_name: str, case: Case, *, scores: bool = False) -> None:
        self._submitted = (prop_name, case, scores)

    def collect(self, timeout_s: float | None = None) -> Outcome:
        prop_name, case, scores = self._submitted
        del self._submitted
        return self.check(prop_name, case, timeout_s, scores=scores)

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
