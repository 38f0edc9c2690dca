"""``batchfuzz bench --variants``: the older, wider comparison of the
microbatch-conflict checks on realistic steps (the default bench is
:mod:`batchfuzz.bench.microbench`): every exact
implementation through its canonical binder (validation and host copies
included in its time), beside the shipped check's two copies and the oracle.
Steps come from the prefix-caching scheduler model (``batchfuzz.scheduler_model.
sample_realizable_step``): by default 256 requests (``max_num_seqs``), block
tables ``cdiv(max_model_len, B)`` wide with 2048 columns in group 0, 1 to 3
KV groups, decode-heavy, prefill-heavy and mixed. On each step, in one
process, interleaved (every repetition times every call once, in a
rotating order), it times:

- ``exact numpy``: ``batchfuzz.impl.allow_microbatching_numpy.allow_microbatching``
  (the exact, split-agnostic decision, a fresh checker per call);
- ``exact numpy find``: ``batchfuzz.impl.find_conflicts_numpy.find_conflicts``
  (the whole conflict set);
- ``validation``: ``batchfuzz.reference._step.check_step``, the input validation
  the exact implementations begin with (included in their times; the
  shipped check validates nothing);
- ``shipped numpy``: the engine's shipped check (docs/contracts.md, "What the engine
  ships") vectorised as the engine writes it
  (``batchfuzz.contracts._microbatch.shipped_vectorised``); checked on every step
  to decide exactly as ``shipped loops``;
- ``shipped loops``: ``batchfuzz.contracts._microbatch.shipped_allow_microbatching``
  (the plain-loop re-expression the registered variants use);
- ``exact torch <device>``: ``batchfuzz.impl.allow_microbatching_torch`` through its canonical
  binder (numpy in: validation and host-to-device copy included), and, on
  CUDA, ``... resident`` with inputs already on the device (the kernel and the
  one read of its result);
- ``oracle``: ``batchfuzz.reference.allow_microbatching`` (plain loops), on
  ``--oracle-repeat`` repetitions only (default 1): it is the slow spec.

Every call is timed with ``time.perf_counter`` around one call; a cell is
the median over repetitions and steps. A call whose first run takes more
than ``--slow`` seconds (the torch CPU grid at full size) is timed on
``--slow-repeat`` repetitions; the table shows ``(n=...)`` where a cell has
fewer samples than the others. The decisions are compared too:
exact vs oracle must agree (a disagreement is reported and the exit code is
1); shipped vs exact shows where the shipped check allows an unsafe split or
vetoes a safe one.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchfuzz.contracts._microbatch import shipped_vectorised
from batchfuzz.machine import machine_info
from batchfuzz.output import write_outputs
from batchfuzz.usage import UsageError

PROFILES = ("decode-heavy", "prefill-heavy", "mixed")
GROUP_COUNTS = (1, 2, 3)


# ---------------------------------------------------------------- the timed calls


@dataclass
class TimedCall:
    """One column of the table: a check timed on every step (``bench
    --variants`` names these; not a buggy variant of a contract,
    :class:`batchfuzz.registry.Variant`)."""

    name: str
    call: Callable[[Any, dict[str, Any]], Any]  # (step, info) -> result
    decision: bool = True  # the result is an allow/veto decision
    oracle: bool = False
    prepare: Callable[[Any], Any] | None = None  # per-step setup outside the timed call (device copies)


def _canon(step: Any) -> tuple[Any, Any, list[Any], list[int]]:
    """A step's arguments in the contract's canonical signature."""
    return step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes


def timed_calls(devices: list[str], oracle: bool) -> tuple[list[TimedCall], list[str]]:
    """The timed calls available in this checkout, and notes on those that are not."""
    out: list[TimedCall] = []
    notes: list[str] = []
    try:
        from batchfuzz.impl import allow_microbatching_numpy, find_conflicts_numpy

        out.append(TimedCall("exact numpy", lambda s, i: bool(allow_microbatching_numpy.allow_microbatching(*_canon(s)))))
        out.append(TimedCall("exact numpy find", lambda s, i: len(find_conflicts_numpy.find_conflicts(*_canon(s))),
                             decision=False))
        from batchfuzz.reference._step import check_step

        # The input validation both exact implementations start with (the shipped check does none).
        out.append(TimedCall("validation", lambda s, i: check_step(*_canon(s)) is not None, decision=False))
    except ImportError as exc:
        notes.append(f"exact numpy unavailable: {exc}")
    out.append(TimedCall("shipped numpy", lambda s, i: shipped_vectorised(len(s.num_scheduled_tokens), *_canon(s),
                                                                       i["reorder_batch_threshold"])))
    try:
        from batchfuzz.contracts._microbatch import shipped_allow_microbatching as shipped_loops

        out.append(TimedCall("shipped loops", lambda s, i: bool(shipped_loops(*_canon(s), i["reorder_batch_threshold"]))))
    except ImportError as exc:
        notes.append(f"shipped loops unavailable: {exc}")
    if devices:
        _torch_calls(devices, out, notes)
    if oracle:
        try:
            from batchfuzz.reference import allow_microbatching as ref

            out.append(TimedCall("oracle", lambda s, i: bool(ref.allow_microbatching(*_canon(s))), oracle=True))
        except ImportError as exc:
            notes.append(f"oracle unavailable: {exc}")
    return out, notes


def _torch_calls(devices: list[str], out: list[TimedCall], notes: list[str]) -> None:
    """The exact torch check's timed calls per device (into ``out``; what is unavailable into ``notes``)."""
    try:
        import torch

        from batchfuzz.impl import allow_microbatching_torch as ct

        for dev in devices:
            if dev == "cuda" and not torch.cuda.is_available():
                notes.append("torch cuda skipped: no CUDA device")
                continue
            bound: Callable[..., bool] = ct.bind(dev)

            def binder(s: Any, i: dict[str, Any], f: Callable[..., bool] = bound) -> bool:
                return bool(f(*_canon(s)))

            out.append(TimedCall(f"exact torch {dev}", binder))

            def resident(step: Any, dev: str = dev) -> Any:
                """The checker with its scratch buffers and the step's arrays on ``dev``, made outside the timed call."""
                from batchfuzz.reference._step import check_step

                return ct.checker_for(check_step(*_canon(step)), dev)

            if dev != "cpu":  # on CPU "resident" is the same computation without the copy
                out.append(TimedCall(f"exact torch {dev} resident", lambda s, i: bool(s[0](*s[1])), prepare=resident))
    except ImportError as exc:
        notes.append(f"exact torch unavailable: {exc}")


# ---------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    name: str
    profile: str
    num_groups: int
    steps: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    gen_seconds: float = 0.0


def select_scenarios(patterns: str) -> list[tuple[str, str, int]]:
    names = [(f"{p}/G{g}", p, g) for p in PROFILES for g in GROUP_COUNTS]
    wanted = [w.strip() for w in patterns.split(",") if w.strip()]
    chosen = [n for n in names if any(fnmatch.fnmatchcase(n[0], w) for w in wanted)]
    if not chosen:
        raise UsageError(f"--scenarios {patterns!r} matches none of {', '.join(n for n, _, _ in names)}")
    return chosen


def _summary(step: Any, info: dict[str, Any]) -> dict[str, Any]:
    q = np.asarray(step.num_scheduled_tokens)
    c = np.asarray(step.num_computed_tokens)
    thr = info["reorder_batch_threshold"]
    return {
        "num_reqs": int(q.size), "num_tokens": int(q.sum()), "decodes": int((q <= thr).sum()),
        "computed_tokens": int(c.sum()), "widths": [int(t.shape[1]) for t in step.block_tables],
        "block_sizes": list(step.block_sizes), "group_kinds": info["group_kinds"],
        "same_step_hits": len(info["same_step_hits"]), "labels": info["labels"],
    }


def _fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


@dataclass(frozen=True)
class _Sizes:
    """``--variants``' sizes, its defaults filled in (``--quick``'s or the full run's)."""

    quick: bool
    repeat: int
    steps: int
    num_reqs: int
    width: int
    devices: list[str]


def _sizes(args: argparse.Namespace) -> _Sizes:
    """The sizes and devices ``args`` ask for; a usage error naming a bad one."""
    quick = bool(args.quick)
    repeat = args.repeat if args.repeat is not None else (3 if quick else 7)
    nsteps = args.steps if args.steps is not None else (1 if quick else 2)
    num_reqs = args.num_reqs if args.num_reqs is not None else (16 if quick else 256)
    width = args.width if args.width is not None else (64 if quick else 2048)
    for name, value in (("--repeat", repeat), ("--steps", nsteps), ("--num-reqs", num_reqs), ("--oracle-repeat",
                                                                                               args.oracle_repeat)):
        if value < 1:
            raise UsageError(f"{name} must be >= 1, got {value}")
    if width < 2:
        raise UsageError(f"--width must be >= 2, got {width}")
    spec = args.devices.strip()
    if spec == "auto":
        import torch

        devices = (["cpu"] if quick else []) + (["cuda"] if torch.cuda.is_available() else [])
    else:
        devices = [] if spec in ("", "none") else [d.strip() for d in spec.split(",") if d.strip()]
    for dev in devices:
        if dev not in ("cpu", "cuda"):
            raise UsageError(f"--devices: unknown device {dev!r} (cpu, cuda, none or auto)")
    return _Sizes(quick, repeat, nsteps, num_reqs, width, devices)


def run(args: argparse.Namespace) -> bool:
    """``batchfuzz bench --variants``: time, print, write ``--json``; True when two checks disagreed."""
    if args.vllm_wheel or args.markdown_path:
        raise UsageError("--vllm-wheel and --markdown belong to the drop-in comparison, not to --variants")
    from batchfuzz.workloads import sample_realizable_step

    z = _sizes(args)
    if args.torch_threads < 0:
        raise UsageError(f"--torch-threads must be >= 0, got {args.torch_threads}")
    if z.devices and args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    calls, notes = timed_calls(z.devices, not args.no_oracle)
    scenarios = [Scenario(n, p, g) for n, p, g in select_scenarios(args.scenarios)]
    for note in notes:
        print(f"note: {note}")
    print(f"batchfuzz bench: {len(scenarios)} scenarios x {z.steps} steps, max_num_seqs {z.num_reqs}, width {z.width}, "
          f"repeat {z.repeat} (oracle {min(args.oracle_repeat, z.repeat)}); timed calls: {', '.join(v.name for v in calls)}")
    for sc in scenarios:
        t0 = time.perf_counter()
        for k in range(z.steps):
            sc.steps.append(sample_realizable_step(np.random.default_rng(args.seed + k), num_reqs=z.num_reqs,
                                                   max_blocks_per_req=z.width, profile=sc.profile, num_groups=sc.num_groups))
        sc.gen_seconds = time.perf_counter() - t0
    report: dict[str, Any] = {
        "arguments": {k: v for k, v in vars(args).items() if k != "func"},
        "settings": {"quick": z.quick, "repeat": z.repeat, "oracle_repeat": min(args.oracle_repeat, z.repeat),
                     "steps": z.steps, "num_reqs": z.num_reqs, "width": z.width, "devices": z.devices, "seed": args.seed,
                     "slow": args.slow, "slow_repeat": args.slow_repeat},
        "machine": machine_info(torch=bool(z.devices)),
        "timing": "time.perf_counter around one call; median over repetitions x steps; calls interleaved in a "
                  "rotating order within each repetition; the oracle runs on oracle_repeat repetitions only, calls "
                  "slower than `slow` seconds on their first call on slow_repeat",
        "notes": notes, "scenarios": [],
    }
    mismatch = False
    rows: list[tuple[Scenario, dict[str, float | None], list[dict[str, Any]], dict[str, int]]] = []
    for sc in scenarios:
        t_scenario = time.perf_counter()
        samples, decisions = _time_scenario(sc, calls, z.repeat, args)
        print(f"  {sc.name}: {len(sc.steps)} steps generated in {sc.gen_seconds:.1f}s, timed in "
              f"{time.perf_counter() - t_scenario:.1f}s", file=sys.stderr, flush=True)
        med = {name: (statistics.median(xs) if xs else None) for name, xs in samples.items()}
        steps_out, disagreed = _step_results(sc, decisions)
        mismatch = mismatch or disagreed
        rows.append((sc, med, steps_out, {k: len(v) for k, v in samples.items()}))
        report["scenarios"].append(_scenario_report(sc, med, samples, steps_out))
    _print_table(rows, calls)
    write_outputs(args.json_path, report)
    return mismatch


def _time_scenario(sc: Scenario, calls: list[TimedCall], repeat: int,
                   args: argparse.Namespace) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    """Every call on every step of ``sc``, ``repeat`` times in a rotating
    order (the oracle ``--oracle-repeat`` times, a slow call ``--slow-repeat``):
    seconds per call, and the first repetition's results per step."""
    samples: dict[str, list[float]] = {v.name: [] for v in calls}
    decisions: list[dict[str, Any]] = []
    prepared = [{v.name: v.prepare(step) for v in calls if v.prepare} for step, _ in sc.steps]
    cap = {v.name: (args.oracle_repeat if v.oracle else repeat) for v in calls}
    for rep in range(repeat):
        gc.collect()
        for si, (step, info) in enumerate(sc.steps):
            order = calls[rep % len(calls):] + calls[: rep % len(calls)]
            results: dict[str, Any] = {}
            for v in order:
                if rep >= cap[v.name]:
                    continue
                arg = prepared[si][v.name] if v.prepare else step
                t0 = time.perf_counter()
                res = v.call(arg, info)
                samples[v.name].append(time.perf_counter() - t0)
                results[v.name] = res
            if rep == 0:
                decisions.append(results)
        if rep == 0:  # slow calls (a first run over --slow seconds) get fewer repetitions
            for v in calls:
                if not v.oracle and samples[v.name] and max(samples[v.name]) > args.slow:
                    cap[v.name] = min(cap[v.name], args.slow_repeat)
    return samples, decisions


def _step_results(sc: Scenario, decisions: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Per step: its summary and every call's result; True where two checks disagreed (each printed)."""
    mismatch = False
    steps_out = []
    for (step, info), res in zip(sc.steps, decisions, strict=True):
        d = {k: v for k, v in res.items()}
        exact = d.get("exact numpy")
        if "oracle" in d and exact is not None and d["oracle"] != exact:
            mismatch = True
            print(f"MISMATCH {sc.name}: exact numpy {exact} != oracle {d['oracle']}")
        torch_ds = {k: v for k, v in d.items() if k.startswith("exact torch")}
        if exact is not None and any(v != exact for v in torch_ds.values()):
            mismatch = True
            print(f"MISMATCH {sc.name}: exact numpy {exact} != {torch_ds}")
        if "shipped loops" in d and d["shipped loops"] != d["shipped numpy"]:
            mismatch = True
            print(f"MISMATCH {sc.name}: shipped numpy {d['shipped numpy']} != shipped loops {d['shipped loops']}")
        steps_out.append({**_summary(step, info), "results": d})
    return steps_out, mismatch


def _scenario_report(sc: Scenario, med: dict[str, float | None], samples: dict[str, list[float]],
                     steps_out: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": sc.name, "profile": sc.profile, "num_groups": sc.num_groups,
        "generation_seconds": round(sc.gen_seconds, 3),
        "median_seconds": med, "samples": {k: len(v) for k, v in samples.items()},
        "ratios": {
            "exact_numpy/shipped_numpy": _num_ratio(med.get("exact numpy"), med.get("shipped numpy")),
            "exact_numpy/shipped_loops": _num_ratio(med.get("exact numpy"), med.get("shipped loops")),
            "oracle/exact_numpy": _num_ratio(med.get("oracle"), med.get("exact numpy")),
        },
        "steps": steps_out,
    }


def _num_ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 4)


def _decision(d: dict[str, Any], name: str) -> str:
    v = d.get(name)
    return "-" if v is None else ("allow" if v else "veto")


def _print_table(rows: list[tuple[Scenario, dict[str, float | None], list[dict[str, Any]], dict[str, int]]],
                 calls: list[TimedCall]) -> None:
    names = [v.name for v in calls]
    head = ["scenario", "R", "tokens", "dec"] + [f"{n} ms" for n in names] + ["exact/shipped", "oracle/exact"]
    table = [head]
    for sc, med, steps, counts in rows:
        full = max(counts.values())
        r = "/".join(str(s["num_reqs"]) for s in steps)
        tok = "/".join(str(s["num_tokens"]) for s in steps)
        dec = "/".join(str(s["decodes"]) for s in steps)
        table.append([sc.name, r, tok, dec] + [_fmt_ms(med.get(n)) + (f" (n={counts[n]})" if counts[n] < full else "")
                                               for n in names]
                     + [_ratio(med.get("exact numpy"), med.get("shipped numpy")), _ratio(med.get("oracle"), med.get("exact numpy"))])
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    for k, row in enumerate(table):
        print("  ".join(str(cell).rjust(widths[i]) if i else str(cell).ljust(widths[i]) for i, cell in enumerate(row)))
        if k == 0:
            print("  ".join("-" * w for w in widths))
    print("\ndecisions per step (exact / shipped / oracle) and conflicts found:")
    for sc, _, steps, _ in rows:
        parts = []
        for s in steps:
            d = s["results"]
            parts.append(f"{_decision(d, 'exact numpy')}/{_decision(d, 'shipped numpy')}/{_decision(d, 'oracle')}"
                         f" conflicts={d.get('exact numpy find', '-')} same-step hits={s['same_step_hits']}")
        print(f"  {sc.name:18} " + "; ".join(parts))
