"""What a target is called, and how it is loaded: one naming scheme for the
whole code base (the CLI, reports, the corpus, worker processes).

A reference is ``impl:NAME@DEVICE`` (a registered implementation on ``cpu``
or ``cuda``), ``variant:NAME`` (a registered buggy variant), ``oracle``,
``engine:REF`` (an engine's own function as ``batchfuzz.engines`` binds it,
read from the release ``TargetRef.release`` names) or ``MODULE:FUNCTION`` /
``path/to/file.py:FUNCTION`` (a user's function, ``FUNCTION`` possibly
dotted; a file's folder goes on the import path for its siblings). The first
three are the project's own code; the corpus loads neither of the last two
on its own (``batchfuzz.fuzz.corpus``): the user names the function or the
release.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchfuzz.text import outside

Target = Callable[..., Any]
PROJECT_KINDS = ("impl", "variant", "oracle", "engine")


class TargetError(Exception):
    """A target that cannot be named or loaded (a usage error, exit code 2)."""


@dataclass(frozen=True)
class TargetRef:
    """A parsed target reference (see the module docstring)."""

    kind: str  # "impl" | "variant" | "oracle" | "engine" | "user"
    name: str = ""  # implementation, variant or engine ref; MODULE:FUNCTION for "user"
    device: str = "cpu"

    @property
    def spec(self) -> str:
        """The reference as text (what ``parse`` reads back)."""
        if self.kind == "impl":
            return f"impl:{self.name}@{self.device}"
        if self.kind in ("variant", "engine"):
            return f"{self.kind}:{self.name}"
        if self.kind == "oracle":
            return "oracle"
        return self.name

    @property
    def is_project_code(self) -> bool:
        return self.kind in PROJECT_KINDS

    @property
    def release(self) -> str:
        """For an ``engine:`` target, the release its code is read from (the
        ``SOURCE`` of ``ENGINE::SOURCE::FUNCTION::CONTRACT``); else ``""``."""
        if self.kind != "engine":
            return ""
        parts = self.name.split("::")
        return parts[1] if len(parts) > 1 else ""

    @property
    def function_name(self) -> str:
        """The bare name to call the target by in a reproduction."""
        if self.kind == "user":
            return self.name.rpartition(":")[2].split(".")[-1]
        if self.kind == "impl":
            return f"impl_{self.name.replace('.', '_')}"
        if self.kind == "variant":
            return f"variant_{self.name.replace('.', '_')}"
        return self.kind

    def load(self, contract: Any) -> Target:
        """The callable this reference names, for ``contract``."""
        if self.kind == "impl":
            try:
                return contract.implementation(self.name).for_device(self.device)
            except (KeyError, ValueError) as exc:
                raise TargetError(str(exc)) from None
        if self.kind == "variant":
            try:
                return contract.variant(self.name).fn
            except KeyError as exc:
                raise TargetError(str(exc)) from None
        if self.kind == "oracle":
            return contract.oracle
        if self.kind == "engine":
            from batchfuzz import engine_registry

            try:
                return engine_registry.resolve(self.name)
            except Exception as exc:
                raise TargetError(f"cannot load engine target {self.name!r}: {type(exc).__name__}: {exc}") from None
        return load_function(self.name)


def same_release(a: str, b: str) -> bool:
    """Whether two release references (``wheel:PATH``, ``dir:PATH``,
    ``installed:``) name the same release: the same kind and, for a path,
    the same file or folder once resolved (symbolic links followed)."""
    ka, _, pa = a.partition(":")
    kb, _, pb = b.partition(":")
    if ka != kb or ka not in ("wheel", "dir", "installed"):
        return False
    if ka == "installed":
        return not pa and not pb
    if not pa or not pb:
        return False
    return os.path.realpath(pa) == os.path.realpath(pb)


def parse(text: str) -> TargetRef:
    """Read a target reference; raises TargetError naming what is wrong."""
    if not isinstance(text, str) or not text:
        raise TargetError(f"a target must be a non-empty string, got {text!r}")
    if text == "oracle":
        return TargetRef("oracle")
    kind, sep, rest = text.partition(":")
    if sep and kind == "impl":
        name, at, device = rest.rpartition("@")
        if not at or not name or device not in ("cpu", "cuda"):
            raise TargetError(f"an implementation target is impl:NAME@DEVICE with DEVICE cpu or cuda, got {text!r}")
        return TargetRef("impl", name, device)
    if sep and kind in ("variant", "engine"):
        if not rest:
            raise TargetError(f"a {kind} target is {kind}:NAME, got {text!r}")
        return TargetRef(kind, rest)
    module, sep, attr = text.rpartition(":")
    if not sep or not module or not attr:
        raise TargetError(f"target must be MODULE:FUNCTION or FILE.py:FUNCTION (or impl:NAME@DEVICE, variant:NAME, "
                          f"oracle), got {text!r}")
    return TargetRef("user", text)


def load_function(spec: str) -> Target:
    """A user's function, from ``MODULE:FUNCTION`` or ``path/to/file.py:FUNCTION``."""
    module_part, _, attr_path = spec.rpartition(":")
    if not module_part or not attr_path:
        raise TargetError(f"target must be MODULE:FUNCTION or FILE.py:FUNCTION, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_part.endswith(".py") or os.sep in module_part:
            if not os.path.isfile(module_part):
                raise TargetError(f"target file {module_part!r} does not exist")
            folder = os.path.dirname(os.path.abspath(module_part))
            if folder not in sys.path:
                sys.path.insert(0, folder)  # the file may import its siblings
            name = "_batchfuzz_target_" + os.path.splitext(os.path.basename(module_part))[0]
            loader_spec = importlib.util.spec_from_file_location(name, module_part)
            if loader_spec is None or loader_spec.loader is None:
                raise TargetError(f"cannot import {module_part!r}")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            loader_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_part)
    except TargetError:
        raise
    except Exception as exc:
        raise TargetError(outside(f"cannot import {module_part!r}: {type(exc).__name__}: {exc}")) from exc
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"{module_part!r} has no attribute {attr_path!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TargetError(f"{spec!r} is not callable (got {type(obj).__name__})")
    return obj
