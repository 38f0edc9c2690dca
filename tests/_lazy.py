"""Modules imported when a test first uses them, never while the tests are
collected: collecting imports no torch (issue 35), so ``-m inner`` and
``--collect-only`` start in seconds."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands for the module ``name``: the first attribute read imports it
    (then every read is the module's own attribute)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        # What pytest asks of every module attribute while it collects: __test__, and from pytest 9.2 _mock_name
        # (a fixture wrapped by a mock); neither is a module's.
        if (attr.startswith("__") and attr.endswith("__")) or attr == "_mock_name":
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported when first used>"
