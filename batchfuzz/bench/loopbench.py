"""Speed of the fuzz loop against Hypothesis's own ceiling, and the cost of
isolation (``batchfuzz bench --loop``).

For every contract and property, on this machine, in one process, it counts
examples per second of five loops over the same strategy
(``contract.domain("spec").cases()``), under the same settings (no example
database, the ``dev`` profile's phases, ``--loop-examples`` examples) and
the same seed:

- ``ceiling``: a trivial Hypothesis test whose body does nothing: what
  Hypothesis itself reaches with that strategy (generation and its own
  bookkeeping);
- ``in-process``: :func:`batchfuzz.runner.hunt` with the target in this
  process (``execution.InProcess``), labels off;
- ``labels``: the same with the contract's input-class labels recorded
  (``hypothesis.event``), as the fuzz job records them;
- ``isolated``: ``hunt`` with the target in a worker process
  (``execution.Isolated``), labels off, as ``check`` and ``fuzz`` run it:
  Hypothesis draws the next example while the worker runs the last
  (``hunt``'s ``overlap``);
- ``waiting``: the same with ``overlap`` off, every call waited for in its
  own example: the cost of isolation the overlap hides.

The target is the contract's first CPU implementation (``--loop-target
oracle``: the oracle). With ``--devices cuda`` the targets are instead every
implementation that runs on CUDA (``impl:NAME@cuda``: the work items of
``fuzz --device cuda``), each with its own rows; contracts without one are
left out. The ceiling stays what it is (no target runs in it): the CPU
ceiling a CUDA item is judged against. A repetition runs the five loops of a property back
to back, in an order that rotates from property to property and repetition
to repetition, so a slow spell of the shared machine falls on all of them;
every loop of a property gets ``repeat`` samples. A cell is the median of a
sample's examples / seconds (``time.perf_counter`` around the Hypothesis
run); a ratio is that median divided by the contract's median ceiling (all
its ceiling samples). Failures of the target (there should be none: the
targets are correct) are reported and make the exit status 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from batchfuzz.machine import machine_info
from batchfuzz.output import write_outputs

CEILING, IN_PROCESS, LABELS, ISOLATED, WAITING = "ceiling", "in-process", "labels", "isolated", "waiting"
MODES = (CEILING, IN_PROCESS, LABELS, ISOLATED, WAITING)
# The ratio of the labelled in-process loop to the ceiling that issue 13 asks every property to reach.
GOAL = 0.5


@dataclass
class Sample:
    examples: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.examples / self.seconds if self.seconds > 0 else 0.0


@dataclass
class PropertyRow:
    """The samples of one property's loops (``ceiling`` too: the ceiling run
    next to them, with the same seed)."""

    contract: str
    property: str
    target: str = ""
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {m: [] for m in MODES})
    failures: list[str] = field(default_factory=list)

    def median(self, mode: str) -> float | None:
        xs = [s.rate for s in self.samples[mode]]
        return statistics.median(xs) if xs else None


@dataclass
class LoopReport:
    settings: dict[str, Any]
    machine: dict[str, Any]
    targets: dict[str, list[str]]
    rows: list[PropertyRow]

    def ceiling(self, contract: str) -> float | None:
        """The contract's ceiling: the median over all its ceiling samples."""
        xs = [s.rate for r in self.rows if r.contract == contract for s in r.samples[CEILING]]
        return statistics.median(xs) if xs else None

    def ratio(self, row: PropertyRow, mode: str) -> float | None:
        ceiling, value = self.ceiling(row.contract), row.median(mode)
        return None if ceiling is None or value is None or ceiling == 0 else value / ceiling

    @property
    def failures(self) -> list[str]:
        return [f"{r.contract}.{r.property}: {f}" for r in self.rows for f in r.failures]

    def below_goal(self) -> list[str]:
        """Properties whose labelled in-process loop is under ``GOAL`` of the ceiling."""
        out = []
        for r in self.rows:
            x = self.ratio(r, LABELS)
            if x is not None and x < GOAL:
                out.append(f"{r.contract}.{r.property}{self._at(r.target)}")
        return out

    def contracts(self) -> list[str]:
        return list(dict.fromkeys(r.contract for r in self.rows))

    def items(self) -> list[tuple[str, str]]:
        """The ``(contract, target)`` pairs measured: the fuzz job's work items."""
        return list(dict.fromkeys((r.contract, r.target) for r in self.rows))

    def _several_targets(self) -> bool:
        return any(len(refs) > 1 for refs in self.targets.values())

    def _at(self, target: str) -> str:
        """`` TARGET`` where a contract has several targets (a name needs it), else ``""``."""
        return f" {target}" if self._several_targets() else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings, "machine": self.machine, "targets": self.targets,
            "timing": "examples / seconds of one Hypothesis run (time.perf_counter around it); median over repetitions; "
                      "ratio = median / the contract's median ceiling; the five loops of a property interleaved in a "
                      "rotating order",
            "ceilings": {c: self.ceiling(c) for c in self.contracts()},
            "properties": [{
                "contract": r.contract, "property": r.property, "target": r.target,
                "samples": {m: [{"examples": s.examples, "seconds": s.seconds} for s in r.samples[m]] for m in MODES},
                "median_rate": {m: r.median(m) for m in MODES},
                "ratio": {m: self.ratio(r, m) for m in MODES if m != CEILING},
                "failures": r.failures,
            } for r in self.rows],
            "below_goal": self.below_goal(), "goal": GOAL, "failures": self.failures,
        }

    # ------------------------------------------------------------ tables

    def _property_rows(self) -> tuple[list[str], list[list[str]]]:
        """Per property: each loop's median rate [lowest-highest sample] and
        its ratio to the contract's ceiling."""
        head = ["contract", "target", "property", "ceiling /s"] + [f"{m} /s" for m in MODES[1:]] + [f"{m}/ceiling" for m in MODES[1:]]
        rows = []
        for r in self.rows:
            rows.append([r.contract, r.target, r.property, self._spread(r.contract, CEILING)]
                        + [_rate(r.median(m)) + _range(r.samples[m]) for m in MODES[1:]]
                        + [_pct(self.ratio(r, m)) for m in MODES[1:]])
        return head, rows

    def _spread(self, contract: str, mode: str) -> str:
        samples = [s for r in self.rows if r.contract == contract for s in r.samples[mode]]
        return _rate(self.ceiling(contract)) + _range(samples) if mode == CEILING else "-"

    def _contract_rows(self) -> tuple[list[str], list[list[str]]]:
        """Per item (contract and target): the contract's ceiling; per loop the
        median rate over its properties, and the ratio to the ceiling as median
        (lowest); the property whose labelled loop is slowest."""
        head = (["contract", "target", "properties", "ceiling /s"] + [f"{m} /s" for m in MODES[1:]]
                + [f"{m}/ceiling" for m in MODES[1:]] + ["slowest with labels"])
        rows = []
        for c, target in self.items():
            mine = [r for r in self.rows if r.contract == c and r.target == target]
            rates, ratios = [], []
            for m in MODES[1:]:
                rs = [x for x in (r.median(m) for r in mine) if x is not None]
                xs = [x for x in (self.ratio(r, m) for r in mine) if x is not None]
                rates.append(_rate(statistics.median(rs)) if rs else "-")
                ratios.append(f"{_pct(statistics.median(xs))} ({_pct(min(xs))})" if xs else "-")
            slowest = min(mine, key=lambda r: self.ratio(r, LABELS) or 0.0)
            rows.append([c, target, str(len(mine)), self._spread(c, CEILING)] + rates + ratios
                        + [f"{slowest.property} {_pct(self.ratio(slowest, LABELS))}"])
        return head, rows

    def to_text(self) -> str:
        head, rows = self._property_rows()
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(cell.ljust(widths[i]) if i < 3 else cell.rjust(widths[i]) for i, cell in enumerate(row))
                 for row in [head, ["-" * w for w in widths], *rows]]
        lines.append(self._legend())
        below = self.below_goal()
        lines.append(f"labelled in-process loop below {GOAL:.0%} of the ceiling: {', '.join(below) if below else 'none'}")
        lines += [f"FAILURE {f}" for f in self.failures]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        out = [self._caption(), ""]
        for head, rows in (self._contract_rows(), self._property_rows()):
            out += ["| " + " | ".join(head) + " |",
                    "|" + "|".join("---" if i < 3 else "---:" for i in range(len(head))) + "|"]
            out += ["| " + " | ".join(r) + " |" for r in rows]
            out.append("")
        out.append(self._legend())
        out += [f"- FAILURE {f}" for f in self.failures]
        return "\n".join(out) + "\n"

    def _caption(self) -> str:
        s, m = self.settings, self.machine
        return (f"Examples per second, {s['examples']} examples per loop, {s['repeat']} repetitions (median), seed {s['seed']}, "
                f"targets: {s['target']} on {', '.join(s.get('devices', ['cpu']))}; {m['cpu_count']} CPUs, "
                f"{m['cuda_device'] + ', torch ' + m['torch'] + ', ' if 'cuda_device' in m else ''}"
                f"Python {m['python']}, Hypothesis {m['hypothesis']}, {m['date']}.")

    def _legend(self) -> str:
        return ("ceiling: the same strategy under a test whose body does nothing; in-process: runner.hunt, target in this "
                "process, labels off; labels: the same recording the contract's labels (the fuzz job's default); "
                "isolated: the target in a worker process, labels off, the next example drawn while it runs (as check "
                "and fuzz run it); waiting: the same, every call waited for in its own example. Rates: median "
                "[lowest-highest sample]; ratios: "
                "median rate / the contract's median ceiling; per contract: median over its properties (lowest)")


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _range(samples: list[Sample]) -> str:
    """`` [lowest-highest]`` of the samples' rates (the noise), when there are several."""
    if len(samples) < 2:
        return ""
    rates = [x.rate for x in samples]
    return f" [{min(rates):.0f}-{max(rates):.0f}]"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


# ---------------------------------------------------------------- measuring


def _settings(examples: int) -> Any:
    from hypothesis import settings

    from batchfuzz import profiles

    profiles.register_profiles()
    return settings(settings.get_profile("dev"), database=None, max_examples=examples)


def ceiling_run(strategy: Any, run_settings: Any, seed: int) -> Sample:
    """A Hypothesis test over ``strategy`` whose body does nothing, under the
    settings and the seed a hunt gets (``report_multiple_bugs`` off, as there)."""
    from hypothesis import given, settings
    from hypothesis import seed as hypothesis_seed

    count = [0]

    def body(case: Any) -> None:
        count[0] += 1

    test = given(case=strategy)(body)
    test = settings(run_settings, report_multiple_bugs=False)(hypothesis_seed(seed)(test))
    start = time.perf_counter()
    test()
    return Sample(count[0], time.perf_counter() - start)


def targets_of(contract: Any, target: str, devices: tuple[str, ...]) -> list[str]:
    """The references a contract's loops run, per device in ``devices``: on
    ``cpu`` its first CPU implementation (or the oracle, ``target="oracle"``);
    on ``cuda`` every implementation that runs there (none: no rows)."""
    refs = []
    for device in devices:
        if device == "cpu":
            refs.append("oracle" if target == "oracle" else
                        f"impl:{next(i.name for i in contract.implementations if 'cpu' in i.devices)}@cpu")
        else:
            refs += [f"impl:{i.name}@{device}" for i in contract.implementations if device in i.devices]
    return refs


def measure(contracts: list[str] | None = None, *, examples: int = 100, repeat: int = 3, target: str = "impl",
            seed: int = 0, log: Callable[[str], None] | None = None, devices: tuple[str, ...] = ("cpu",)) -> LoopReport:
    """Run the five loops of every property of ``contracts`` (default: all)
    ``repeat`` times each, interleaved, for each of the contract's targets
    on ``devices`` (see the module docstring)."""

    from batchfuzz import registry
    from batchfuzz.execution import start_fork_server

    devices = tuple(devices)
    _check_measure(examples, repeat, target, devices)
    names = [c.name for c in registry.select(contracts or None)]
    start_fork_server()
    rs = _settings(examples)
    rows: list[PropertyRow] = []
    refs: dict[str, list[str]] = {}
    rotation = _Rotation()
    for name in names:
        contract = registry.get(name)
        mine_refs = targets_of(contract, target, devices)
        if mine_refs:
            refs[name] = mine_refs
        for ref in mine_refs:
            mine, seconds = _measure_target(contract, ref, rs, seed, repeat, rotation)
            rows += mine
            if log is not None:
                log(f"  {name} {ref}: {len(mine)} properties x {repeat} repetitions in {seconds:.1f}s")
    machine = {**machine_info(), "date": time.strftime("%Y-%m-%d")}
    if "cuda" in devices:
        import torch

        machine["cuda_device"] = torch.cuda.get_device_name(0)
        machine["torch"] = torch.__version__
    settings_out = {"examples": examples, "repeat": repeat, "seed": seed, "target": target, "devices": list(devices),
                    "contracts": names, "profile": "dev", "database": None, "phases": [p.name for p in rs.phases]}
    return LoopReport(settings_out, machine, refs, rows)


def _check_measure(examples: int, repeat: int, target: str, devices: tuple[str, ...]) -> None:
    """A ValueError naming the first of ``measure``'s arguments that is wrong."""
    from batchfuzz import registry

    if examples < 1:
        raise ValueError(f"examples must be >= 1, got {examples}")
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    if target not in ("impl", "oracle"):
        raise ValueError(f"target must be 'impl' or 'oracle', got {target!r}")
    if not devices or any(d not in registry.DEVICES for d in devices):
        raise ValueError(f"devices must be some of {', '.join(registry.DEVICES)}, got {','.join(devices) or 'none'}")
    if target == "oracle" and devices != ("cpu",):
        raise ValueError(f"the oracle runs on the host: target 'oracle' takes devices cpu, got {','.join(devices)}")
    if "cuda" in devices:
        import torch

        if not torch.cuda.is_available():
            raise ValueError("devices cuda: no CUDA device is available (torch.cuda.is_available() is False)")


class _Rotation:
    """The loops' order: rotated by one for every (property, repetition) of the whole run."""

    def __init__(self) -> None:
        self.turn = 0

    def next(self) -> tuple[str, ...]:
        k = self.turn % len(MODES)
        self.turn += 1
        return MODES[k:] + MODES[:k]


def _measure_target(contract: Any, ref: str, rs: Any, seed: int, repeat: int,
                    rotation: _Rotation) -> tuple[list[PropertyRow], float]:
    """The rows of one target and their seconds: a warm-up (not counted),
    then ``repeat`` rounds of every property's loops."""
    from batchfuzz import runner
    from batchfuzz.execution import InProcess, Isolated

    here = InProcess(contract, _load(contract, ref), ref)
    isolated = Isolated(contract, ref)
    try:
        info = isolated.describe()
        if info.get("error"):
            raise ValueError(f"{contract.name} {ref}: {info['error']}")
        # Warm-up (untimed): the strategy's first draws, the target's first calls, the worker's imports.
        warm = _settings(min(rs.max_examples, 10))
        ceiling_run(contract.domain("spec").cases(), warm, seed)
        for ex in (here, isolated):
            runner.hunt(contract, ex, contract.properties[0], runner.HuntOptions(
                warm, seed=seed, domain="spec", reduce=False, labels=True), target_name=ref)
        mine = [PropertyRow(contract.name, p.name, ref) for p in contract.properties]
        t0 = time.perf_counter()
        for rep in range(repeat):
            for row in mine:
                s = runner._round_seed(seed, contract.name, row.property, rep)
                for mode in rotation.next():
                    _sample(row, mode, contract, here if mode in (IN_PROCESS, LABELS) else isolated, rs, s)
        return mine, time.perf_counter() - t0
    finally:
        isolated.close()


def _sample(row: PropertyRow, mode: str, contract: Any, executor: Any, rs: Any, seed: int) -> None:
    """One loop of one property: its examples and seconds (and a failure, where one came) into ``row``."""
    from batchfuzz import runner

    if mode == CEILING:
        # A fresh strategy, as every hunt builds its own.
        row.samples[mode].append(ceiling_run(contract.domain("spec").cases(), rs, seed))
        return
    options = runner.HuntOptions(rs, seed=seed, domain="spec", reduce=False, labels=mode == LABELS,
                                 overlap=mode == ISOLATED)
    r = runner.hunt(contract, executor, contract.property(row.property), options, target_name=row.target)
    row.samples[mode].append(Sample(r.examples, r.seconds))
    if r.failure is not None:
        row.failures.append(f"{mode}: {r.failure.error_type}: {r.failure.message[:200]}")


def _load(contract: Any, ref: str) -> Any:
    from batchfuzz.targets import parse

    return parse(ref).load(contract)


# ---------------------------------------------------------------- the command


def run_command(args: argparse.Namespace) -> bool:
    """``batchfuzz bench --loop``: measure, print the table, write ``--json`` / ``--markdown``; True when a target failed."""
    from batchfuzz.usage import UsageError

    quick = bool(args.quick)
    examples = args.loop_examples if args.loop_examples is not None else (20 if quick else 100)
    repeat = args.repeat if args.repeat is not None else (1 if quick else 3)
    names = [n.strip() for n in args.loop_contracts.split(",") if n.strip()] or None
    devices = loop_devices(args.devices)
    print(f"batchfuzz bench --loop: {examples} examples per loop, {repeat} repetitions, target {args.loop_target} "
          f"on {','.join(devices)}", flush=True)
    try:
        report = measure(names, examples=examples, repeat=repeat, target=args.loop_target, seed=args.seed,
                         log=lambda line: print(line, file=sys.stderr, flush=True), devices=devices)
    except (ValueError, LookupError) as exc:  # LookupError: registry.UnknownName, an unknown contract
        raise UsageError(f"--loop-contracts: {exc}" if isinstance(exc, LookupError) else str(exc)) from None
    print(report.to_text())
    write_outputs(args.json_path, report.to_dict(), args.markdown_path, report.to_markdown())
    return bool(report.failures)


def loop_devices(spec: str) -> tuple[str, ...]:
    """``--devices`` as ``--loop`` reads it: ``auto`` (the default) is ``cpu``,
    the loop's own default; else comma-separated ``cpu`` and ``cuda``."""
    from batchfuzz.usage import UsageError

    if spec.strip() in ("", "auto"):
        return ("cpu",)
    devices = tuple(dict.fromkeys(d.strip() for d in spec.split(",") if d.strip()))
    bad = [d for d in devices if d not in ("cpu", "cuda")]
    if bad or not devices:
        raise UsageError(f"--devices: with --loop, comma-separated cpu and cuda (or auto: cpu), got {spec!r}")
    return devices
