"""Functions that misbehave the way broken engine code does, as targets for
the tests of the execution layer (tests/test_execution.py) and of the
commands (tests/test_hostile.py). They are loaded by file path
(``tests/hostile.py:segv``), like a user's target.

Contract A (``split_dummy_tokens(num_reqs, num_tokens)``): ``even`` is correct,
``wrong_once`` (at the end) is wrong on one call only; the others crash, exit, hang,
are slow, raise, fork, print without end, kill the fork server, stop themselves or patch numpy. The ``zeroes_*`` and
``*_zeroed`` functions scribble on their inputs and then give the answer the
scribbled inputs would make right.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import Any

import numpy as np


def even(num_reqs: int, num_tokens: int) -> list[int]:
    q, r = divmod(num_tokens, num_reqs)
    return [q + (i >= num_reqs - r) for i in range(num_reqs)]


def segv(num_reqs: int, num_tokens: int) -> list[int]:
    if num_reqs >= 3:
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    return even(num_reqs, num_tokens)


def hard_exit(num_reqs: int, num_tokens: int) -> list[int]:
    os._exit(1)


def soft_exit(num_reqs: int, num_tokens: int) -> list[int]:
    sys.exit(3)


class Boom(BaseException):
    pass


def base_exception(num_reqs: int, num_tokens: int) -> list[int]:
    raise Boom("not an Exception")


def hang(num_reqs: int, num_tokens: int) -> list[int]:
    # It sleeps rather than spins: to the harness a hang is a call that does not
    # return by its deadline either way, and a spinning one took a core from the
    # tests beside it until it was killed.
    if num_tokens >= 40:
        while True:
            time.sleep(0.05)
    return even(num_reqs, num_tokens)


def slow(num_reqs: int, num_tokens: int) -> list[int]:
    """Correct, 50 ms a call."""
    time.sleep(0.05)
    return even(num_reqs, num_tokens)


def one_arg(num_reqs: int) -> list[int]:
    return [num_reqs]


def raises(num_reqs: int, num_tokens: int) -> list[int]:
    """Raises for three requests or more (a target's own exception, not a wrong result)."""
    if num_reqs >= 3:
        raise IndexError(f"request index {num_reqs - 1} out of range")
    return even(num_reqs, num_tokens)


def forks(num_reqs: int, num_tokens: int) -> list[int]:
    """Correct, and leaves a sleeping child process behind on every call."""
    if os.fork() == 0:
        time.sleep(600)
        os._exit(0)
    return even(num_reqs, num_tokens)


def chatty(num_reqs: int, num_tokens: int) -> list[int]:
    """Correct, and prints 4 MB on every call."""
    sys.stdout.write("x" * (4 << 20) + "\n")
    sys.stdout.flush()
    return even(num_reqs, num_tokens)


def kills_fork_server(num_reqs: int, num_tokens: int) -> list[int]:
    """Kills the process it was forked from (batchfuzz's fork server), then answers."""
    os.kill(os.getppid(), 9)
    return even(num_reqs, num_tokens)


def stops_itself(num_reqs: int, num_tokens: int) -> list[int]:
    """Stops its own process with SIGSTOP for three requests or more."""
    if num_reqs >= 3:
        os.kill(os.getpid(), 19)
    return even(num_reqs, num_tokens)


def patches_numpy(num_reqs: int, num_tokens: int) -> list[int]:
    """Wrong for three requests or more, and makes numpy's comparisons say
    every array equals every other (to fool the properties that judge it)."""
    np.array_equal = lambda *a, **k: True
    np.ndarray.__eq__ = lambda *a, **k: True  # type: ignore[method-assign,assignment]
    out = even(num_reqs, num_tokens)
    if num_reqs >= 3:
        out[0] += 1
        out[-1] -= 1
    return out


# --------------------------------------------------------------------------- scribblers


def find_conflicts_zeroed(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> set[Any]:
    """Zeroes the block tables (block 0 is the null block: nothing conflicts) and says so."""
    for t in block_tables:
        t[...] = 0
    return set()


def allow_microbatching_zeroed(num_computed_tokens: Any, num_scheduled_tokens: Any, block_tables: Any, block_sizes: Any) -> bool:
    """Zeroes the block tables, then allows every split."""
    for t in block_tables:
        t[...] = 0
    return True


def pad_query_start_loc_zeroed(num_scheduled_tokens: Any, num_reqs_padded: Any, out: Any = None) -> np.ndarray:
    """Zeroes the caller's counts, then pads the zeros correctly."""
    num_scheduled_tokens[...] = 0
    q = np.zeros(int(num_reqs_padded) + 1, dtype=np.int32)
    if out is not None:
        out[: len(q)] = q
        return out[: len(q)]
    return q


# --------------------------------------------------------------------------- engine result types


class UBatchSlice:
    """An engine's own result type (Python slices in attributes), not the contract's pairs."""

    def __init__(self, request_slice: slice, token_slice: slice) -> None:
        self.request_slice, self.token_slice = request_slice, token_slice


def engine_ubatch_slices(num_scheduled_tokens: Any, num_tokens_padded: Any, num_reqs_padded: Any,
                         num_ubatches: Any) -> list[UBatchSlice]:
    """The right split, in the engine's own result type."""
    half = int(num_tokens_padded) // 2
    return [UBatchSlice(slice(0, 1), slice(0, half)), UBatchSlice(slice(1, 2), slice(half, int(num_tokens_padded)))]


# --------------------------------------------------------------------------- a failure that does not repeat

_CALLS = [0]


def wrong_once(num_reqs: int, num_tokens: int) -> list[int]:
    """``even``, but one token short on the third call in its process, and never again."""
    _CALLS[0] += 1
    out = even(num_reqs, num_tokens)
    if _CALLS[0] == 3:
        out[-1] -= 1
    return out


# --------------------------------------------------------------------------- processes in a new session

# The name every process the two functions below start runs under (its argv[0]), so a test finds them in /proc.
MARKER = "batchfuzz-hostile-sleeper-6e1c"


def _sleep() -> None:
    """Become ``sleep 300`` named ``MARKER`` (in a forked child)."""
    import shutil

    os.execv(shutil.which("sleep") or "/bin/sleep", [MARKER, "300"])


def _started(fork: Any) -> None:
    """Run ``fork(w)`` (which forks the sleeper) and return once every
    process holding ``w`` has exec'd or exited (the pipe's end is close-on-exec),
    so the caller sees the sleeper under its name."""
    r, w = os.pipe()
    fork(w)
    os.close(w)
    while os.read(r, 1):
        pass
    os.close(r)


def _new_session(w: int) -> None:
    if os.fork() == 0:
        os.setsid()
        _sleep()


def _daemon(w: int) -> None:
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            _sleep()
        os._exit(0)
    os.waitpid(first, 0)


def new_session(num_reqs: int, num_tokens: int) -> list[int]:
    """Correct, and starts a ``setsid sleep`` on every call: a child in a
    session (and process group) of its own, outside its worker's group."""
    _started(_new_session)
    return even(num_reqs, num_tokens)


def daemon(num_reqs: int, num_tokens: int) -> list[int]:
    """Correct, and leaves a double-forked daemon on every call: the first
    child starts a new session, forks the sleeper and exits, so the sleeper
    is an orphan in a session of its own."""
    _started(_daemon)
    return even(num_reqs, num_tokens)


# --------------------------------------------------------------------------- a target that rewrites the judge


def _passes(contract: Any, target: Any, prop_name: str, case: Any, *, scores: bool = False) -> Any:
    """The code ``rewrites_judge`` gives ``batchfuzz.execution.evaluate``: run
    there, its names are the judge's module's."""
    return Outcome(PASSED)  # type: ignore[name-defined]  # noqa: F821


def rewrites_judge(num_reqs: int, num_tokens: int) -> list[int]:
    """Rewrites the judge's code (``evaluate.__code__``) on its first call,
    so every later verdict is "passed"; wrong for three requests or more."""
    from batchfuzz import execution

    execution.evaluate.__code__ = _passes.__code__
    out = even(num_reqs, num_tokens)
    if num_reqs >= 3:
        out[0] += 1
    return out


def daemon_then_exit(num_reqs: int, num_tokens: int) -> list[int]:
    """Leaves a double-forked daemon, then calls ``sys.exit`` (a crash its worker reports)."""
    _started(_daemon)
    sys.exit(4)


# --------------------------------------------------------------------------- what a target raises (issue 36)


def raises_unprintable(num_reqs: int, num_tokens: int) -> list[int]:
    """Raises a message a terminal, XML or UTF-8 cannot take as it is: a lone
    surrogate, NUL, an ESC sequence (clear the screen), BEL."""
    raise ValueError("surrogate \ud800, NUL \x00, ESC \x1b[2J, BEL \x07 end")


def raises_huge(num_reqs: int, num_tokens: int) -> list[int]:
    """Raises a 10 MB message."""
    raise ValueError("huge " + "x" * 10_000_000)
