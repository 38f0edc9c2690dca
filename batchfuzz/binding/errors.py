"""What binding engine code can end in besides a callable (``batchfuzz.bind``'s outcomes)."""

from __future__ import annotations


class Absent(LookupError):
    """The source does not have the function, class or file asked for."""


class Unbindable(Exception):
    """The source has it, but the binding cannot run it as it stands (a name
    no one provides, a changed signature, a fragment that is not there)."""


class StandInReached(RuntimeError):
    """Code ran into a stand-in that its binding declared unreachable."""
