"""Bind an engine's own code to a batchfuzz contract, from its source text.

An engine's batch-layout logic lives in methods of heavy classes whose
modules import GPU kernels and distributed runtimes: the binding layer cuts
that code out of the source text (``ast``) and runs it unchanged among small
stand-ins, so it is fuzzed on a machine that has none of them. This module is
the public face of ``batchfuzz.binding`` (source, slicing, loader, kit,
errors); docs/bindings.md explains each step and binds an example. ``Scope``
is a deprecated alias of ``Loader``.
"""

from __future__ import annotations

import warnings
from typing import Any

from batchfuzz.binding.errors import Absent, StandInReached, Unbindable
from batchfuzz.binding.kit import (
    Call,
    Record,
    Recorder,
    Stub,
    block_table,
    cast_exact,
    count,
    cpu_gpu_buffer,
    int_array,
    probe,
    probes_reported,
    raised_in_engine,
    slice_pairs,
    table,
    to_numpy,
    tuple_part,
    unreachable,
)
from batchfuzz.binding.loader import Loader
from batchfuzz.binding.slicing import Writes
from batchfuzz.binding.source import Piece, SourceFile, SourceTree, TextTree

__all__ = [
    "Absent", "Call", "Loader", "Piece", "Record", "Recorder", "SourceFile", "SourceTree", "StandInReached", "Stub",
    "TextTree", "Unbindable", "Writes", "block_table", "cast_exact", "count", "cpu_gpu_buffer", "int_array", "probe",
    "probes_reported", "raised_in_engine", "slice_pairs", "table", "to_numpy", "tuple_part", "unreachable",
]


def __getattr__(name: str) -> Any:
    if name == "Scope":
        warnings.warn("batchfuzz.bind.Scope is now batchfuzz.bind.Loader (Scope means a registry.Scope)",
                      DeprecationWarning, stacklevel=2)
        return Loader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
