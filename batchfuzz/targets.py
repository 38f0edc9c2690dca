"""Load a user's function named as ``MODULE:FUNCTION`` or ``path/to/file.py:FUNCTION``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any


class TargetError(Exception):
    """The target could not be loaded (usage error, exit code 2)."""


def load_target(spec: str) -> Callable[..., Any]:
    if ":" not in spec:
        raise TargetError(f"target must be MODULE:FUNCTION or FILE.py:FUNCTION, got {spec!r}")
    module_part, _, attr_path = spec.rpartition(":")
    if not module_part or not attr_path:
        raise TargetError(f"target must be MODULE:FUNCTION or FILE.py:FUNCTION, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if module_part.endswith(".py") or os.sep in module_part:
            if not os.path.isfile(module_part):
                raise TargetError(f"target file {module_part!r} does not exist")
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
        raise TargetError(f"cannot import {module_part!r}: {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"{module_part!r} has no attribute {attr_path!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TargetError(f"{spec!r} is not callable (got {type(obj).__name__})")
    return obj
