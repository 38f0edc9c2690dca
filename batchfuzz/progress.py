"""Live progress of a command that runs longer than a few seconds: a bar on a
terminal (drawn by ``rich``), plain lines otherwise (CI logs, pipes, tests).

One object per run, a context manager: ``update`` (what runs now, or the
position), ``advance`` (one unit done, with its line) and ``say`` (a line of
its own). Off a terminal a heartbeat line says a long step is alive.
The usage example and both forms in detail: docs/internals.md, "progress.py".
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from types import TracebackType
from typing import Any, TextIO

HEARTBEAT_S = 30.0  # plain lines: the longest silence before a heartbeat line


def interactive(stream: Any) -> bool:
    """Whether ``stream`` is a terminal a bar can be drawn on (not a pipe, a
    file or a ``TERM=dumb`` terminal): the one rule for a bar or plain lines."""
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return tty and os.environ.get("TERM") != "dumb"


class Progress:
    """A run's progress (the module docstring says what it shows where)."""

    def __init__(self, what: str, total: int | None = None, *, stream: TextIO | None = None, tty: bool | None = None,
                 heartbeat_s: float | None = HEARTBEAT_S, console: Any = None) -> None:
        self.what = what
        self.total = total
        self.completed = 0
        self.now = ""
        self.stream = stream if stream is not None else sys.stdout
        self.tty = (interactive(self.stream) if tty is None else tty) or console is not None
        self.heartbeat_s = heartbeat_s
        self._console = console
        self._bar: Any = None  # rich.progress.Progress, on a terminal
        self._task: Any = None
        self._lock = threading.RLock()
        self._started = time.monotonic()
        self._last_write = self._started
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def __enter__(self) -> Progress:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        self._started = self._last_write = time.monotonic()
        if self.tty:
            from rich import progress as rp
            from rich.console import Console

            console = self._console or Console(file=self.stream, force_terminal=True)
            self._bar = rp.Progress(rp.SpinnerColumn(), rp.TextColumn("{task.description}"), rp.BarColumn(),
                                    rp.MofNCompleteColumn(), rp.TimeElapsedColumn(), rp.TimeRemainingColumn(),
                                    rp.TextColumn("{task.fields[now]}"), console=console, transient=True)
            self._task = self._bar.add_task(self.what, total=self.total, completed=self.completed, now=self.now)
            self._bar.start()
        elif self.heartbeat_s is not None:
            self._thread = threading.Thread(target=self._beat, name="batchfuzz-progress", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            if self._bar is not None:
                with contextlib.suppress(Exception):
                    self._bar.stop()
                self._bar = None

    # -- what a command calls
    def advance(self, line: str | None = None, n: int = 1) -> None:
        """``n`` units done; ``line`` (if any) says what came of them."""
        with self._lock:
            self.completed += n
            if line is not None:
                self._write(line)
            self._refresh()

    def update(self, completed: int | None = None, *, total: int | None = None, now: str | None = None) -> None:
        """Set the position (``completed`` of ``total``) and what runs now, without a line."""
        with self._lock:
            if completed is not None:
                self.completed = completed
            if total is not None:
                self.total = total
            if now is not None:
                self.now = now
            self._refresh()

    def say(self, line: str) -> None:
        """A line of its own (above the bar on a terminal)."""
        with self._lock:
            self._write(line)

    # -- drawing
    def _write(self, line: str) -> None:
        self._last_write = time.monotonic()
        try:
            if self._bar is not None:
                self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
            else:
                self.stream.write(line + "\n")
                self.stream.flush()
        except Exception:  # a closed or broken stream: the run goes on
            pass

    def _refresh(self) -> None:
        if self._bar is None:
            return
        with contextlib.suppress(Exception):
            self._bar.update(self._task, completed=self.completed, total=self.total, now=self.now)

    def heartbeat(self) -> str:
        """The plain heartbeat line: done so far, seconds elapsed, what runs now."""
        done = f"{self.completed}/{self.total}" if self.total is not None else f"{self.completed}"
        elapsed = time.monotonic() - self._started
        return f"... {self.what}: {done} done in {elapsed:.0f}s" + (f"; now: {self.now}" if self.now else "")

    def _beat(self) -> None:
        assert self.heartbeat_s is not None
        while not self._stop.wait(min(1.0, self.heartbeat_s)):
            with self._lock:
                if time.monotonic() - self._last_write >= self.heartbeat_s:
                    self._write(self.heartbeat())
