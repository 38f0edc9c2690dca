"""The binding author's kit: stand-ins for the engine objects a cut-out
reads, converters from the engine's results, checks of a contract's
arguments (in the vocabulary of ``batchfuzz.reference._args``) and the
bind-time dry run ``probe``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import MethodType, SimpleNamespace
from typing import Any

import numpy as np

from batchfuzz.binding.errors import StandInReached, Unbindable
from batchfuzz.reference._args import check_count_array, check_int
from batchfuzz.reference._step import check_table

# ---------------------------------------------------------------- stand-ins for engine objects


class Stub(SimpleNamespace):
    """An engine object made of exactly the attributes a binding gives it.

    Functions passed in ``methods`` become its methods (bound to it, as a
    class would bind them), so a cut-out method can call a sibling cut-out
    method or a ``Recorder``. Reading an attribute it was not given raises an
    AttributeError naming the object and the attribute.
    """

    def __init__(self, _name: str = "stub", methods: Mapping[str, Callable[..., Any]] | None = None, **attrs: Any) -> None:
        super().__init__(**attrs)
        object.__setattr__(self, "_name", _name)
        for key, fn in (methods or {}).items():
            object.__setattr__(self, key, MethodType(fn, self))

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise AttributeError(f"{object.__getattribute__(self, '_name')} has no attribute {attr!r}: the binding does not provide it")

    def __repr__(self) -> str:
        keys = ", ".join(k for k in vars(self) if not k.startswith("_"))
        return f"Stub({object.__getattribute__(self, '_name')}: {keys})"


@dataclass
class Call:
    """One recorded call: positional and keyword arguments."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def arg(self, position: int, name: str) -> Any:
        """The argument passed at ``position`` or as ``name``."""
        if name in self.kwargs:
            return self.kwargs[name]
        if position < len(self.args):
            return self.args[position]
        raise KeyError(f"the call passed neither argument {position} nor {name}= (args {len(self.args)}, kwargs {sorted(self.kwargs)})")


@dataclass
class Recorder:
    """A stand-in callable that records every call and returns ``returns``
    (a context manager that does nothing, by default, so it also serves
    ``with recorder(...):``)."""

    name: str = "recorder"
    returns: Any = field(default_factory=contextlib.nullcontext)
    calls: list[Call] = field(default_factory=list)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(Call(args, kwargs))
        return self.returns

    @property
    def last(self) -> Call:
        if not self.calls:
            raise LookupError(f"{self.name} was never called")
        return self.calls[-1]


class Record(SimpleNamespace):
    """A stand-in for an engine result type built with keyword arguments
    (``cls(field=..., ...)``, a dataclass constructor): keeps them as
    attributes. As a class it can stand for ``cls`` in a classmethod."""


def unreachable(name: str) -> Callable[..., Any]:
    """A stand-in for a name the binding claims the bound code never uses on
    its inputs: calling it raises StandInReached naming it."""

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise StandInReached(f"{name} was reached, but the binding declared it unreachable")

    reached.__name__ = name
    return reached


def cpu_gpu_buffer(array: np.ndarray) -> Stub:
    """A host/device buffer pair over ``array``, as engines keep them:
    ``.np`` is ``array`` itself (writes land in the caller's array), ``.cpu``
    a torch view of it, ``.gpu`` a separate torch CPU tensor standing in for
    the device copy, refreshed by ``copy_to_gpu(n=None)``."""
    import torch

    if not isinstance(array, np.ndarray):
        raise TypeError(f"array must be a numpy array, got {type(array).__name__}")
    cpu = torch.from_numpy(array)
    gpu = cpu.clone()

    def copy_to_gpu(self: Stub, n: int | None = None) -> Any:
        if n is None:
            self.gpu.copy_(self.cpu)
            return self.gpu
        self.gpu[:n].copy_(self.cpu[:n])
        return self.gpu[:n]

    def copy_to_cpu(self: Stub, n: int | None = None) -> Any:
        if n is None:
            self.cpu.copy_(self.gpu)
            return self.cpu
        self.cpu[:n].copy_(self.gpu[:n])
        return self.cpu[:n]

    return Stub("cpu_gpu_buffer", np=array, cpu=cpu, gpu=gpu, methods={"copy_to_gpu": copy_to_gpu, "copy_to_cpu": copy_to_cpu})


def block_table(block_size: int, table: np.ndarray) -> Stub:
    """One KV-cache group's block table: ``block_size``, the table as a
    host/device buffer (``.block_table``), and the accessors engines read it
    through (``get_numpy_array()``, ``get_cpu_tensor()``,
    ``get_device_tensor(num_reqs)``)."""
    if not isinstance(block_size, int | np.integer) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
    if not isinstance(table, np.ndarray) or table.ndim != 2:
        raise ValueError(f"table must be a 2-D numpy array, got {type(table).__name__} {getattr(table, 'shape', '')}")
    buf = cpu_gpu_buffer(table)
    return Stub("block_table", block_size=int(block_size), block_table=buf, methods={
        "get_numpy_array": lambda self: self.block_table.np,
        "get_cpu_tensor": lambda self: self.block_table.cpu,
        "get_device_tensor": lambda self, num_reqs=None: self.block_table.gpu if num_reqs is None else self.block_table.gpu[:num_reqs],
    })


# ---------------------------------------------------------------- converters for engine results


def to_numpy(value: Any) -> np.ndarray:
    """A tensor on any device, a numpy array or a sequence, as a numpy array."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return np.asarray(value.detach().cpu().numpy())
    return np.asarray(value)


def slice_pairs(slices: Sequence[Any] | None, request: str = "request_slice", token: str = "token_slice"
                ) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """Engine slice objects (attributes holding Python slices) as
    ``[((rs, re), (ts, te)), ...]``; None stays None."""
    if slices is None:
        return None
    out = []
    for k, s in enumerate(slices):
        r, t = getattr(s, request, None), getattr(s, token, None)
        if not isinstance(r, slice) or not isinstance(t, slice):
            raise TypeError(f"slice object {k} ({type(s).__name__}) has no Python slices .{request} and .{token}")
        out.append(((int(r.start), int(r.stop)), (int(t.start), int(t.stop))))
    return out


def tuple_part(result: Any, index: int, size: int | None = None) -> Any:
    """Part ``index`` of a tuple result (checking its length when ``size`` is given)."""
    if not isinstance(result, tuple):
        raise TypeError(f"expected a tuple result, got {type(result).__name__}")
    if size is not None and len(result) != size:
        raise TypeError(f"expected a tuple of {size}, got one of {len(result)}")
    return result[index]


# ---------------------------------------------------------------- contract arguments


def count(name: str, value: Any, minimum: int = 0) -> int:
    """A contract's count argument as an int, or a TypeError/ValueError naming
    it and the value (``reference._args.check_int``)."""
    return check_int(name, value, minimum=minimum)


def int_array(name: str, value: Any, minimum: int | None = 0) -> np.ndarray:
    """A contract's 1-D integer array argument (a numpy int32/int64 array or a
    list of ints), or a TypeError/ValueError naming it and the bad value
    (``reference._args.check_count_array``); ``minimum=None`` for a buffer
    whose entries may be anything (stale contents)."""
    return check_count_array(name, value, minimum=minimum)


def table(name: str, value: Any, num_rows: int) -> np.ndarray:
    """A contract's 2-D table argument (a block table: one row per request,
    block ids >= 0) as int64, or a TypeError/ValueError naming it and the bad
    value (``reference._step.check_table``)."""
    return check_table(name, value, num_rows)


def cast_exact(name: str, value: np.ndarray, dtype: Any) -> np.ndarray:
    """``value`` as ``dtype`` (an engine buffer's dtype), or a ValueError
    naming it when a value does not fit (a cast must never change a value)."""
    dt = np.dtype(dtype)
    if value.size and dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = int(value.min()), int(value.max())
        if lo < info.min or hi > info.max:
            raise ValueError(f"{name} holds {lo if lo < info.min else hi}, which the engine's {dt} buffer cannot hold")
    return value.astype(dt)


# ---------------------------------------------------------------- bind-time dry run


_BINDING_ERRORS = (NameError, AttributeError, TypeError, ImportError, StandInReached, KeyError, LookupError)
# Raised on an engine line, these still say the binding does not fit: a name
# no stand-in provides, an attribute a stand-in (or an argument of the wrong
# kind) lacks, a call whose arguments do not match, an import.
_MISFITS = (NameError, AttributeError, TypeError, ImportError, StandInReached)
ENGINE_FILENAME_PREFIX = "<source "  # the file name cut-out code is compiled under (binding.source.SourceFile)
_HARNESS_DIR = str(Path(__file__).resolve().parents[1])  # batchfuzz's own code: adapters and stand-ins


# An index of the wrong rank says the engine expects another shape than the binding gave (a layout that does not
# fit); an index of the right rank out of range is the engine's own (an off-by-one).
_RANK_MISMATCH = ("too many indices", "dimension")


def raised_in_engine(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by the engine's own lines: the innermost
    frame that is engine or batchfuzz code is an engine line (numpy and
    torch frames below it count as the engine's call), and the exception is
    not one that says a stand-in or an argument does not fit (``_MISFITS``,
    or an ``IndexError`` of an index of the wrong rank: ``_RANK_MISMATCH``)."""
    if isinstance(exc, _MISFITS):
        return False
    if isinstance(exc, IndexError) and any(m in str(exc) for m in _RANK_MISMATCH):
        return False
    tb, last = exc.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.startswith((ENGINE_FILENAME_PREFIX, _HARNESS_DIR)):
            last = name
        tb = tb.tb_next
    return last is not None and last.startswith(ENGINE_FILENAME_PREFIX)


_PROBE_LISTENER: ContextVar[Callable[[tuple[Any, ...]], None] | None] = ContextVar("batchfuzz_probe_listener", default=None)


@contextlib.contextmanager
def probes_reported(listener: Callable[[tuple[Any, ...]], None]) -> Iterator[None]:
    """Within the block, every ``probe`` first calls ``listener(args)``: a
    process binding a release tells its parent that the engine's code is
    about to run, on which input (``batchfuzz.engines._binder``)."""
    token = _PROBE_LISTENER.set(listener)
    try:
        yield
    finally:
        _PROBE_LISTENER.reset(token)


def probe(target: Callable[..., Any], *args: Any, what: str = "the target") -> str:
    """Call ``target(*args)`` once on a small valid input. A changed
    signature, a name or attribute the stand-ins lack, or a stand-in declared
    unreachable shows here and raises Unbindable naming it. Any other outcome
    is the engine's behaviour, left to the properties to judge: returns ""
    for an answer, or ``"TYPE: message"`` of an exception the engine's own
    lines raised (``raised_in_engine``; an IndexError of an off-by-one is the
    engine's bug, not a misfit), which the matrix checks as a counterexample."""
    listener = _PROBE_LISTENER.get()
    if listener is not None:
        listener(args)
    try:
        target(*args)
    except Exception as exc:
        if raised_in_engine(exc):
            text = f"{type(exc).__name__}: {exc}"
            return text if len(text) <= 300 else text[:300] + "..."
        if isinstance(exc, _BINDING_ERRORS):
            raise Unbindable(f"dry run of {what} failed: {type(exc).__name__}: {exc}") from exc
    return ""
