"""Imported once by the fork server every batchfuzz worker process is forked
from (``batchfuzz.execution.process_context``): the heavy modules and the
contract registry, so that a new worker starts in milliseconds. Importing
torch does not create a CUDA context, so forked workers may use CUDA."""

import numpy  # noqa: F401
import torch  # noqa: F401
from hypothesis import strategies  # noqa: F401

from batchfuzz import execution, registry, runner  # noqa: F401

registry.contracts()
