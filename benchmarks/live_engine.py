"""Cost of the live engine's checks (docs/live-engine.md, "Measured").

One process: imports vLLM, starts the engine once (``live_engine.engine()``)
and serves the same seeded workloads three times, interleaved per workload so
that the machine's load falls on every mode alike (in a rotating order): the hook idle (the
engine's own step time), steps captured only, steps captured and checked.
Prints the start-up, workloads/s and steps/s per mode, and the checked
mode's time per step over the idle one's. With ``--answers N`` it then
compares greedy answers together and alone on N more seeded workloads with
no tolerance at all (every divergence counted), and prints the largest
log-probability noise seen while answers agreed: how ``TOLERANCE`` was chosen;
``--settings N`` does the same for the settings changes (``compare_settings``).

    python3 benchmarks/live_engine.py --workloads 40 --answers 200 --settings 100
"""

from __future__ import annotations

import argparse
import time

MODES = {"idle": {"capture": False, "check": False}, "captured": {"capture": True, "check": False},
         "checked": {"capture": True, "check": True}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--answers", type=int, default=0, help="workloads for the answers' noise (default 0: none)")
    p.add_argument("--settings", type=int, default=0, help="workloads for the settings' noise (default 0: none)")
    a = p.parse_args()
    started = time.perf_counter()
    from batchfuzz import live_engine as le

    why = le.import_error()
    if why:
        raise SystemExit(why)
    print(f"import vLLM: {time.perf_counter() - started:.1f}s")
    eng = le.engine()
    print(f"engine start: {eng.startup_seconds:.1f}s ({eng.settings})")
    seconds = dict.fromkeys(MODES, 0.0)
    steps = dict.fromkeys(MODES, 0)
    violations = preempting = 0
    for i in range(a.workloads):
        w = le.sample_workload(a.seed + i, eng.settings)
        order = list(MODES)[i % 3:] + list(MODES)[:i % 3]  # each mode goes first as often: the first pays warm-ups
        for mode in order:
            t = time.perf_counter()
            served = eng.serve(w, **MODES[mode])
            seconds[mode] += time.perf_counter() - t
            steps[mode] += len(served.steps)
            violations += len(served.violations)
        preempting += le.preempted(served.steps) > 0
    engine_steps = steps["captured"]  # the idle mode captures none; every mode runs the same steps
    for mode in MODES:
        print(f"{mode:9s} {a.workloads / seconds[mode]:6.2f} workloads/s  {engine_steps / seconds[mode]:7.1f} steps/s  "
              f"{1000 * seconds[mode] / engine_steps:6.2f} ms/step")
    print(f"checked/idle time per step: {seconds['checked'] / seconds['idle']:.2f}; "
          f"{engine_steps} steps per mode, {violations} violations; {preempting} workloads preempted a request")
    if a.answers:
        answers(eng, a.answers, a.seed + a.workloads)
    if a.settings:
        answers(eng, a.settings, a.seed + a.workloads + a.answers, "settings")


def answers(eng: object, count: int, first_seed: int, prop: str = "answers") -> None:
    """Every divergence of together and alone (``prop`` answers) or across the settings changes
    (settings), at tolerance 0, and the noise while answers agree."""
    from batchfuzz import live_engine as le

    assert isinstance(eng, le.LiveEngine)
    compare = le.compare_answers if prop == "answers" else le.compare_settings
    t = time.perf_counter()
    compared, noise, diverged = 0, 0.0, []
    for i in range(count):
        result = compare(eng, le.sample_workload(first_seed + i, eng.settings), tolerance=0.0)
        compared, noise = compared + result.compared, max(noise, result.noise)
        diverged += result.differences
    print(f"{prop}: {count} workloads, {compared} greedy requests compared in {time.perf_counter() - t:.0f}s; "
          f"largest |top log-prob difference| while agreeing: {noise:.3g}; {len(diverged)} divergences")
    for line in diverged[:10]:
        print("   ", line[:300])


if __name__ == "__main__":
    main()
