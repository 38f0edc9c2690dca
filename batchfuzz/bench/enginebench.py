"""``batchfuzz bench --engine-steps``: what steps from vLLM's own scheduler cost
(docs/engine-steps.md, "Measured").

In one process, after importing vLLM's scheduler (timed: the start-up):

1. engine steps per second: seeded workloads (``engine_steps.sample_workload``)
   stepped through a fresh scheduler each; scheduler steps per second and
   emitted contract E steps per second;
2. examples per second of contract E (``allow_microbatching``, property
   ``sound_under_adversarial_splits``, the exact numpy check, which passes)
   on engine steps (domain ``engine-steps``) against model steps (``engine``),
   a fixed number of examples each;
3. time to find the unsound step: the shipped ``_allow_microbatching`` of a
   vLLM release (default 0.33.0, from the wheel cache or downloaded), bound
   as ``batchfuzz.engines.vllm`` binds it, hunted on engine steps
   (``sound_under_engine_splits`` then ``sound_under_adversarial_splits``,
   as ``check`` orders them) from a fresh Hypothesis run per seed, shrinking
   included; the shrunk workload of each seed is printed.

Times are wall-clock on whatever machine runs it: a measurement, never a verdict.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from batchfuzz.usage import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine-steps", action="store_true",
                   help="measure steps from the installed vLLM's own scheduler: steps/s, contract E examples/s on engine vs "
                        "model steps, time to find the shipped check's unsound step over --engine-seeds seeds")
    p.add_argument("--engine-seeds", type=int, default=5, help="--engine-steps: seeds of the time-to-find search (default 5)")
    p.add_argument("--engine-release", default="0.33.0",
                   help="--engine-steps: the vLLM release whose _allow_microbatching is hunted (default 0.33.0)")
    p.add_argument("--engine-workloads", type=int, default=300, help="--engine-steps: workloads for steps/s (default 300)")
    p.add_argument("--engine-examples", type=int, default=200,
                   help="--engine-steps: examples per domain for examples/s (default 200)")


def _hunt_settings(max_examples: int) -> Any:
    from hypothesis import HealthCheck, settings

    return settings(max_examples=max_examples, database=None, deadline=None, derandomize=False,
                    suppress_health_check=list(HealthCheck))


def run_command(args: argparse.Namespace) -> int:
    for name in ("engine_seeds", "engine_workloads", "engine_examples"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    out = _startup()
    _scheduler_rates(args, out)
    if not _example_rates(args, out):
        return 1
    found = _times_to_find(args)
    out["time_to_find"] = found
    secs = sorted(r["seconds"] for r in found if r["found"])
    if secs:
        print(f"time to find the unsound step of vLLM {args.engine_release}'s _allow_microbatching: found on {len(secs)} of "
              f"{len(found)} seeds, median {secs[len(secs) // 2]:.1f}s, max {secs[-1]:.1f}s")
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump(out, fh, indent=2)
        print(f"wrote {args.json_path}")
    return 0 if all(r["found"] for r in found) else 1


def _startup() -> dict[str, Any]:
    """Import and configure vLLM's scheduler (a usage error where it cannot be): the report's start."""
    t0 = time.perf_counter()
    from batchfuzz import vllm_scheduler

    why = vllm_scheduler.import_error()
    if why is not None:
        raise UsageError(f"--engine-steps: {why}")
    from batchfuzz import engine_steps

    engine_steps.engine_step(engine_steps.sample_workload(0))  # the first ModelConfig (cached model inspection)
    startup = time.perf_counter() - t0
    out: dict[str, Any] = {"vllm": vllm_scheduler.version(), "startup_s": round(startup, 2)}
    print(f"vLLM {out['vllm']} scheduler imported and configured in {startup:.1f}s")
    return out


def _scheduler_rates(args: argparse.Namespace, out: dict[str, Any]) -> None:
    """Scheduler steps and emitted steps per second over seeded workloads."""
    from batchfuzz import engine_steps

    workloads = [engine_steps.sample_workload(args.seed + k) for k in range(args.engine_workloads)]
    t = time.perf_counter()
    sched_steps = 0
    for w in workloads:
        laid, _ = engine_steps.run_engine(w)
        sched_steps += laid.step_index + 1
    dt = time.perf_counter() - t
    out.update(workloads=len(workloads), scheduler_steps=sched_steps, scheduler_steps_per_s=round(sched_steps / dt, 1),
               emitted_steps_per_s=round(len(workloads) / dt, 1))
    print(f"engine steps: {sched_steps} scheduler steps of {len(workloads)} workloads in {dt:.2f}s: "
          f"{sched_steps / dt:.0f} scheduler steps/s, {len(workloads) / dt:.0f} emitted steps/s (a fresh scheduler each)")


def _example_rates(args: argparse.Namespace, out: dict[str, Any]) -> bool:
    """Contract E's examples per second on engine and model steps; False where the exact check failed."""
    from batchfuzz import registry, runner

    contract = registry.get("allow_microbatching")
    exact = contract.implementation("numpy").for_device("cpu")
    prop = contract.property("sound_under_adversarial_splits")
    rates: dict[str, float] = {}
    for domain, label in (("engine-steps", "engine steps"), ("engine", "model steps")):
        t = time.perf_counter()
        r = runner.hunt(contract, exact, prop, runner.HuntOptions(_hunt_settings(args.engine_examples), seed=args.seed,
                                                                  domain=domain), target_name="impl:numpy@cpu")
        dt = time.perf_counter() - t
        if r.failure is not None:
            print(f"  the exact check failed on {label}: {r.failure.message}")
            return False
        rates[domain] = r.examples / dt
        print(f"contract E on {label}: {r.examples} examples in {dt:.2f}s: {rates[domain]:.1f} examples/s (exact check passes)")
    out["examples_per_s"] = {k: round(v, 1) for k, v in rates.items()}
    return True


def _times_to_find(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per seed: how long fresh rounds take to find the released _allow_microbatching's unsound step."""
    from batchfuzz import registry, runner
    from batchfuzz.engines import fetch_wheel, vllm

    contract = registry.get("allow_microbatching")
    wheel = fetch_wheel("vllm", args.engine_release)
    bound = next(b for b in vllm.bindings(vllm.ReleaseSource.from_wheel(str(wheel)))
                 if b.function.endswith("_allow_microbatching"))
    if bound.target is None:
        raise UsageError(f"vLLM {args.engine_release}: _allow_microbatching is {bound.status}: {bound.reason}")
    found: list[dict[str, Any]] = []
    for k in range(args.engine_seeds):
        seed = args.seed + k
        t = time.perf_counter()
        failure = None
        examples = 0
        while failure is None and examples < 20000:  # fresh rounds until found; a round is a fresh Hypothesis run
            for name in ("sound_under_engine_splits", "sound_under_adversarial_splits"):
                options = runner.HuntOptions(_hunt_settings(200), seed=seed * 1000 + examples, domain="engine-steps")
                r = runner.hunt(contract, bound.target, contract.property(name), options, target_name=bound.ref or "engine")
                examples += r.examples
                failure = r.failure
                if failure is not None:
                    break
        dt = time.perf_counter() - t
        row = {"seed": seed, "seconds": round(dt, 2), "examples": examples, "found": failure is not None}
        if failure is not None:
            row.update(property=failure.property, workload=failure.case.context.get("workload"))
        found.append(row)
        print(f"seed {seed}: {'found' if failure else 'NOT found'} in {dt:.1f}s ({examples} examples, shrinking included)"
              + (f" by {failure.property}: workload {json.dumps(row['workload'])}" if failure else ""))
    return found
