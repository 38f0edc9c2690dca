"""Running code under test: the one execution layer of ``check``, ``fuzz``,
``replay``, the catalogue and ``batchfuzz.testing``.

Hypothesis runs in the calling process; the target runs in an executor,
isolated in a worker process or here. docs/fuzz-loop.md ("Where the target
runs") says what each survives and why; one module per concern:

- ``outcome``: the verdicts and :class:`Outcome`;
- ``evaluation``: one property on one case, on a guarded target (``evaluate``);
- ``executor``, ``in_process``, ``isolated``, ``factory``: the executors and the choice of one;
- ``fork_server``: the process every batchfuzz process is forked from;
- ``worker``: the worker's side of an isolated executor's pipe;
- ``processes``: a worker seen from outside (/proc, its output);
- ``harness``: the tampering check.
"""

from batchfuzz.execution.evaluation import evaluate, guarded, signature_error
from batchfuzz.execution.executor import Executor
from batchfuzz.execution.factory import executor_for, wrap
from batchfuzz.execution.fork_server import process_context, share_fork_server, start_fork_server, watch_owner, without_main_module
from batchfuzz.execution.harness import TAMPERED, HarnessSnapshot, snapshot_harness, tampering
from batchfuzz.execution.in_process import InProcess
from batchfuzz.execution.isolated import START_TIMEOUT_S, Isolated, LoadTimeout
from batchfuzz.execution.outcome import CRASH, FAILED, PASSED, PSEUDO_PROPERTIES, RAISES, REJECTED, TIMEOUT, Outcome, checked_property
from batchfuzz.execution.processes import OUTPUT_TAIL_BYTES

__all__ = [
    "CRASH", "FAILED", "OUTPUT_TAIL_BYTES", "PASSED", "PSEUDO_PROPERTIES", "RAISES", "REJECTED", "START_TIMEOUT_S",
    "TAMPERED", "TIMEOUT", "Executor", "HarnessSnapshot", "InProcess", "Isolated", "LoadTimeout", "Outcome",
    "checked_property", "evaluate", "executor_for", "guarded", "process_context", "share_fork_server",
    "signature_error", "snapshot_harness", "start_fork_server", "tampering", "watch_owner", "without_main_module", "wrap",
]
