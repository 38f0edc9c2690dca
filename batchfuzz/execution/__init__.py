"""Running code under test (moving into one module per concern)."""

from batchfuzz.execution.isolated import *  # noqa: F403
from batchfuzz.execution.isolated import _group_members, _process_state  # noqa: F401
