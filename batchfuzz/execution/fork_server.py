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
