"""Imported once by the fork server every batchfuzz worker process is forked
from (``batchfuzz.execution.process_context``): the heavy modules and the
contract registry, so that a new worker starts in milliseconds. Importing
torch does not create a CUDA context, so forked workers may use CUDA. The
records name their torch implementations lazily (``registry.torch_impl``), so
those modules are imported here too: a forked worker binds them at no cost."""

import importlib
import pkgutil

import numpy  # noqa: F401
import torch  # noqa: F401
from hypothesis import strategies  # noqa: F401

import batchfuzz.impl
from batchfuzz import consumers, execution, registry, runner  # noqa: F401

registry.contracts()
for _module in pkgutil.iter_modules(batchfuzz.impl.__path__):
    importlib.import_module(f"batchfuzz.impl.{_module.name}")
