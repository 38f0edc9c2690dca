"""What a fuzz job is asked to do: :class:`FuzzRequest`, the options of
``batchfuzz fuzz`` as one validated, frozen value.

The command builds it once from its command line (as ``check`` builds its
``checking.CheckRequest``); the controller reads nothing else, so the job is
driven and tested from Python without argparse. A bad value is a
``UsageError`` naming the option and the value (exit 2 from the command).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass

from batchfuzz.fuzz.settings import DEFAULT_REPORT
from batchfuzz.profiles import PROFILES
from batchfuzz.usage import MAX_DURATION_S, MIN_DURATION_S, UsageError

DEVICES = ("cpu", "cuda")
STEPS = ("model", "engine")
PROGRESS = ("auto", "table", "lines", "none")
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class FuzzRequest:
    """A fuzz job as ``batchfuzz fuzz``'s options say it (None: the default,
    resolved by the controller). docs/nightly.md's option table says what each means."""

    budget_s: float | None = None  # default: controller.default_budget
    workers: int | None = None  # default: controller.default_workers
    max_examples: int | None = None
    profile: str = "dev"
    contracts: tuple[str, ...] = ()  # --contract patterns
    impls: tuple[str, ...] = ()  # --impl patterns
    properties: tuple[str, ...] = ()  # --property patterns
    targets: tuple[tuple[str, str], ...] = ()  # --target (contract, target reference)
    domain: str | None = None
    steps: str | None = None
    device: str = "cpu"
    seed: int | None = None  # default: random, printed
    database: str | None = None  # a directory or redis:// URL; default: the profile's
    no_database: bool = False
    shard: tuple[int, int] | None = None  # (K, N)
    report: str = DEFAULT_REPORT
    corpus: str | None = None  # default: corpus.default_dir()
    isolate: bool = True
    timeout_s: float = DEFAULT_TIMEOUT_S
    history: tuple[str, ...] = ()
    progress: str = "auto"
    started: float | None = None  # when the command started (time.time()); default: when the run starts

    def __post_init__(self) -> None:
        _duration("--budget", self.budget_s, optional=True)
        _duration("--timeout", self.timeout_s, optional=False)
        _positive("--workers", self.workers)
        _positive("--max-examples", self.max_examples)
        _choice("--profile", self.profile, PROFILES)
        _choice("--device", self.device, DEVICES)
        _choice("--progress", self.progress, PROGRESS)
        if self.steps is not None:
            _choice("--steps", self.steps, STEPS)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise UsageError(f"--seed {self.seed!r}: must be an integer")
        if self.shard is not None:
            _shard(self.shard)
        for pair in self.targets:
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)):
                raise UsageError(f"--target {pair!r}: must be CONTRACT=MODULE:FUNCTION or CONTRACT=FILE.py:FUNCTION")
        if self.no_database and self.database:
            raise UsageError("--database and --no-database contradict each other")

    def replay_command(self, seed: int) -> str:
        """The command line that reruns this job with ``seed`` (a database password never in it)."""
        from batchfuzz.redaction import printable

        q = shlex.quote
        parts = ["batchfuzz fuzz", f"--profile {self.profile}", f"--seed {seed}", f"--budget {self.budget_s:g}s",
                 f"--workers {self.workers}", f"--device {self.device}"]
        parts += [f"--contract {q(c)}" for c in self.contracts]
        parts += [f"--impl {q(i)}" for i in self.impls]
        parts += [f"--property {q(p)}" for p in self.properties]
        parts += [f"--target {q(f'{c}={s}')}" for c, s in self.targets]
        if self.domain:
            parts.append(f"--domain {q(self.domain)}")
        if self.steps:
            parts.append(f"--steps {self.steps}")
        if self.shard:
            parts.append(f"--shard {self.shard[0]}/{self.shard[1]}")
        if not self.isolate:
            parts.append("--no-isolation")
        if self.no_database:  # the examples a database replays change the run: the same one, or none
            parts.append("--no-database")
        elif self.database and printable(self.database) != self.database:
            parts.append('--database "$BATCHFUZZ_DATABASE"')  # its password is never printed: the URL from the environment
        elif self.database:
            parts.append(f"--database {q(self.database)}")
        if self.timeout_s != DEFAULT_TIMEOUT_S:
            parts.append(f"--timeout {self.timeout_s:g}")
        if self.max_examples is not None:
            parts.append(f"--max-examples {self.max_examples}")
        return " ".join(parts)


def _duration(flag: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and MIN_DURATION_S <= value <= MAX_DURATION_S
    if not ok:
        raise UsageError(f"{flag} {value!r}: must be a finite duration between {MIN_DURATION_S:g}s and {MAX_DURATION_S:g}s")


def _positive(flag: str, value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise UsageError(f"{flag} {value!r}: must be a positive integer")


def _choice(flag: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{flag} {value!r}: must be one of {', '.join(choices)}")


def _shard(shard: object) -> None:
    from batchfuzz.fuzz.shards import MAX_SHARDS

    ok = isinstance(shard, tuple) and len(shard) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in shard)
    if not ok or not 1 <= shard[0] <= shard[1] <= MAX_SHARDS:  # type: ignore[index]
        raise UsageError(f"--shard {shard!r}: must be K/N with 1 <= K <= N <= {MAX_SHARDS}")
