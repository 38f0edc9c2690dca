"""Microbenchmark of the drop-in exact microbatching check against the check
the engine ships, on realistic steps (``batchfuzz bench``, the default; :func:`run_command`).

Per scenario (profile x number of KV groups, steps from
``batchfuzz.workloads.sample_realizable_step``), in one process, with the
columns interleaved in a rotating order inside every repetition, it times
one call of each of:

- ``exact``: ``ExactMicrobatchCheck.__call__`` from
  ``batchfuzz.impl.allow_microbatching_numpy``, the engine path: the checker is built once
  per scenario, like an engine builds it once, and is called with the
  engine's arrays (int32 counts, int32 tables of persistent width). It checks
  shapes and dtypes, not values, as the engine's check validates nothing;
- ``shipped``: :func:`batchfuzz.contracts._microbatch.shipped_vectorised`, our
  re-expression of the check vLLM ships (``GPUModelRunner._allow_microbatching``) at its cost: a dense
  rows x span gather and ``np.unique`` per group, ``np.isin`` reader by
  reader, the first hit returning;
- ``find``: ``ExactMicrobatchCheck.find_conflicts`` (the whole conflict set);
- ``exact+validation`` (optional): the canonical ``allow_microbatching``,
  which validates its input (``batchfuzz.reference._step.check_step``) first;
- ``engine`` (optional): the engine's real function, through a factory the
  caller supplies (see :data:`EngineFactory`; ``batchfuzz bench
  --vllm-wheel FILE`` passes vLLM's ``GPUModelRunner._allow_microbatching`` cut
  out of the wheel);
- ``torch <device>`` and ``find torch <device>`` (optional, per device):
  ``ExactConflictsTorch`` (``batchfuzz.impl.find_conflicts_torch``), the
  sync-free decision and conflict set, inputs resident on the device (int32,
  copied there before timing), ``num_tokens`` the step's; on CUDA the timed
  region is ``torch.cuda.synchronize()``, the call, ``torch.cuda.synchronize()``
  (the queue is empty before it), so the figure is the step's device time
  plus the launches; on CUDA also ``torch cuda graph`` and ``find torch cuda
  graph``, the same calls replayed from a CUDA graph captured once per step
  shape (``batchfuzz.impl._cuda_graph.CapturedStep``: the inputs copied into
  the graph's static buffers, then one replay), so without the launches.

Untimed, on every step: ``shipped`` must decide as the registered variant
``batchfuzz.contracts._microbatch.shipped_allow_microbatching``, ``engine`` as
``shipped``, ``exact+validation`` and the torch decisions as ``exact``,
the torch conflict sets must give ``find``'s rows (and not overflow); on the first
``oracle_steps`` steps of each scenario, ``exact`` must equal the oracle
``batchfuzz.reference.allow_microbatching`` and ``find`` must equal
``batchfuzz.reference.find_conflicts`` (the oracle is slow: it is run once
and its time is reported apart). A cell is the median over repetitions x
steps of ``time.perf_counter`` around one call.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from batchfuzz.contracts._microbatch import shipped_vectorised
from batchfuzz.machine import machine_info
from batchfuzz.output import write_outputs
from batchfuzz.reference._step import Step
from batchfuzz.usage import UsageError

PROFILES = ("decode-heavy", "mixed", "prefill-heavy")
GROUP_COUNTS = (1, 2, 3)
SCENARIOS = tuple(f"{p}/G{g}" for p in PROFILES for g in GROUP_COUNTS)

# Given a step and its info (``info["reorder_batch_threshold"]``), return a
# zero-argument callable that runs the engine's real check on that step and
# returns its bool; the setup (a stand-in model runner, say) happens in the
# factory, outside the timing.
EngineFactory = Callable[[Step, dict[str, Any]], Callable[[], bool]]

EXACT, SHIPPED, FIND, VALIDATED, ENGINE = "exact", "shipped", "find", "exact+validation", "engine"


def torch_columns(device: str) -> tuple[str, ...]:
    """The names of the torch decision's and conflict set's columns on
    ``device``; on CUDA also both replayed from a CUDA graph."""
    eager = (f"torch {device}", f"find torch {device}")
    return eager + ((f"torch {device} graph", f"find torch {device} graph") if device.startswith("cuda") else ())


# ---------------------------------------------------------------- report


@dataclass
class ScenarioResult:
    name: str
    profile: str
    num_groups: int
    steps: list[dict[str, Any]]  # per step: shape summary, decisions, agreement
    medians: dict[str, float]  # column -> median seconds per call
    samples: dict[str, int]
    oracle_seconds: list[float]  # one oracle decision per checked step
    generation_seconds: float

    def ratio(self, a: str, b: str) -> float | None:
        x, y = self.medians.get(a), self.medians.get(b)
        return None if x is None or y is None or y == 0 else x / y

    @property
    def ratios(self) -> dict[str, float | None]:
        pairs = [(EXACT, SHIPPED), (FIND, EXACT), (VALIDATED, SHIPPED), (ENGINE, SHIPPED), (EXACT, ENGINE), (FIND, ENGINE)]
        return {f"{a}/{b}": self.ratio(a, b) for a, b in pairs if a in self.medians and b in self.medians}

    @property
    def mismatches(self) -> list[str]:
        return [m for s in self.steps for m in s["mismatches"]]


@dataclass
class MicrobenchReport:
    settings: dict[str, Any]
    machine: dict[str, Any]
    columns: list[str]
    scenarios: list[ScenarioResult] = field(default_factory=list)

    @property
    def mismatches(self) -> list[str]:
        return [f"{sc.name}: {m}" for sc in self.scenarios for m in sc.mismatches]

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings, "machine": self.machine, "columns": self.columns,
            "timing": "time.perf_counter around one call; median over repetitions x steps; columns interleaved in a "
                      "rotating order inside each repetition; the oracle once per checked step, untimed in the table",
            "scenarios": [{
                "name": sc.name, "profile": sc.profile, "num_groups": sc.num_groups,
                "median_seconds": sc.medians, "samples": sc.samples, "ratios": sc.ratios,
                "oracle_seconds": sc.oracle_seconds, "generation_seconds": round(sc.generation_seconds, 3),
                "steps": sc.steps,
            } for sc in self.scenarios],
            "mismatches": self.mismatches,
        }

    def _rows(self) -> tuple[list[str], list[list[str]]]:
        ratio_names = [r for r in (f"{EXACT}/{SHIPPED}", f"{FIND}/{EXACT}", f"{ENGINE}/{SHIPPED}", f"{EXACT}/{ENGINE}",
                                   f"{FIND}/{ENGINE}")
                       if any(r in sc.ratios for sc in self.scenarios)]
        head = ["scenario", "R", "tokens", "decisions e/s/o"] + [f"{c} ms" for c in self.columns] + ratio_names
        rows = []
        for sc in self.scenarios:
            per = [s for s in sc.steps]
            decisions = ", ".join(_decision_cell(s) for s in per)
            rows.append([sc.name, "/".join(str(s["num_reqs"]) for s in per), "/".join(str(s["num_tokens"]) for s in per),
                         decisions] + [_fmt_ms(sc.medians.get(c)) for c in self.columns]
                        + [_fmt_ratio(sc.ratios.get(r)) for r in ratio_names])
        return head, rows

    def to_text(self) -> str:
        head, rows = self._rows()
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row))
                 for row in [head, ["-" * w for w in widths], *rows]]
        lines.append(_legend(self.settings))
        lines += [f"MISMATCH {m}" for m in self.mismatches]
        return "\n".join(lines)

    def to_markdown(self) -> str:
        head, rows = self._rows()
        s = self.settings
        out = [f"Steps: {s['num_reqs']} requests (max_num_seqs) x {s['width']} columns in group 0, {s['steps']} steps per "
               f"scenario (seeds {s['seed']}..{s['seed'] + s['steps'] - 1}), {s['repeat']} repetitions; median ms per call.",
               "", "| " + " | ".join(head) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out += ["", _legend(s)]
        out += [f"- MISMATCH {m}" for m in self.mismatches]
        return "\n".join(out) + "\n"


def _decision_cell(step: dict[str, Any]) -> str:
    d = step["decisions"]

    def word(v: Any) -> str:
        return "-" if v is None else ("allow" if v else "veto")

    return f"{word(d.get(EXACT))}/{word(d.get(SHIPPED))}/{word(d.get('oracle'))}"


def _legend(settings: dict[str, Any]) -> str:
    text = ("decisions e/s/o: exact / shipped / oracle per step ('-': oracle not run on that step); exact is the "
            "engine path (shapes checked, values not, as the engine's check); exact+validation adds check_step")
    if settings.get("engine_label"):
        text += f"; engine: {settings['engine_label']}, decided as shipped on every step unless a MISMATCH line says otherwise"
    if settings.get("devices"):
        text += ("; torch/find torch: ExactConflictsTorch, inputs resident on the device (graph: replayed from a CUDA "
                 "graph), timed between two "
                 "torch.cuda.synchronize() on CUDA")
    return text


def _fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 10 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def _fmt_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


# ---------------------------------------------------------------- run


def _summary(step: Step, info: dict[str, Any]) -> dict[str, Any]:
    q = np.asarray(step.num_scheduled_tokens)
    c = np.asarray(step.num_computed_tokens)
    thr = info["reorder_batch_threshold"]
    return {"num_reqs": int(q.size), "num_tokens": int(q.sum()), "computed_tokens": int(c.sum()),
            "shipped_readers": int(((q > thr) & (c > 0)).sum()), "widths": [int(t.shape[1]) for t in step.block_tables],
            "block_sizes": [int(b) for b in step.block_sizes], "same_step_hits": len(info.get("same_step_hits", ()))}


def _select(names: Sequence[str] | None) -> list[str]:
    if names is None:
        return list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise ValueError(f"scenarios must be among {', '.join(SCENARIOS)}, got {list(names)}")
    return list(names)


@dataclass(frozen=True)
class MicrobenchOptions:
    """What ``run`` measures: ``num_reqs`` (max_num_seqs of the modelled
    engine), ``width`` (columns of group 0's table), ``steps`` per scenario,
    ``repeat``, ``oracle_steps`` (steps per scenario the oracle checks; 0:
    none), ``validated`` (also time ``exact+validation``), ``seed``,
    ``devices`` (torch devices for the ``torch`` and ``find torch`` columns)."""

    num_reqs: int = 256
    width: int = 2048
    steps: int = 2
    repeat: int = 7
    oracle_steps: int = 1
    validated: bool = True
    seed: int = 0
    devices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for label, value, low in (("num_reqs", self.num_reqs, 1), ("width", self.width, 2), ("steps", self.steps, 1),
                                  ("repeat", self.repeat, 1), ("oracle_steps", self.oracle_steps, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{label} must be an int >= {low}, got {value!r}")


def run(scenarios: Sequence[str] | None = None, options: MicrobenchOptions = MicrobenchOptions(), *,
        engine: EngineFactory | None = None, engine_label: str | None = None,
        log: Callable[[str], None] | None = None) -> MicrobenchReport:
    """Time the columns (module docstring) on ``options.steps`` steps per scenario.

    ``scenarios``: names like ``"mixed/G2"`` (default: all nine);
    ``engine``: adds the ``engine`` column (``engine_label`` names it in the
    report). ``log`` receives progress lines.
    """
    o = options
    names = _select(scenarios)
    devices = list(o.devices)
    columns = ([EXACT, SHIPPED, FIND] + ([VALIDATED] if o.validated else []) + ([ENGINE] if engine is not None else [])
               + [col for dev in devices for col in torch_columns(dev)])
    report = MicrobenchReport(
        settings={"scenarios": names, "num_reqs": o.num_reqs, "width": o.width, "steps": o.steps, "repeat": o.repeat,
                  "oracle_steps": o.oracle_steps, "validated": o.validated, "seed": o.seed, "engine": engine is not None,
                  "engine_label": engine_label, "devices": devices},
        machine=machine_info(), columns=columns)
    if devices:
        import torch

        report.machine["torch"] = torch.__version__
        report.machine["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            report.machine["cuda_device"] = torch.cuda.get_device_name(0)
    for name in names:
        result = _scenario(name, o, columns, engine)
        report.scenarios.append(result)
        if log is not None:
            ratios = ", ".join(f"{k} {_fmt_ratio(v)}" for k, v in result.ratios.items())
            log(f"  {name}: generated in {result.generation_seconds:.1f}s; {ratios}")
    return report


def _scenario(name: str, o: MicrobenchOptions, columns: list[str], engine: EngineFactory | None) -> ScenarioResult:
    """One scenario: its steps drawn, every column's call checked against the others, then timed."""
    from batchfuzz.impl.allow_microbatching_numpy import ExactMicrobatchCheck
    from batchfuzz.workloads import sample_realizable_step

    profile, groups = name.split("/G")
    t0 = time.perf_counter()
    drawn = [sample_realizable_step(np.random.default_rng(o.seed + k), num_reqs=o.num_reqs, max_blocks_per_req=o.width,
                                    profile=profile, num_groups=int(groups)) for k in range(o.steps)]
    gen = time.perf_counter() - t0
    first = drawn[0][0]
    num_blocks = 1 + max(int(t.max(initial=0)) for s, _ in drawn for t in s.block_tables)
    check = ExactMicrobatchCheck(o.num_reqs, [int(t.shape[1]) for t in first.block_tables], list(first.block_sizes),
                                 num_blocks)
    finders = {dev: _TorchColumns(dev, o.num_reqs, first, num_blocks, max(int(s.num_scheduled_tokens.sum()) for s, _ in drawn))
               for dev in o.devices}
    syncs = {col: f.sync for f in finders.values() for col in torch_columns(f.device) if f.sync is not None}
    calls: list[dict[str, Callable[[], Any]]] = []
    step_out: list[dict[str, Any]] = []
    oracle_seconds: list[float] = []
    for k, (step, info) in enumerate(drawn):
        per = _calls(step, info, check, o.validated, engine, finders)
        calls.append(per)
        out, seconds = _step_decisions(k, step, info, per, check, finders, checked_by_oracle=k < o.oracle_steps)
        step_out.append(out)
        if seconds is not None:
            oracle_seconds.append(seconds)
    samples = _timed(calls, columns, syncs, o.repeat)
    return ScenarioResult(name, profile, int(groups), step_out, {col: statistics.median(xs) for col, xs in samples.items()},
                          {col: len(xs) for col, xs in samples.items()}, oracle_seconds, gen)


def _calls(step: Step, info: dict[str, Any], check: Any, validated: bool, engine: EngineFactory | None,
           finders: dict[str, _TorchColumns]) -> dict[str, Callable[[], Any]]:
    """Every column's call on ``step``, its arguments bound."""
    from batchfuzz.impl.allow_microbatching_numpy import allow_microbatching

    n, c, q, tables, sizes = step.num_reqs, step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes
    thr = int(info["reorder_batch_threshold"])
    per: dict[str, Callable[[], Any]] = {
        EXACT: partial(check, n, c, q, tables),
        SHIPPED: partial(shipped_vectorised, n, c, q, tables, sizes, thr),
        FIND: partial(check.find_conflicts, n, c, q, tables),
    }
    if validated:
        per[VALIDATED] = partial(allow_microbatching, c, q, tables, sizes)
    if engine is not None:
        per[ENGINE] = engine(step, info)
    for finder in finders.values():
        per.update(finder.calls(step))
    return per


def _step_decisions(k: int, step: Step, info: dict[str, Any], per: dict[str, Callable[[], Any]], check: Any,
                    finders: dict[str, _TorchColumns], *, checked_by_oracle: bool) -> tuple[dict[str, Any], float | None]:
    """Step ``k``'s summary with every column's decision and the mismatches
    between them; the oracle's seconds where it checked the step."""
    from batchfuzz.contracts._microbatch import shipped_allow_microbatching

    c, q, tables, sizes = step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes
    torch_cols = {col for f in finders.values() for col in torch_columns(f.device)}
    decisions: dict[str, Any] = {EXACT: bool(per[EXACT]()), "paths": list(check.last_paths)}
    decisions.update({col: bool(f()) for col, f in per.items() if col not in (EXACT, FIND) and col not in torch_cols})
    rows = per[FIND]()
    decisions[FIND] = len(rows)
    decisions["shipped variant"] = bool(shipped_allow_microbatching(c, q, tables, sizes, int(info["reorder_batch_threshold"])))
    mismatches = []
    if decisions[SHIPPED] != decisions["shipped variant"]:
        mismatches.append(f"step {k}: shipped {decisions[SHIPPED]} != registered variant {decisions['shipped variant']}")
    if ENGINE in decisions and decisions[ENGINE] != decisions[SHIPPED]:
        mismatches.append(f"step {k}: engine {decisions[ENGINE]} != shipped {decisions[SHIPPED]}")
    if VALIDATED in decisions and decisions[VALIDATED] != decisions[EXACT]:
        mismatches.append(f"step {k}: exact+validation {decisions[VALIDATED]} != exact {decisions[EXACT]}")
    for finder in finders.values():
        mismatches += [f"step {k}: {m}" for m in finder.compare(per, decisions, rows)]
    seconds = _oracle_decisions(k, step, check, decisions, mismatches) if checked_by_oracle else None
    return {**_summary(step, info), "decisions": decisions, "mismatches": mismatches}, seconds


def _oracle_decisions(k: int, step: Step, check: Any, decisions: dict[str, Any], mismatches: list[str]) -> float:
    """The oracle's decision and conflicts on step ``k``, compared with the
    exact check's (into ``decisions`` and ``mismatches``); its seconds."""
    from batchfuzz.reference import allow_microbatching as ref
    from batchfuzz.reference import find_conflicts as ref_conflicts

    n, c, q, tables, sizes = step.num_reqs, step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes
    t1 = time.perf_counter()
    decisions["oracle"] = bool(ref.allow_microbatching(c, q, tables, sizes))
    seconds = time.perf_counter() - t1
    found = {tuple(row) for row in check.find_conflicts(n, c, q, tables).tolist()}
    expected = ref_conflicts.find_conflicts(c, q, tables, sizes)
    decisions["oracle conflicts"] = len(expected)
    if decisions["oracle"] != decisions[EXACT]:
        mismatches.append(f"step {k}: exact {decisions[EXACT]} != oracle {decisions['oracle']}")
    if found != expected:
        mismatches.append(f"step {k}: find ({len(found)} conflicts) != oracle find_conflicts ({len(expected)})")
    return seconds


def _timed(calls: list[dict[str, Callable[[], Any]]], columns: list[str], syncs: dict[str, Callable[..., Any]],
           repeat: int) -> dict[str, list[float]]:
    """Every column's calls, ``repeat`` times in a rotating order: seconds per call."""
    samples: dict[str, list[float]] = {col: [] for col in columns}
    for rep in range(repeat):
        gc.collect()
        order = columns[rep % len(columns):] + columns[: rep % len(columns)]
        for per in calls:
            for col in order:
                f, sync = per[col], syncs.get(col)
                if sync is not None:
                    sync()
                t1 = time.perf_counter()
                f()
                if sync is not None:
                    sync()
                samples[col].append(time.perf_counter() - t1)
    return samples


class _TorchColumns:
    """The ``torch <device>`` and ``find torch <device>`` columns of one
    scenario: one ``ExactConflictsTorch`` built for it, each step's arrays
    copied to the device (int32, as the engine keeps them) before timing."""

    def __init__(self, device: str, max_num_reqs: int, first: Step, num_blocks: int, max_num_tokens: int) -> None:
        import torch

        from batchfuzz.impl.find_conflicts_torch import ExactConflictsTorch

        self.device = device
        self.finder = ExactConflictsTorch(max_num_reqs, [int(t.shape[1]) for t in first.block_tables], list(first.block_sizes),
                                          num_blocks, max_num_tokens, device)
        self.sync = torch.cuda.synchronize if self.finder.device.type == "cuda" else None
        self._torch = torch
        if self.finder.device.type == "cuda":
            from batchfuzz.impl._cuda_graph import CapturedStep

            self._graph_decide = CapturedStep(self.finder)
            self._graph_find = CapturedStep(self.finder.find_conflicts)

    def calls(self, step: Step) -> dict[str, Callable[[], Any]]:
        torch = self._torch

        def move(a: np.ndarray) -> Any:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(self.device)

        args = (step.num_reqs, move(step.num_computed_tokens), move(step.num_scheduled_tokens),
                [move(t) for t in step.block_tables])
        tokens = int(step.num_scheduled_tokens.sum())
        decide, find, *graphed = torch_columns(self.device)
        out: dict[str, Callable[[], Any]] = {decide: partial(self.finder, *args, num_tokens=tokens),
                                             find: partial(self.finder.find_conflicts, *args, tokens)}
        if graphed:
            out[graphed[0]] = partial(self._graph_decide, *args, tokens)
            out[graphed[1]] = partial(self._graph_find, *args, tokens)
        return out

    def compare(self, per: dict[str, Callable[[], Any]], decisions: dict[str, Any], rows: np.ndarray) -> list[str]:
        """Untimed: the torch decisions equal ``exact``, the torch rows ``find``'s."""
        names = torch_columns(self.device)
        out = []
        for decide in names[0::2]:
            decisions[decide] = bool(per[decide]())
            if decisions[decide] != decisions[EXACT]:
                out.append(f"{decide} {decisions[decide]} != exact {decisions[EXACT]}")
        for find in names[1::2]:
            found = per[find]()
            if bool(found.overflow):
                out.append(f"{find}: {int(found.num_pairs)} pairs overflow max_pairs ({self.finder.max_pairs})")
            elif not np.array_equal(found.to_numpy(), rows):
                out.append(f"{find} ({int(found.num_conflicts)} conflicts) != find ({rows.shape[0]})")
            decisions[find] = int(found.num_conflicts)
        return out


# ---------------------------------------------------------------- the command


def _engine_factory(wheel: str) -> tuple[Any, str]:
    """The ``engine`` column's factory for :func:`run`: the release's
    ``_allow_microbatching`` on a stand-in model runner built per step (untimed),
    with the step's ``reorder_batch_threshold``."""
    from batchfuzz import bind
    from batchfuzz.engines import SourceError, vllm

    try:
        source = vllm.ReleaseSource.from_wheel(wheel)
        prepare = vllm.allow_microbatching_on_steps(source)
    except SourceError as exc:
        raise UsageError(f"--vllm-wheel: {exc}") from None
    except (bind.Absent, bind.Unbindable) as exc:
        raise UsageError(f"--vllm-wheel: vllm {source.version} has no usable GPUModelRunner._allow_microbatching "
                         f"(it ships from 0.28.0): {exc}") from None

    def factory(step: Any, info: dict[str, Any]) -> Any:
        return prepare(step.num_reqs, step.num_computed_tokens, step.num_scheduled_tokens, list(step.block_tables),
                       list(step.block_sizes), int(info["reorder_batch_threshold"]))

    return factory, f"vllm {source.version} GPUModelRunner._allow_microbatching (cut out of {os.path.basename(wheel)})"


def run_command(args: Any) -> bool:
    """``batchfuzz bench`` (the default): parse the options' values, :func:`run`,
    print the table, write ``--json`` / ``--markdown``; True when a check disagreed."""
    from batchfuzz.bench.variants import select_scenarios

    quick = bool(args.quick)
    names = [n for n, _, _ in select_scenarios(args.scenarios)]
    engine, label = _engine_factory(args.vllm_wheel) if args.vllm_wheel else (None, None)
    spec = args.devices.strip()
    if spec == "auto":
        import torch

        devices = ["cuda"] if torch.cuda.is_available() else []
    else:
        devices = [] if spec in ("", "none") else [d.strip() for d in spec.split(",") if d.strip()]
    for dev in devices:
        if dev not in ("cpu", "cuda"):
            raise UsageError(f"--devices: unknown device {dev!r} (cpu, cuda, none or auto)")
    if devices and args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    try:
        options = MicrobenchOptions(
            num_reqs=args.num_reqs or (16 if quick else 256), width=args.width or (64 if quick else 2048),
            steps=args.steps or (1 if quick else 2), repeat=args.repeat or (3 if quick else 7),
            oracle_steps=0 if args.no_oracle else args.oracle_steps, seed=args.seed, devices=tuple(devices))
        report = run(names, options, engine=engine, engine_label=label,
                     log=lambda line: print(line, file=sys.stderr, flush=True))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(report.to_text())
    write_outputs(args.json_path, report.to_dict(), args.markdown_path, report.to_markdown())
    return bool(report.mismatches)
