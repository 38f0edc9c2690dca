"""A worker process seen from outside: its state and the processes it
started (from /proc), the subreaper that keeps them under it, the bounded
tail of what it printed."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

from batchfuzz.text import printable

# Characters of a dead worker's output quoted in its verdict (the end of what it printed): a
# segfault's whole faulthandler report (about 2,000 with its frames and the extension modules
# listed after them), within batchfuzz.text.MAX_CHARS with the verdict's own words.
_STDERR_TAIL = 3000

def _process_state(pid: int) -> str:
    """The state letter of process ``pid`` (``T``: stopped), or "" when gone or unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rpartition(b")")[2].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _gone(pid: int) -> bool:
    """Whether process ``pid`` (the fork server) has died. A process killed a
    moment ago is woken to run to its end, so one that is not asleep (its state
    while it waits for work) is watched until it sleeps or dies: on a loaded
    machine its end may wait long for a core, and a fixed window would make the
    verdict depend on the load. The cap only guards against a server that stays
    busy, which a healthy one never does between cases."""
    deadline = time.monotonic() + _GONE_CAP_S
    while True:
        state = _process_state(pid)
        if state in ("", "Z", "X"):
            return True
        if state in ("S", "I") or time.monotonic() > deadline:
            return False
        time.sleep(0.002)


_GONE_CAP_S = 30.0


def _process_table() -> dict[int, tuple[int, int]]:
    """Every live process's (parent pid, process group), from /proc (zombies
    left out; empty where there is no /proc)."""
    table: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rpartition(b")")[2].split()
            if fields[0] not in (b"Z", b"X"):
                table[int(name)] = (int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def _group_members(pgid: int, exclude: int = -1) -> list[int]:
    """The processes of process group ``pgid`` (from /proc; empty where there is none)."""
    return [pid for pid, (_, group) in _process_table().items() if group == pgid and pid != exclude]


def _started_by(worker: int, alive: bool = True) -> list[int]:
    """The live processes ``worker`` started, however far down, in any session
    (the /proc parent links, while it is ``alive``: orphans re-parent to the
    worker, a subreaper), and what is left of its process group; the worker
    itself left out. Once it is dead, its group only (its pid may be reused)."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, (_, group) in table.items() if group == worker}
    todo = [worker] if alive else []
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    found.discard(worker)
    return sorted(found)


def _become_subreaper() -> None:
    """Make this process the one that orphans of its descendants re-parent
    to (Linux's ``PR_SET_CHILD_SUBREAPER``), instead of pid 1: a process the
    target starts in a new session, or a double-forked daemon, stays under
    the worker where its parent can find and end it. Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER

class _Tail:
    """The last ``limit`` bytes a worker (and what it started) printed, read
    from a pipe by a thread: memory, not a file, and bounded whatever the
    target prints."""

    def __init__(self, conn: Any, limit: int) -> None:
        import threading

        self.conn, self.limit = conn, limit
        self.buf = bytearray()
        self.total = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, name="batchfuzz-worker-output", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        fd = self.conn.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            with self.lock:
                self.buf += chunk
                self.total += len(chunk)
                if len(self.buf) > self.limit:
                    del self.buf[: len(self.buf) - self.limit]
        with contextlib.suppress(OSError):
            self.conn.close()

    def text(self, since: int = 0) -> str:
        with self.lock:
            n = min(len(self.buf), self.total - since)
            data = bytes(self.buf[len(self.buf) - n:]) if n > 0 else b""
        return printable(data.decode("utf-8", "replace")[-_STDERR_TAIL:].strip())

    def drain(self, timeout_s: float = 1.0) -> None:
        """Wait (a little) for what a dead worker printed last."""
        self.thread.join(timeout_s)


# Bytes of a worker's output kept (the end of it), whatever the target prints.
OUTPUT_TAIL_BYTES = 64 * 1024
