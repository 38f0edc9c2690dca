"""JSON encoding and Python literals for cases (corpus files, reproductions).

Decoding never executes code: it only understands ints, strings, lists,
dicts, numpy integer arrays and the dataclasses registered here by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from batchfuzz._host import to_host
from batchfuzz.case import Case

_DATACLASSES: dict[str, type] = {}
_DATACLASS_MODULE: dict[str, str] = {}


class CodecError(ValueError):
    """A JSON value that does not decode to a case."""


def register_dataclass(cls: type) -> type:
    """Allow ``cls`` (a dataclass of encodable fields) in cases."""
    _DATACLASSES[cls.__name__] = cls
    _DATACLASS_MODULE[cls.__name__] = cls.__module__
    return cls


def encode(value: Any) -> Any:
    value = to_host(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray):
        return {"ndarray": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and type(value).__name__ in _DATACLASSES:
        return {
            "dataclass": type(value).__name__,
            "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    raise CodecError(f"cannot encode a value of type {type(value).__name__}: {value!r}")


_ALLOWED_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "bool"}


def decode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"ndarray", "dtype"}:
            if value["dtype"] not in _ALLOWED_DTYPES:
                raise CodecError(f"unsupported array dtype {value['dtype']!r}")
            return np.array(value["ndarray"], dtype=value["dtype"])
        if set(value) == {"tuple"}:
            return tuple(decode(v) for v in value["tuple"])
        if set(value) == {"dict"}:
            return {decode(k): decode(v) for k, v in value["dict"]}
        if set(value) == {"dataclass", "fields"}:
            name = value["dataclass"]
            if name not in _DATACLASSES:
                raise CodecError(f"unknown dataclass {name!r} (known: {sorted(_DATACLASSES)})")
            return _DATACLASSES[name](**{k: decode(v) for k, v in value["fields"].items()})
    raise CodecError(f"cannot decode {value!r}")


def encode_case(case: Case) -> dict[str, Any]:
    return {
        "args": {k: encode(v) for k, v in case.args.items()},
        "context": {k: encode(v) for k, v in case.context.items()},
    }


def decode_case(data: Any) -> Case:
    if not isinstance(data, dict) or not isinstance(data.get("args"), dict):
        raise CodecError("a case must be an object with an 'args' object")
    context = data.get("context", {})
    if not isinstance(context, dict):
        raise CodecError("a case's 'context' must be an object")
    return Case(
        args={k: decode(v) for k, v in data["args"].items()},
        context={k: decode(v) for k, v in context.items()},
    )


def literal(value: Any, imports: set[str] | None = None) -> str:
    """Python source that rebuilds ``value``; records needed imports."""
    imports = imports if imports is not None else set()
    value = to_host(value)
    if isinstance(value, np.ndarray):
        imports.add("import numpy as np")
        return f"np.array({value.tolist()!r}, dtype=np.{value.dtype})"
    if isinstance(value, np.integer):
        return repr(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(literal(v, imports) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(literal(v, imports) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k, imports)}: {literal(v, imports)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        imports.add(f"from {type(value).__module__} import {name}")
        inner = ", ".join(f"{f.name}={literal(getattr(value, f.name), imports)}" for f in dataclasses.fields(value))
        return f"{name}({inner})"
    return repr(value)


def call_literal(function_name: str, case: Case, imports: set[str] | None = None) -> str:
    """``f(arg, ...)``: positional in canonical order, each named in a comment
    when the call spans lines."""
    imports = imports if imports is not None else set()
    parts = [(k, literal(v, imports)) for k, v in case.args.items()]
    one_line = f"{function_name}(" + ", ".join(v for _, v in parts) + ")"
    if len(one_line) <= 100:
        return one_line + "  # " + ", ".join(k for k, _ in parts)
    body = "".join(f"\n    {v},  # {k}" for k, v in parts)
    return f"{function_name}({body}\n)"
