"""Progress of a fuzz run: a live per-contract table on a terminal, plain lines otherwise.

It reads the item state files the job processes write (:mod:`batchfuzz.fuzz.job`)
from a background thread, so it costs the job processes nothing.

- On a terminal: a table (contract, items run/total, examples, failures,
  cases per second, what is running) redrawn in place every half second with
  ANSI cursor movement, under a header with the time elapsed and left.
- Otherwise (CI logs, pipes): one line per failure the moment it is found,
  and a heartbeat line every ``heartbeat_s`` (the per-contract table comes at
  the end, from the controller).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

from batchfuzz.fuzz.job import ItemState, Job, read_states

_RAN = ("passed", "failed", "error", "interrupted", "idle", "running")


@dataclass
class _Row:
    """A contract's line of the live table: its items (run of all), examples, failures, seconds, what runs now."""

    contract: str
    items: int = 0
    done: int = 0
    examples: int = 0
    failures: int = 0
    seconds: float = 0.0
    running: list[str] = field(default_factory=list)


class Progress:
    def __init__(self, stream: TextIO, job: Job, started: float, *, tty: bool | None = None,
                 interval: float = 0.5, heartbeat_s: float = 30.0) -> None:
        self.stream = stream
        self.job = job
        self.started = started
        self.tty = stream.isatty() if tty is None else tty
        self.interval = interval
        self.heartbeat_s = heartbeat_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lines_drawn = 0
        self._seen_done: set[int] = set()
        self._seen_failures: set[tuple[int, str]] = set()
        self._last_heartbeat = started
        self._left: float | None = None  # the budget's seconds left, as last shown
        self._lock = threading.Lock()

    # -- lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="batchfuzz-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.update()  # the final state

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.update()
            except Exception:  # never let the display kill a run
                pass

    # -- rendering
    def update(self) -> None:
        with self._lock:
            states = read_states(self.job.items_dir)
            if self.tty:
                self._draw_table(states)
            else:
                self._print_lines(states)
            self.stream.flush()

    def message(self, text: str) -> None:
        """A line printed above the live table (or just a line)."""
        with self._lock:
            if self.tty and self._lines_drawn:
                self.stream.write(f"\x1b[{self._lines_drawn}F\x1b[J")
                self._lines_drawn = 0
            self.stream.write(text + "\n")
            self.stream.flush()

    def clock(self) -> tuple[float, float, float]:
        """(seconds elapsed, of them not charged to the budget, budget seconds left),
        which add up: elapsed = not charged + (budget - left). The deadline
        slides until the job processes are ready and moves on by the start-up
        each slice spends (both not charged); the time left shown never goes
        back up: what comes back to it is shown as start-up."""
        now = time.time()
        left = max(0.0, min(self.job.budget_s, self.job.deadline - now))
        self._left = left if self._left is None else min(self._left, left)
        elapsed = now - self.started
        return elapsed, max(0.0, elapsed - (self.job.budget_s - self._left)), self._left

    def clock_words(self) -> str:
        elapsed, uncharged, left = self.clock()
        return (f"{elapsed:.0f}s elapsed ({uncharged:.0f}s start-up, not charged), "
                f"{left:.0f}s of the {self.job.budget_s:g}s budget left")

    def rows(self, states: dict[int, ItemState]) -> list[_Row]:
        """One row per contract, in plan order."""
        rows: dict[str, _Row] = {}
        for item in self.job.items:
            r = rows.setdefault(item.contract, _Row(item.contract))
            r.items += 1
            s = states.get(item.index)
            if s is None:
                continue
            r.examples += s.examples
            r.failures += len(s.failures)
            r.seconds += s.seconds
            if s.status in _RAN and (s.slices or s.status != "running"):
                r.done += 1
            if s.status == "running":
                r.running.append(f"{item.name} {item.property}")
        return list(rows.values())

    def _draw_table(self, states: dict[int, ItemState]) -> None:
        lines = [
            f"batchfuzz fuzz  {self.clock_words()}  ({self.job.workers} worker(s), profile {self.job.profile}, "
            f"seed {self.job.seed})",
            f"  {'contract':26} {'items':>7} {'examples':>9} {'failures':>8} {'cases/s':>8}  now",
        ]
        for r in self.rows(states):
            rate = f"{r.examples / r.seconds:.0f}" if r.seconds > 0 else "-"
            fail = f"{r.failures}" + (" !" if r.failures else "")
            lines.append(f"  {r.contract[:26]:26} {f'{r.done}/{r.items}':>7} {r.examples:9d} {fail:>8} {rate:>8}  "
                         f"{', '.join(r.running)[:40]}")
        out = []
        if self._lines_drawn:
            out.append(f"\x1b[{self._lines_drawn}F")
        for line in lines:
            out.append("\x1b[2K" + line + "\n")
        self.stream.write("".join(out))
        self._lines_drawn = len(lines)

    def _print_lines(self, states: dict[int, ItemState]) -> None:
        for idx in sorted(states):
            s = states[idx]
            for f in s.failures:
                key = (idx, str(f.get("id")))
                if key in self._seen_failures:
                    continue
                self._seen_failures.add(key)
                where = f.get("corpus_file") or f.get("corpus_error")
                self.stream.write(f"FAILURE {s.contract} {s.name} {f['property']}: {f['error_type']}: "
                                  f"{(f['message'] or '').splitlines()[0] if f.get('message') else ''} "
                                  f"-> {where} ({'new' if f.get('new') else 'known'})\n")
        now = time.time()
        if now - self._last_heartbeat >= self.heartbeat_s:
            self._last_heartbeat = now
            examples = sum(s.examples for s in states.values())
            failures = sum(len(s.failures) for s in states.values())
            ran = sum(1 for s in states.values() if s.slices or s.status in ("failed", "error"))
            running = sum(1 for s in states.values() if s.status == "running")
            self.stream.write(f"... {self.clock_words()}: {examples} examples, {failures} failures, "
                              f"{ran}/{len(self.job.items)} items run, {running} running\n")
