"""The fork server every batchfuzz process is made from, and what a process
forked from it needs: a start that does not re-run ``__main__``, an end
when its owner is gone."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

_CONTEXT: Any = None


def process_context() -> Any:
    """The multiprocessing context every batchfuzz process is made from: a
    fork server that has imported the heavy modules and the registry once
    (so a new process is a fork of it: milliseconds), never a CUDA context."""
    global _CONTEXT
    if _CONTEXT is None:
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        _CONTEXT = multiprocessing.get_context(method)
        if method == "forkserver":
            _CONTEXT.set_forkserver_preload(["batchfuzz._preload"])
    return _CONTEXT


def start_fork_server() -> None:
    """Start the fork server now, without waiting for it: its imports
    (torch, the registry: seconds) then overlap the caller's own, instead of
    delaying the first worker. Starting it again is a no-op."""
    if process_context().get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


# The Python versions whose multiprocessing.forkserver internals share_fork_server was read against.
_SHARING_CHECKED = ((3, 10), (3, 13))


def share_fork_server() -> bool:
    """Fork this process's processes from the fork server it was itself
    forked from, rather than start another (a second of imports per fuzz job
    process). multiprocessing's ``ensure_running`` would start a fresh one, so
    it is replaced by its resource-tracker part, on the Pythons this was read
    against (docs/fuzz-loop.md, "Where the target runs"). Returns whether it
    shares; :func:`forget_fork_server` ends that once the server is gone."""
    if process_context().get_start_method() != "forkserver":
        return False
    if not _SHARING_CHECKED[0] <= sys.version_info[:2] <= _SHARING_CHECKED[1]:
        return False
    from multiprocessing import forkserver, resource_tracker

    server: Any = forkserver._forkserver
    if server._forkserver_pid is not None or server._forkserver_address is None or server._forkserver_alive_fd is None:
        return False  # this process started a server of its own, or was not forked from one
    server.ensure_running = resource_tracker.ensure_running
    return True


def forget_fork_server() -> None:
    """Forget a fork server found gone (a target killed it): the next process
    starts from a fresh one of this process's own."""
    from multiprocessing import forkserver

    server: Any = forkserver._forkserver
    if "ensure_running" in vars(server):  # shared (share_fork_server): the server is its parent's, not to wait for
        del server.ensure_running
        with contextlib.suppress(OSError):
            os.close(server._forkserver_alive_fd)
        server._forkserver_address = server._forkserver_alive_fd = None
    else:
        with contextlib.suppress(Exception):
            server._stop()


@contextlib.contextmanager
def without_main_module() -> Iterator[None]:
    """Start a process without re-running the caller's ``__main__``.

    multiprocessing makes a new process import the parent's main module (to
    unpickle functions defined there). Workers run only ``batchfuzz`` code,
    and the main module may be a user's script, ``<stdin>`` or a notebook: so
    while a process starts, ``__main__`` shows neither a file nor a spec.
    """
    with _MAIN_MODULE_LOCK:  # threads starting processes at once (the matrix's cells) see it hidden throughout
        main = sys.modules.get("__main__")
        saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if main is not None and hasattr(main, k)}
        try:
            for k in saved:
                delattr(main, k) if k == "__file__" else setattr(main, k, None)
            yield
        finally:
            for k, v in saved.items():
                setattr(main, k, v)


_MAIN_MODULE_LOCK = threading.RLock()


def watch_owner(owner: int) -> None:
    """End this process when process ``owner`` is gone.

    Every batchfuzz process is forked from a fork server, not from the process
    that uses it, so nothing ends it when its user dies (killed at a deadline,
    say) while it is busy: a thread checks twice a second that the owner is
    still there, and exits at once when it is not, hang or no hang.
    """

    def watch() -> None:
        while True:
            time.sleep(0.5)
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                os._exit(70)
            except PermissionError:  # pragma: no cover - a pid reused by another user's process
                os._exit(70)

    threading.Thread(target=watch, name="batchfuzz-owner-watch", daemon=True).start()
