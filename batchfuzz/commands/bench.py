"""``batchfuzz bench``: cost of the microbatch-conflict checks on realistic steps.

By default it runs ``batchfuzz.microbench``: the drop-in exact check of
``batchfuzz.impl.allow_microbatching_numpy`` and its conflict set against the
shipped check as the engine ships it (docs/exact-microbatching.md); with
``--vllm-wheel FILE`` also the engine's own function from that release, and
with ``--devices`` (default: cuda when present) the sync-free torch decision
and conflict set with inputs resident on the device. ``--loop`` measures the
fuzz loop instead (``batchfuzz.loopbench``), ``--engine-steps`` steps from the
installed vLLM's own scheduler (``batchfuzz.enginebench``).

``--variants`` runs the older, wider comparison described below: every exact
implementation through its canonical binder (validation and host copies
included in its time), beside the shipped check's two copies and the oracle.
Steps come from the prefix-caching scheduler model (``strategies.realizable.
sample_realizable_step``): by default 256 requests (``max_num_seqs``), block
tables ``cdiv(max_model_len, B)`` wide with 2048 columns in group 0, 1 to 3
KV groups, decode-heavy, prefill-heavy and mixed. On each step, in one
process, interleaved (every repetition times every variant once, in a
rotating order), it times:

- ``exact numpy``: ``batchfuzz.impl.allow_microbatching_numpy.allow_microbatching``
  (the exact, split-agnostic decision, a fresh checker per call);
- ``exact numpy find``: ``batchfuzz.impl.find_conflicts_numpy.find_conflicts``
  (the whole conflict set);
- ``validation``: ``batchfuzz.reference._step.check_step``, the input validation
  the exact implementations begin with (included in their times; the
  shipped check validates nothing);
- ``shipped numpy``: the engine's shipped check (docs/contracts.md, "What the engine
  ships") vectorised here as an engine would write it; checked on every step
  to decide exactly as ``shipped loops``;
- ``shipped loops``: ``batchfuzz.contracts._microbatch.shipped_allow_microbatching``
  (the plain-loop re-expression the registered variants use);
- ``exact torch <device>``: ``batchfuzz.impl.allow_microbatching_torch`` through its canonical
  binder (numpy in: validation and host-to-device copy included), and, on
  CUDA, ``... resident`` with inputs already on the device (the kernel and the
  one read of its result);
- ``oracle``: ``batchfuzz.reference.allow_microbatching`` (plain loops), on
  ``--oracle-repeat`` repetitions only (default 1): it is the slow spec.

Every variant is timed with ``time.perf_counter`` around one call; a cell is
the median over repetitions and steps. A variant whose first call takes more
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
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchfuzz.cli import UsageError

PROFILES = ("decode-heavy", "prefill-heavy", "mixed")
GROUP_COUNTS = (1, 2, 3)


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="time the exact conflict detector vs the shipped check vs the oracle",
                       description="Time contract E's checks on realistic steps from the prefix-caching scheduler model.")
    p.add_argument("--quick", action="store_true", help="small steps (16 requests, 64 columns), few repetitions: seconds")
    p.add_argument("--repeat", type=int, default=None, help="timed repetitions per step and variant (default 7; quick 3)")
    p.add_argument("--oracle-repeat", type=int, default=1, help="repetitions for the oracle (default 1)")
    p.add_argument("--steps", type=int, default=None, help="steps per scenario, from different seeds (default 2; quick 1)")
    p.add_argument("--num-reqs", type=int, default=None, help="max_num_seqs of the modelled engine (default 256; quick 16)")
    p.add_argument("--width", type=int, default=None,
                   help="block-table columns of group 0, i.e. max_model_len / B_0 (default 2048; quick 64)")
    p.add_argument("--scenarios", default="*",
                   help="comma-separated scenario names or globs, e.g. 'mixed/G1,decode-heavy/*' (default: all 9)")
    p.add_argument("--devices", default="auto",
                   help="torch devices, comma-separated: cpu, cuda, none, or auto (default: cuda when present; with "
                        "--quick also cpu). The torch version builds a dense (R, W*B) grid per group: at full size "
                        "on CPU it costs tens of seconds per step, so cpu is opt-in there (--variants). By default: devices for the "
                        "sync-free torch decision and conflict set, inputs resident (auto: cuda when present)")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op CPU threads (default 1, like numpy; 0 keeps torch's default)")
    p.add_argument("--slow", type=float, default=0.5,
                   help="a variant whose first call takes more seconds than this is timed on --slow-repeat repetitions")
    p.add_argument("--slow-repeat", type=int, default=3, help="repetitions for slow variants (default 3)")
    p.add_argument("--no-oracle", action="store_true", help="skip the oracle")
    p.add_argument("--seed", type=int, default=0, help="seed of the first step of each scenario (default 0)")
    p.add_argument("--json", dest="json_path", metavar="PATH", help="write the measurements as JSON here")
    p.add_argument("--variants", action="store_true",
                   help="instead of the drop-in comparison (the default: batchfuzz.microbench, docs/exact-microbatching.md): "
                        "every exact implementation through its canonical binder, validation included, beside both copies "
                        "of the shipped check and the oracle")
    p.add_argument("--oracle-steps", type=int, default=1,
                   help="steps per scenario checked against the oracle (default 1; 0 with --no-oracle)")
    p.add_argument("--markdown", dest="markdown_path", metavar="PATH", help="write the table as Markdown here (not with --variants)")
    p.add_argument("--vllm-wheel", metavar="FILE",
                   help="also time the release's own GPUModelRunner._allow_microbatching (vLLM >= 0.28), "
                        "cut out of this wheel through batchfuzz.engines.vllm, and check that our copy of the shipped "
                        "check decides as it does on every step (exit 1 otherwise)")
    from batchfuzz import enginebench, loopbench

    loopbench.add_arguments(p)  # --loop: the fuzz loop's speed and the cost of isolation
    enginebench.add_arguments(p)  # --engine-steps: steps from vLLM's own scheduler
    p.set_defaults(func=run)


# ---------------------------------------------------------------- the shipped check, vectorised


def shipped_allow_numpy(c: np.ndarray, q: np.ndarray, tables: list[np.ndarray], sizes: list[int],
                        reorder_batch_threshold: int = 1) -> bool:
    """The shipped check (docs/contracts.md) as an engine would vectorise it: readers are the
    requests with ``q > threshold`` and ``c > 0``; a reader reads its whole
    blocks (columns ``[0, c // B)``); written are the columns ``[c // B,
    ceil((c + q) / B))`` of every request, null entries included; veto when a
    reader's whole block is written, in any group."""
    c = np.asarray(c, dtype=np.int64)
    q = np.asarray(q, dtype=np.int64)
    readers = (q > reorder_batch_threshold) & (c > 0)
    if not readers.any():
        return True
    for table, size in zip(tables, sizes, strict=True):
        cols = np.arange(table.shape[1], dtype=np.int64)
        first = (c // size)[:, None]
        written = table[(cols >= first) & (cols < (-(-(c + q) // size))[:, None])]
        read = table[readers][cols < first[readers]]
        if read.size and written.size and np.isin(read, written).any():
            return False
    return True


# ---------------------------------------------------------------- variants


@dataclass
class Variant:
    name: str
    call: Callable[[Any, dict[str, Any]], Any]  # (step, info) -> result
    decision: bool = True  # the result is an allow/veto decision
    oracle: bool = False
    prepare: Callable[[Any], Any] | None = None  # per-step setup outside the timed call (device copies)


def _variants(devices: list[str], oracle: bool) -> tuple[list[Variant], list[str]]:
    """The variants available in this checkout, and notes on those that are not."""
    out: list[Variant] = []
    notes: list[str] = []

    def canon(step: Any) -> tuple[Any, Any, list[Any], list[int]]:
        return step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes

    try:
        from batchfuzz.impl import allow_microbatching_numpy, find_conflicts_numpy

        out.append(Variant("exact numpy", lambda s, i: bool(allow_microbatching_numpy.allow_microbatching(*canon(s)))))
        out.append(Variant("exact numpy find", lambda s, i: len(find_conflicts_numpy.find_conflicts(*canon(s))), decision=False))
        from batchfuzz.reference._step import check_step

        # The input validation both exact implementations start with (the shipped check does none).
        out.append(Variant("validation", lambda s, i: check_step(*canon(s)) is not None, decision=False))
    except ImportError as exc:
        notes.append(f"exact numpy unavailable: {exc}")
    out.append(Variant("shipped numpy", lambda s, i: shipped_allow_numpy(*canon(s), i["reorder_batch_threshold"])))
    try:
        from batchfuzz.contracts._microbatch import shipped_allow_microbatching as shipped_loops

        out.append(Variant("shipped loops", lambda s, i: bool(shipped_loops(*canon(s), i["reorder_batch_threshold"]))))
    except ImportError as exc:
        notes.append(f"shipped loops unavailable: {exc}")
    if devices:
        try:
            import torch

            from batchfuzz.impl import allow_microbatching_torch as ct

            for dev in devices:
                if dev == "cuda" and not torch.cuda.is_available():
                    notes.append("torch cuda skipped: no CUDA device")
                    continue
                bound: Callable[..., bool] = ct.bind(dev)

                def binder(s: Any, i: dict[str, Any], f: Callable[..., bool] = bound) -> bool:
                    return bool(f(*canon(s)))

                out.append(Variant(f"exact torch {dev}", binder))

                def resident(step: Any, dev: str = dev) -> Any:
                    """The checker with its scratch buffers and the step's arrays on ``dev``, made outside the timed call."""
                    from batchfuzz.reference._step import check_step

                    return ct.checker_for(check_step(*canon(step)), dev)

                if dev != "cpu":  # on CPU "resident" is the same computation without the copy
                    out.append(Variant(f"exact torch {dev} resident", lambda s, i: bool(s[0](*s[1])), prepare=resident))
        except ImportError as exc:
            notes.append(f"exact torch unavailable: {exc}")
    if oracle:
        try:
            from batchfuzz.reference import allow_microbatching as ref

            out.append(Variant("oracle", lambda s, i: bool(ref.allow_microbatching(*canon(s))), oracle=True))
        except ImportError as exc:
            notes.append(f"oracle unavailable: {exc}")
    return out, notes


# ---------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    name: str
    profile: str
    num_groups: int
    steps: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    gen_seconds: float = 0.0


def _select(patterns: str) -> list[tuple[str, str, int]]:
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


def run(args: argparse.Namespace) -> int:
    if args.loop:
        from batchfuzz import loopbench

        return loopbench.run_command(args)
    if args.engine_steps:
        from batchfuzz import enginebench

        return enginebench.run_command(args)
    if not args.variants:
        return _run_drop_in(args)
    if args.vllm_wheel or args.markdown_path:
        raise UsageError("--vllm-wheel and --markdown belong to the drop-in comparison, not to --variants")
    from batchfuzz.scheduler_model import sample_realizable_step

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
    if args.torch_threads < 0:
        raise UsageError(f"--torch-threads must be >= 0, got {args.torch_threads}")
    if devices and args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    variants, notes = _variants(devices, not args.no_oracle)
    scenarios = [Scenario(n, p, g) for n, p, g in _select(args.scenarios)]
    for note in notes:
        print(f"note: {note}")
    print(f"batchfuzz bench: {len(scenarios)} scenarios x {nsteps} steps, max_num_seqs {num_reqs}, width {width}, "
          f"repeat {repeat} (oracle {min(args.oracle_repeat, repeat)}); variants: {', '.join(v.name for v in variants)}")

    for sc in scenarios:
        t0 = time.perf_counter()
        for k in range(nsteps):
            sc.steps.append(sample_realizable_step(np.random.default_rng(args.seed + k), num_reqs=num_reqs,
                                                   max_blocks_per_req=width, profile=sc.profile, num_groups=sc.num_groups))
        sc.gen_seconds = time.perf_counter() - t0

    report: dict[str, Any] = {
        "arguments": {k: v for k, v in vars(args).items() if k != "func"},
        "settings": {"quick": quick, "repeat": repeat, "oracle_repeat": min(args.oracle_repeat, repeat), "steps": nsteps,
                     "num_reqs": num_reqs, "width": width, "devices": devices, "seed": args.seed,
                     "slow": args.slow, "slow_repeat": args.slow_repeat},
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "numpy": np.__version__},
        "timing": "time.perf_counter around one call; median over repetitions x steps; variants interleaved in a "
                  "rotating order within each repetition; the oracle runs on oracle_repeat repetitions only, variants "
                  "slower than `slow` seconds on their first call on slow_repeat",
        "notes": notes, "scenarios": [],
    }
    try:
        import torch

        report["machine"]["torch"] = torch.__version__
        report["machine"]["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            report["machine"]["cuda_device"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass

    mismatch = False
    rows: list[tuple[Scenario, dict[str, float | None], list[dict[str, Any]], dict[str, int]]] = []
    for sc in scenarios:
        samples: dict[str, list[float]] = {v.name: [] for v in variants}
        decisions: list[dict[str, Any]] = []
        prepared = [{v.name: v.prepare(step) for v in variants if v.prepare} for step, _ in sc.steps]
        t_scenario = time.perf_counter()
        cap = {v.name: (args.oracle_repeat if v.oracle else repeat) for v in variants}
        for rep in range(repeat):
            gc.collect()
            for si, (step, info) in enumerate(sc.steps):
                order = variants[rep % len(variants):] + variants[: rep % len(variants)]
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
            if rep == 0:  # slow variants (a first call over --slow seconds) get fewer repetitions
                for v in variants:
                    if not v.oracle and samples[v.name] and max(samples[v.name]) > args.slow:
                        cap[v.name] = min(cap[v.name], args.slow_repeat)
        print(f"  {sc.name}: {len(sc.steps)} steps generated in {sc.gen_seconds:.1f}s, timed in "
              f"{time.perf_counter() - t_scenario:.1f}s", file=sys.stderr, flush=True)
        med = {name: (statistics.median(xs) if xs else None) for name, xs in samples.items()}
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
        rows.append((sc, med, steps_out, {k: len(v) for k, v in samples.items()}))
        report["scenarios"].append({
            "name": sc.name, "profile": sc.profile, "num_groups": sc.num_groups,
            "generation_seconds": round(sc.gen_seconds, 3),
            "median_seconds": med, "samples": {k: len(v) for k, v in samples.items()},
            "ratios": {
                "exact_numpy/shipped_numpy": _num_ratio(med.get("exact numpy"), med.get("shipped numpy")),
                "exact_numpy/shipped_loops": _num_ratio(med.get("exact numpy"), med.get("shipped loops")),
                "oracle/exact_numpy": _num_ratio(med.get("oracle"), med.get("exact numpy")),
            },
            "steps": steps_out,
        })

    _print_table(rows, variants)
    write_outputs(args, report)
    return 1 if mismatch else 0


def _num_ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else round(a / b, 4)


def write_outputs(args: argparse.Namespace, data: Any, markdown: str | None = None) -> None:
    """``--json`` (``data``, numpy scalars as Python ones) and, when given,
    ``--markdown`` (``markdown``), each announced on stdout."""
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(data, fh, indent=2, default=_json_default)
        print(f"wrote {args.json_path}")
    if markdown is not None and getattr(args, "markdown_path", None):
        with open(args.markdown_path, "w") as fh:
            fh.write(markdown)
        print(f"wrote {args.markdown_path}")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _decision(d: dict[str, Any], name: str) -> str:
    v = d.get(name)
    return "-" if v is None else ("allow" if v else "veto")


def _print_table(rows: list[tuple[Scenario, dict[str, float | None], list[dict[str, Any]], dict[str, int]]],
                 variants: list[Variant]) -> None:
    names = [v.name for v in variants]
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


def _engine_factory(wheel: str) -> tuple[Any, str]:
    """The ``engine`` column's factory for ``microbench.run``: the release's
    ``_allow_microbatching`` on a stand-in runner built per step (untimed),
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


def _run_drop_in(args: argparse.Namespace) -> int:
    """The default: the per-scenario microbenchmark of ``batchfuzz.microbench``."""
    from batchfuzz import microbench

    quick = bool(args.quick)
    names = [n for n, _, _ in _select(args.scenarios)]
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
        report = microbench.run(
            names, num_reqs=args.num_reqs or (16 if quick else 256), width=args.width or (64 if quick else 2048),
            steps=args.steps or (1 if quick else 2), repeat=args.repeat or (3 if quick else 7),
            oracle_steps=0 if args.no_oracle else args.oracle_steps, seed=args.seed, engine=engine, engine_label=label,
            devices=devices, log=lambda line: print(line, file=sys.stderr, flush=True))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(report.to_text())
    write_outputs(args, report.to_dict(), report.to_markdown())
    return 1 if report.mismatches else 0
