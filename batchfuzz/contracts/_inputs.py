"""The property every contract with a read-only mutable argument has: the
target leaves its inputs as they were.

Every other property already judges a target's result against the case as
it was before the call (``batchfuzz.execution.guarded`` hands the target
copies), so a target that scribbles on its inputs cannot pass by making the
oracle's view agree with its answer; this property reports the scribbling
itself, naming the argument. Arguments the contract lets the target write
(a persistent buffer, an ``out=``) are exempt. Contracts A and B have no such
property: A's arguments are ints, and B's only mutable argument is the
buffers it must fill.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchfuzz.case import Case, copy_value
from batchfuzz.checks import PropertyViolation
from batchfuzz.codec import encode
from batchfuzz.registry import SAFETY, Property, Target


def _difference(before: Any, after: Any, where: str) -> str | None:
    """Where ``after`` first differs from ``before`` (arrays, lists, scalars), or None."""
    if isinstance(before, np.ndarray) and isinstance(after, np.ndarray):
        if before.shape != after.shape or before.dtype != after.dtype:
            return f"{where} was an array of shape {before.shape} and dtype {before.dtype}, is {after.shape} {after.dtype}"
        diff = np.argwhere(before != after)
        if diff.size:
            i = tuple(int(x) for x in diff[0])
            return f"{where}[{', '.join(map(str, i))}] was {before[i].item()!r}, is {after[i].item()!r}"
        return None
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)):
        if len(before) != len(after):
            return f"{where} had {len(before)} entries, has {len(after)}"
        for k, (b, a) in enumerate(zip(before, after, strict=True)):
            found = _difference(b, a, f"{where}[{k}]")
            if found:
                return found
        return None
    return None if encode(before) == encode(after) else f"{where} was {before!r}, is {after!r}"


def inputs_unchanged(arguments: tuple[str, ...], writes: tuple[str, ...] = ()) -> Property:
    """The property for a contract whose canonical ``arguments`` the target
    may read but not write (but ``writes``)."""

    def check(target: Target, case: Case) -> None:
        passed = {k: copy_value(case.args[k]) for k in arguments}
        target(*(passed[k] for k in arguments))
        for k in arguments:
            if k in writes:
                continue
            found = _difference(case.args[k], passed[k], k)
            if found:
                raise PropertyViolation(f"the target changed its argument {k}: {found}")

    exempt = f" (but {', '.join(writes)})" if writes else ""
    return Property("inputs_unchanged", f"the target leaves its arguments{exempt} as they were", check, raw=True, label=SAFETY)
