"""What one evaluation of a target did: the verdicts and :class:`Outcome`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from batchfuzz.text import MAX_NAME_CHARS, MAX_TRACEBACK_CHARS, outside

PASSED, FAILED, REJECTED, CRASH, TIMEOUT, RAISES = "passed", "failed", "rejected", "crash", "timeout", "raises"
# The verdicts about the target itself rather than about its result: each is
# the name of a pseudo-property (batchfuzz.runner), a failure of which keeps
# the property whose calls it happened in as ``during``.
PSEUDO_PROPERTIES = (CRASH, TIMEOUT, RAISES)


def checked_property(prop: str, during: str) -> str:
    """The contract's property a failure of ``prop`` is re-checked with: the
    one it happened ``during`` for a pseudo-property, else ``prop`` itself."""
    return during if prop in PSEUDO_PROPERTIES else prop


@dataclass
class Outcome:
    """What one evaluation did: ``passed``, ``failed`` (the property found the
    result wrong: ``error_type``, ``message``, ``traceback``), ``raises`` (the
    target itself raised an exception, so the property could not judge a
    result: the exception's type, message and traceback), ``rejected`` (the
    target's ``@assumes`` refused the case), ``crash`` (its process died or it
    raised a BaseException: ``exit`` says how) or ``timeout`` (past
    ``seconds``)."""

    status: str
    error_type: str = ""
    message: str = ""
    traceback: str = ""
    exit: str = ""
    seconds: float = 0.0
    value: Any = None  # the contract's scores, when they were asked for and the property passed

    def __post_init__(self) -> None:
        # What a target produced, kept bounded and printable from where it is made (batchfuzz.text): a
        # 10 MB message or a lone surrogate cannot reach a pipe, a report, a corpus entry or a terminal.
        if self.status not in (PASSED, REJECTED):
            self.error_type = outside(self.error_type, MAX_NAME_CHARS)
            self.message = outside(self.message)
            self.traceback = outside(self.traceback, MAX_TRACEBACK_CHARS)
            self.exit = outside(self.exit, MAX_NAME_CHARS)

    @property
    def ok(self) -> bool:
        return self.status == PASSED


# ---------------------------------------------------------------- guarding inputs


# Values deepcopy returns as they are: passed without copying.
