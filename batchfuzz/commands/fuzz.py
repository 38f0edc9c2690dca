"""``batchfuzz fuzz``: the (nightly) fuzz job.

Every contract's properties against every implementation on the chosen
device (and any ``--target`` a user adds), within a wall-clock budget,
spread over ``--workers`` processes by pytest-xdist (see
:mod:`batchfuzz.fuzzjob`). Progress on the terminal; reports
(``summary.json``, ``summary.md``, ``junit.xml``) in ``--report``; every
failure shrunk and saved to the corpus as it is found.

Exit codes: 0 no failure; 1 failures (or harness errors) found, listed;
2 usage error, or a budget too small to run anything; 3 the internal pytest
run itself broke (its log is printed); 128+N interrupted by signal N
(130 SIGINT, 143 SIGTERM) after writing a partial report.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from batchfuzz import corpus, profiles, registry
from batchfuzz.cli import UsageError, parse_duration
from batchfuzz.fuzzjob import JOB_OPTION, Job, WorkItem, read_states
from batchfuzz.targets import TargetError, load_target

DEFAULT_REPORT = "reports/fuzz"
GRACE_S = float(os.environ.get("BATCHFUZZ_STOP_GRACE", "30"))  # after a stop request, before a hard exit
_RANDOM_PROFILES = ("dev", "nightly")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return v


def _target_spec(text: str) -> tuple[str, str]:
    contract, sep, spec = text.partition("=")
    if not sep or not contract or not spec:
        raise argparse.ArgumentTypeError(f"--target must be CONTRACT=MODULE:FUNCTION or CONTRACT=FILE.py:FUNCTION, got {text!r}")
    return contract, spec


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fuzz", help="fuzz every contract and implementation (the nightly job)",
        description="Fuzz every contract's properties against its implementations (and your --target functions) "
                    "within a budget, in parallel; save every failure to the corpus; write reports.",
    )
    p.add_argument("--budget", type=parse_duration, default=60.0, help="wall-clock budget, e.g. 90s, 15m, 2h (default 60s)")
    p.add_argument("--workers", type=_positive_int, default=1,
                   help="parallel worker processes (pytest-xdist); 1 runs in-process (default 1)")
    p.add_argument("--profile", choices=profiles.PROFILES, default="dev",
                   help="Hypothesis profile: nightly/dev are random with the example database; "
                        "ci/mutation are derandomized single rounds (default dev)")
    p.add_argument("--contract", action="append", default=None, metavar="NAME",
                   help="only contracts matching NAME (a name or a glob; repeatable)")
    p.add_argument("--impl", action="append", default=None, metavar="NAME",
                   help="only implementations matching NAME (e.g. numpy, 'engine.*', 'target:*'; repeatable)")
    p.add_argument("--target", action="append", default=[], type=_target_spec, metavar="CONTRACT=MODULE:FUNCTION",
                   help="also fuzz your own function against CONTRACT (repeatable; FILE.py:FUNCTION works too)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="device for torch implementations (default cpu)")
    p.add_argument("--seed", type=int, default=None,
                   help="run seed: every round's examples are a function of (seed, contract, target, property, round); "
                        "default: random, printed")
    p.add_argument("--rounds", type=_positive_int, default=None,
                   help="stop each item after N rounds of every property (with --seed: an exact replay of a run)")
    p.add_argument("--database", metavar="PATH", default=None,
                   help="Hypothesis example database directory shared by workers and later runs "
                        f"(default for dev/nightly: ${profiles.DATABASE_ENV_VAR} or {profiles.DEFAULT_DATABASE})")
    p.add_argument("--no-database", action="store_true", help="run without an example database")
    p.add_argument("--report", metavar="DIR", default=DEFAULT_REPORT, help=f"report directory (default {DEFAULT_REPORT})")
    p.add_argument("--corpus", metavar="DIR", default=None,
                   help=f"failure corpus directory (default ${corpus.ENV_VAR}, else corpus/ of the checkout, else ./corpus)")
    p.add_argument("--progress", choices=("auto", "table", "lines", "none"), default="auto",
                   help="live table on a terminal, plain lines otherwise (default auto)")
    p.set_defaults(func=run)


# --------------------------------------------------------------------------- work items


def _match(name: str, patterns: list[str]) -> bool:
    return any(name == p or fnmatch.fnmatchcase(name, p) for p in patterns)


def plan(args: argparse.Namespace) -> list[WorkItem]:
    """The run's work items, in SPEC order; raises UsageError on a bad filter or target."""
    contracts = registry.contracts()
    names = [c.name for c in contracts]
    if args.contract:
        for pat in args.contract:
            if not any(_match(n, [pat]) for n in names):
                raise UsageError(f"--contract {pat!r} matches no contract; known: {', '.join(names)}")
        contracts = [c for c in contracts if _match(c.name, args.contract)]
    selected = {c.name for c in contracts}
    items: list[WorkItem] = []
    # The user's own functions first (what they run the job for), then every
    # implementation in SPEC order.
    for cname, spec in args.target:
        if cname not in names:
            raise UsageError(f"--target {cname}={spec}: unknown contract {cname!r}; known: {', '.join(names)}")
        if cname not in selected:
            raise UsageError(f"--target {cname}={spec}: contract {cname!r} is not selected by --contract")
        try:
            load_target(spec)
        except TargetError as exc:
            raise UsageError(f"--target {cname}={spec}: {exc}") from None
        items.append(WorkItem(len(items), cname, args.device, target=spec))
    for c in contracts:
        for impl in c.implementations:
            if args.device in impl.devices:
                items.append(WorkItem(len(items), c.name, args.device, implementation=impl.name))
    if args.impl:
        for pat in args.impl:
            if not any(_match(i.implementation or f"target:{i.target}", [pat]) for i in items):
                known = sorted({i.implementation or f"target:{i.target}" for i in items})
                raise UsageError(f"--impl {pat!r} matches no implementation on {args.device}; known: {', '.join(known)}")
        items = [i for i in items if _match(i.implementation or f"target:{i.target}", args.impl)]
    if not items:
        raise UsageError(f"nothing to fuzz on device {args.device!r} with these filters")
    return [WorkItem(k, i.contract, i.device, i.implementation, i.target) for k, i in enumerate(items)]


def _database(args: argparse.Namespace) -> str | None:
    if args.no_database:
        if args.database:
            raise UsageError("--database and --no-database contradict each other")
        return None
    if args.database:
        return str(Path(args.database).absolute())
    if args.profile in _RANDOM_PROFILES:
        return str(Path(profiles.database_path()).absolute())
    return None


def _replay_command(args: argparse.Namespace, seed: int) -> str:
    q = shlex.quote
    parts = ["batchfuzz fuzz", f"--profile {args.profile}", f"--seed {seed}", f"--budget {args.budget:g}s",
             f"--workers {args.workers}", f"--device {args.device}"]
    parts += [f"--contract {q(c)}" for c in args.contract or []]
    parts += [f"--impl {q(i)}" for i in args.impl or []]
    parts += [f"--target {q(f'{c}={s}')}" for c, s in args.target]
    if args.rounds:
        parts.append(f"--rounds {args.rounds}")
    return " ".join(parts)


# --------------------------------------------------------------------------- the run


def _progress_stream() -> TextIO:
    """A private handle on the real stdout: pytest's output capture (which
    redirects fd 1 while a test runs in-process) does not touch it."""
    try:
        return os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, closefd=True)
    except (AttributeError, OSError, ValueError):
        return sys.stdout


def _prepare_report_dir(report_dir: Path) -> None:
    """Create the report directory; remove what an earlier run of ours left
    there (our file names only: the directory may be shared with other things)."""
    import re

    report_dir.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "summary.md", "junit.xml"):
        (report_dir / name).unlink(missing_ok=True)
    items = report_dir / "items"
    if items.is_dir():
        for p in items.iterdir():
            if re.fullmatch(r"\d{3,}\.json", p.name):
                p.unlink()
    run_dir = report_dir / ".run"
    if run_dir.is_dir():
        started = run_dir / "started"
        if started.is_dir():
            for p in started.iterdir():
                if p.name.isdigit():
                    p.unlink()
        for name in ("job.json", "pytest.ini", "pytest.log", "STOP"):
            (run_dir / name).unlink(missing_ok=True)
    items.mkdir(exist_ok=True)
    run_dir.mkdir(exist_ok=True)


def _pytest_args(job_path: Path, run_dir: Path, workers: int) -> list[str]:
    import batchfuzz._fuzzjob_items as items_module

    args = [
        str(Path(items_module.__file__ or "").resolve()),
        "-p", "batchfuzz.fuzzjob", f"{JOB_OPTION}={job_path}",
        # Isolation from the caller's pytest setup: our own empty ini file, no
        # conftest.py, no cache, no third-party plugins (autoload is off).
        "-c", str(run_dir / "pytest.ini"), "--rootdir", str(run_dir), "--noconftest",
        "-p", "no:cacheprovider", "--assert=plain", "-q", "--tb=short", "-rfE",
    ]
    if workers > 1:
        # worksteal, not load: load hands each worker a batch of items up front,
        # so with few items a worker can sit on an item it never reaches before
        # the deadline while another worker idles (seen on CUDA, where each
        # worker's start-up is long); idle workers steal pending items instead.
        args += ["-p", "xdist.plugin", "-n", str(workers), "--dist", "worksteal"]
    return args


class _Controller:
    def __init__(self, job: Job, progress: Any, stream: TextIO, started: float) -> None:
        self.job = job
        self.progress = progress
        self.stream = stream
        self.started = started
        self.signum: int | None = None
        self.stop_reason: str | None = None
        self.stop_time: float | None = None
        self.done = threading.Event()
        self.hard_deadline = job.deadline + max(30.0, 0.1 * job.budget_s)
        self.lock = threading.RLock()

    def request_stop(self, reason: str) -> None:
        with self.lock:
            if self.stop_time is not None:
                return
            self.stop_reason = reason
            self.stop_time = time.time()
            self.job.stop_file.touch()
        self._say(f"batchfuzz: {reason}: stopping the workers and writing a partial report")

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.message(text)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            # A second signal: stop waiting for the workers.
            raise KeyboardInterrupt
        self.signum = signum
        self.request_stop(f"{signal.Signals(signum).name} received")

    def watchdog(self) -> None:
        while not self.done.wait(0.5):
            now = time.time()
            if self.stop_time is None and now > self.hard_deadline:
                self.request_stop(f"the run overran its budget by {now - self.job.deadline:.0f}s (an item hangs?)")
            if self.stop_time is not None and now > self.stop_time + GRACE_S and not self.done.is_set():
                self._say(f"batchfuzz: workers did not stop within {GRACE_S:.0f}s; writing the partial report and exiting")
                code = finish(self.job, self, self.stream, partial=True)
                states = read_states(self.job.items_dir)
                for s in states.values():  # our own worker processes, by the pids they recorded
                    pid = int(s.get("pid", 0))
                    if pid and pid != os.getpid() and s.get("status") == "running":
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
                self.stream.flush()
                os._exit(code)


def run(args: argparse.Namespace, stream: TextIO | None = None) -> int:
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False)")
    items = plan(args)
    database = _database(args)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    report_dir = Path(args.report).absolute()
    corpus_dir = Path(args.corpus).absolute() if args.corpus else corpus.default_dir()
    _prepare_report_dir(report_dir)
    corpus_dir.mkdir(parents=True, exist_ok=True)
    if database:
        Path(database).mkdir(parents=True, exist_ok=True)
    started = time.time()
    job = Job(items=items, report_dir=str(report_dir), corpus_dir=str(corpus_dir), database=database,
              profile=args.profile, seed=seed, workers=args.workers, budget_s=float(args.budget),
              deadline=started + float(args.budget), rounds=args.rounds,
              extra={"replay_command": _replay_command(args, seed)})
    run_dir = job.run_dir
    job_path = run_dir / "job.json"
    job.save(job_path)
    (run_dir / "pytest.ini").write_text("[pytest]\n")

    out = stream or _progress_stream()
    mode = args.progress
    if mode == "auto":
        mode = "table" if out.isatty() else "lines"
    from batchfuzz.progress import Progress

    progress = Progress(out, job, started, tty=(mode == "table")) if mode != "none" else None
    out.write(f"batchfuzz fuzz: {len(items)} work items ({len({i.contract for i in items})} contracts) on {args.device}, "
              f"budget {args.budget:g}s, {args.workers} worker(s), profile {args.profile}, seed {seed}\n"
              f"  database {database or 'off'}; corpus {corpus_dir}; report {report_dir}\n")
    out.flush()
    ctl = _Controller(job, progress, out, started)
    code = _run_pytest(job, job_path, ctl, progress, args.workers)
    return code if code is not None else finish(job, ctl, out, partial=ctl.stop_time is not None)


def _run_pytest(job: Job, job_path: Path, ctl: _Controller, progress: Any, workers: int) -> int | None:
    """Run the work items; None when pytest ran (whatever the items found), else an exit code."""
    import pytest

    handlers = {}
    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            handlers[sig] = signal.signal(sig, ctl.on_signal)
    env_before = {k: os.environ.get(k) for k in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS", "OMP_NUM_THREADS")}
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.environ.pop("PYTEST_ADDOPTS", None)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    log_path = job.run_dir / "pytest.log"
    saved = sys.stdout, sys.stderr
    watchdog = threading.Thread(target=ctl.watchdog, name="batchfuzz-watchdog", daemon=True)
    watchdog.start()
    if progress is not None:
        progress.start()
    exit_code: Any = None
    try:
        with open(log_path, "w") as log:
            sys.stdout = sys.stderr = log
            try:
                exit_code = pytest.main(_pytest_args(job_path, job.run_dir, workers))
            except KeyboardInterrupt:
                exit_code = pytest.ExitCode.INTERRUPTED
            finally:
                sys.stdout, sys.stderr = saved
    finally:
        ctl.done.set()
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for sig, h in handlers.items():
            signal.signal(sig, h)
        if progress is not None:
            progress.stop()
    if int(exit_code) in (int(pytest.ExitCode.OK), int(pytest.ExitCode.TESTS_FAILED)):
        return None
    if int(exit_code) == int(pytest.ExitCode.INTERRUPTED) or ctl.stop_time is not None:
        if ctl.stop_time is None:
            ctl.stop_reason = "interrupted"
            ctl.stop_time = time.time()
        return None
    tail = log_path.read_text()[-4000:] if log_path.exists() else ""
    ctl.stream.write(f"batchfuzz: the internal pytest run failed (exit {int(exit_code)}); its log ({log_path}) ends:\n{tail}\n")
    finish(job, ctl, ctl.stream, partial=True, note=f"internal pytest run failed with exit code {int(exit_code)}")
    return 3


def finish(job: Job, ctl: _Controller, out: TextIO, *, partial: bool, note: str | None = None) -> int:
    """Write the reports, print the summary, return the exit code."""
    from batchfuzz import report

    finished = time.time()
    states = read_states(job.items_dir)
    notes = [note] if note else []
    examples = sum(int(s.get("examples", 0)) for s in states.values())
    not_run = [s for s in states.values() if s.get("status") == "not run" and "budget" in s.get("reason", "")]
    too_small = examples == 0 and not partial
    if not_run:
        notes.append(f"{len(not_run)} of {len(job.items)} items did not run: the budget was spent before they started")
    if too_small:
        notes.append(f"budget {job.budget_s:g}s too small: no example ran")
    summary = report.build_summary(job, states, started=ctl.started, finished=finished, partial=partial,
                                   interrupted_by=ctl.stop_reason if partial else None, notes=notes)
    paths = report.write_reports(job.report_dir, summary)
    t = summary["totals"]
    out.write(f"\n{'contract':26} {'items':>6} {'examples':>9} {'failures':>8} {'cases/s':>8}\n")
    for name, c in summary["contracts"].items():
        out.write(f"{name:26} {c['items_run']:>3}/{c['items']:<2} {c['examples']:9d} {c['failures']:8d} {c['cases_per_second']:8.0f}\n")
    out.write(f"{'total':26} {'':6} {t['examples']:9d} {t['failures']:8d} {t['throughput']:8.0f} per wall second "
              f"({summary['wall_seconds']:.1f}s, {job.workers} worker(s))\n")
    for f in summary["failures"]:
        first = f["message"].splitlines()[0] if f.get("message") else ""
        out.write(f"\nFAILED {f['contract']} {f['implementation']} {f['property']}: {f['error_type']}: {first}\n"
                  f"  corpus: {f.get('corpus_file')} ({'new' if f.get('new') else 'already known'})\n")
        out.write("".join(f"  | {line}\n" for line in f.get("reproduction", "").splitlines()))
    for e in summary["errors"]:
        out.write(f"\nERROR {e['contract']} {e['implementation']}: {e['type']}: {e['message']}\n")
    for n in notes:
        out.write(f"note: {n}\n")
    out.write(f"reports: {', '.join(str(p) for p in paths)}" + (" (PARTIAL)" if partial else "") + "\n")
    out.write(f"rerun with the same seed: {job.extra.get('replay_command')}\n")
    out.flush()
    if partial:
        return 128 + ctl.signum if ctl.signum else 1
    if summary["failures"] or summary["errors"]:
        return 1
    if too_small:
        out.write(f"batchfuzz: error: budget {job.budget_s:g}s is too small to run anything; give it at least a few "
                  f"seconds (worker start-up alone takes ~1-5s)\n")
        out.flush()
        return 2
    return 0
