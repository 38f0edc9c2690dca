"""Bind an engine's own code to a batchfuzz contract, from its source text.

An engine's batch-layout logic lives in methods of heavy classes (a model
runner, an input batch) whose modules import GPU kernels, distributed
runtimes and configuration systems. To fuzz that logic on a machine that has
none of them, the binding layer cuts the code out of the source *text* with
``ast`` and runs it unchanged in a namespace of small stand-ins. This module
is its public face; the work is done in the ``batchfuzz.binding`` package,
one job a module:

- source access (``batchfuzz.binding.source``): ``SourceFile.piece(qualname)``
  cuts out a function, a method (``Class.method``; classmethods and
  staticmethods too) or a class; ``SourceFile.fragment(qualname,
  Writes(...), given=...)`` cuts out the statements of a method that do one
  job (those that write a target, with the earlier statements of the method
  they depend on: ``batchfuzz.binding.slicing``);
- namespace resolution and compiling (``batchfuzz.binding.loader``):
  ``Loader.load(piece)`` resolves every global name the cut-out reads (a
  binding's stand-in, a definition of the same source tree, an allowed real
  module such as numpy, or a builtin) and returns the callable; a name none
  of these provides makes the piece ``Unbindable``, with the names and lines
  in the reason; a function the source does not have raises ``Absent``;
- the binding author's kit (``batchfuzz.binding.kit``): stand-ins for the
  engine objects a method reads (``Stub``, ``Recorder``, ``Record``,
  ``cpu_gpu_buffer``, ``block_table``, ``unreachable``), converters from
  engine results (``to_numpy``, ``slice_pairs``, ``tuple_part``), checks of a
  contract's arguments in the vocabulary of ``batchfuzz.reference._args``
  (``count``, ``int_array``, ``table``, ``cast_exact``), and ``probe``, which
  dry-runs an adapted target once, so that a changed signature or a missing
  attribute surfaces at bind time as ``Unbindable`` rather than as a fuzzing
  failure.

Nothing here knows a particular engine; docs/bindings.md binds a method of a
small engine-shaped class step by step. ``Scope`` is the old name of
``Loader`` (it clashed with ``batchfuzz.registry.Scope``), kept as a
deprecated alias.
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
