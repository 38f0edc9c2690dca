"""Measure the nightly job across machines, on this machine (a measurement, not a test).

    PYTHONPATH=$PWD python3 benchmarks/nightly_shards.py [--budget 30s] [--repeat 2] [--latency-trials 3] [--json OUT]

Starts a ``redis-server`` of its own (``tests/redis_server.py``; or ``--redis URL``)
and runs real ``batchfuzz fuzz`` processes against it:

1. **Throughput.** The same budget, contracts (every contract on cpu, or
   ``--contract``), seed and Redis server, two ways: ``--shard 1/2`` and
   ``--shard 2/2`` as two processes of one worker each, started together (two
   machines' worth of work on this one), merged with ``batchfuzz
   merge-reports``; and one unsharded process with ``--workers 2``. Each run
   gets a Redis namespace of its own, so neither replays the other's
   examples. Reported: examples, the fuzzing wall time of the reports (first
   start to last finish), examples per second of it, the whole processes'
   wall time, items not run; and the ratio sharded / unsharded. The
   configurations alternate (ABBA...) over ``--repeat`` rounds, since the
   machine's load drifts.
2. **Latency** from one shard saving a failure to another replaying it.
   Shard 1/1 of a run over a planted buggy target (``tests/test_corpus.py``'s
   ``BUGGY``) finds and shrinks its failures; the moment its corpus file for
   ``max_is_ceil`` appears (polled every 5 ms; the file is written after
   shrinking, when the database holds the shrunk case), a new process starts
   ``--shard 2/2`` of the same plan (where that item moved: rendezvous
   hashing) with an empty local database. Reported: from the save to the
   replay (the failure's ``found_at_time``), split into the watcher's delay,
   the new process's start-up until the item's first slice, and the replay
   inside the slice; and the example number it failed at (1: replayed from
   Redis before any generated example). Plus the floor: a value saved by one
   process, polled for by another (a Redis round trip).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from batchfuzz.usage import parse_duration  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402
from tests.test_corpus import BUGGY  # noqa: E402

CONTRACT = "split_dummy_tokens"
TARGET = "planted_split.py:split"  # relative to the runs' working directory
LATENCY_PROPERTY = "max_is_ceil"  # a property the planted target fails whose item moves from shard 1/1 to shard 2/2


def _env(local_db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    env["PYTHONPATH"] = str(REPO)
    env["BATCHFUZZ_DATABASE"] = str(local_db)
    return env


def _fuzz(cwd: Path, name: str, url: str, args: list[str]) -> tuple[subprocess.Popen[str], Path, float]:
    root = cwd / name
    root.mkdir(parents=True)
    argv = [sys.executable, "-m", "batchfuzz", "fuzz", "--profile", "nightly", "--database", url, "--report",
            str(root / "report"), "--corpus", str(root / "corpus"), "--progress", "none", *args]
    launched = time.time()
    log = open(root / "output.txt", "w")
    proc = subprocess.Popen(argv, cwd=cwd, env=_env(root / "local-db"), stdout=log, stderr=subprocess.STDOUT, text=True)
    return proc, root, launched


def _wait(proc: subprocess.Popen[str], root: Path, limit: float) -> int:
    try:
        return proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SystemExit(f"{root}: batchfuzz fuzz did not end within {limit:.0f}s; see {root / 'output.txt'}") from None


def _summary(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / "report" / "summary.json").read_text()))


def _fuzz_span(roots: list[Path]) -> float:
    """Seconds from the first run's start to the last one's end, to the millisecond (a
    summary's ``started`` has whole seconds; the job file's deadline is start + budget)."""
    spans = []
    for root in roots:
        job = json.loads((root / "report" / ".run" / "job.json").read_text())
        start = float(job["deadline"]) - float(job["budget_s"])
        spans.append((start, start + float(_summary(root)["wall_seconds"])))
    return max(e for _, e in spans) - min(s for s, _ in spans)


# --------------------------------------------------------------------------- throughput


def throughput_run(config: str, work: Path, url: str, budget: float, contracts: list[str], seed: int) -> dict[str, Any]:
    """One run of ``config`` ("2 shards x 1 worker" or "1 shard x 2 workers")."""
    common = [f"--budget={budget:g}s", f"--seed={seed}", *[f"--contract={c}" for c in contracts]]
    limit = budget + 120
    if config == "shards":
        procs = [_fuzz(work, f"shard-{k}", url, [*common, "--workers=1", f"--shard={k}/2"]) for k in (1, 2)]
        codes = [_wait(p, root, limit) for p, root, _ in procs]
        ended = time.time()
        launched = min(t for _, _, t in procs)
        merged = work / "merged"
        m = subprocess.run([sys.executable, "-m", "batchfuzz", "merge-reports", *[str(root / "report") for _, root, _ in procs],
                            "--report", str(merged / "report")], cwd=work, env=_env(work / "unused"),
                           capture_output=True, text=True, timeout=120)
        if m.returncode not in (0, 1, 3):
            raise SystemExit(f"merge-reports failed ({m.returncode}):\n{m.stdout}{m.stderr}")
        s = _summary(merged)
        per_shard = [_summary(root)["totals"]["examples"] for _, root, _ in procs]
        span = _fuzz_span([root for _, root, _ in procs])
    else:
        proc, root, launched = _fuzz(work, "unsharded", url, [*common, "--workers=2"])
        codes = [_wait(proc, root, limit)]
        ended = time.time()
        s = _summary(root)
        per_shard = [s["totals"]["examples"]]
        span = _fuzz_span([root])
    t = s["totals"]
    return {
        "config": "2 shards x 1 worker" if config == "shards" else "1 shard x 2 workers",
        "exit_codes": codes, "examples": t["examples"], "per_process_examples": per_shard,
        "fuzz_wall_s": round(span, 3), "examples_per_s": round(t["examples"] / span, 1),
        "process_wall_s": round(ended - launched, 2), "items": t["items"], "items_not_run": t["items_not_run"],
        "failures": t["failures"], "load_after": os.getloadavg()[0],
    }


# --------------------------------------------------------------------------- latency


def _corpus_file_for(corpus_dir: Path, prop: str) -> Path | None:
    for p in sorted((corpus_dir / CONTRACT).glob("*.json")) if (corpus_dir / CONTRACT).is_dir() else []:
        try:
            if json.loads(p.read_text()).get("property") == prop:
                return p
        except (OSError, ValueError):
            continue  # being written (atomically: a complete file appears at once, but be safe)
    return None


def latency_trial(work: Path, url: str, trial: int) -> dict[str, Any]:
    """Shard 1/1 saves the planted failure; shard 2/2 is launched the moment it is saved."""
    work.mkdir(parents=True)
    (work / "planted_split.py").write_text(BUGGY)
    plan = ["--contract", CONTRACT, "--impl", TARGET, "--target", f"{CONTRACT}={TARGET}"]
    a, a_root, a_launched = _fuzz(work, "shard-1-of-1", url, [*plan, "--budget=10s", f"--seed={100 + trial}", "--shard=1/1"])
    deadline = time.time() + 60
    saved_file = None
    while saved_file is None:
        if time.time() > deadline or (a.poll() is not None and _corpus_file_for(a_root / "corpus", LATENCY_PROPERTY) is None):
            a.kill()
            raise SystemExit(f"shard 1/1 did not save a {LATENCY_PROPERTY} failure; see {a_root / 'output.txt'}")
        saved_file = _corpus_file_for(a_root / "corpus", LATENCY_PROPERTY)
        if saved_file is None:
            time.sleep(0.005)
    seen = time.time()
    b, b_root, b_launched = _fuzz(work, "shard-2-of-2", url, [*plan, "--budget=8s", f"--seed={200 + trial}", "--shard=2/2"])
    _wait(b, b_root, 120)
    _wait(a, a_root, 120)
    saved = saved_file.stat().st_mtime
    s = _summary(b_root)
    (f,) = [f for f in s["failures"] if f["property"] == LATENCY_PROPERTY]
    states = [json.loads(p.read_text()) for p in (b_root / "report" / "items").glob("*.json")]
    (state,) = [st for st in states if st["property"] == LATENCY_PROPERTY]
    a_failure = next(x for x in _summary(a_root)["failures"] if x["property"] == LATENCY_PROPERTY)
    return {
        "trial": trial,
        "a_found_at_example": a_failure["found_at_example"], "a_save_after_launch_s": round(saved - a_launched, 2),
        "b_found_at_example": f["found_at_example"], "same_corpus_file": f["id"] == a_failure["id"],
        "save_to_replay_s": round(f["found_at_time"] - saved, 3),
        "watcher_delay_s": round(b_launched - saved, 3),
        "b_startup_to_first_slice_s": round(state["started"] - b_launched, 3),
        "replay_in_slice_s": round(f["found_at_time"] - state["started"], 3),
        "b_slices_before_replay": state["slices"], "seen_after_save_s": round(seen - saved, 3),
    }


_POLLER = """
import sys, time
from batchfuzz.fuzz.database import open_database
db = open_database(sys.argv[1], local_dir=sys.argv[2])
print("ready", flush=True)
for line in sys.stdin:
    key = line.strip().encode()
    while not list(db.fetch(key)):
        pass
    print(repr(time.time()), flush=True)
"""


def redis_floor(url: str, work: Path, n: int = 30) -> dict[str, Any]:
    """A value saved by this process, seen by another process polling for it (each with its own local copy)."""
    from batchfuzz.fuzz.database import open_database

    poller = subprocess.Popen([sys.executable, "-c", _POLLER, url, str(work / "poller-db")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=_env(work / "unused"))
    assert poller.stdin is not None and poller.stdout is not None
    assert poller.stdout.readline().strip() == "ready"
    db = open_database(url, local_dir=work / "saver-db")
    assert db is not None
    out = []
    for i in range(n):
        key = f"floor-{i}"
        poller.stdin.write(key + "\n")
        poller.stdin.flush()
        time.sleep(0.02)
        t0 = time.time()
        db.save(key.encode(), b"x")
        out.append(float(poller.stdout.readline()) - t0)
    poller.stdin.close()
    poller.wait(timeout=10)
    return {"n": n, "median_ms": round(statistics.median(out) * 1000, 2), "max_ms": round(max(out) * 1000, 2)}


# --------------------------------------------------------------------------- main


def _machine(url: str) -> dict[str, Any]:
    import hypothesis
    import redis

    info = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "hypothesis": hypothesis.__version__, "redis_client": redis.__version__, "load_before": os.getloadavg()}
    exe = shutil.which("redis-server")
    if exe:
        info["redis_server"] = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=parse_duration, default=30.0, help="fuzz budget per throughput run (default 30s)")
    p.add_argument("--repeat", type=int, default=2, help="rounds of both throughput configurations (default 2)")
    p.add_argument("--contract", action="append", default=[], help="only these contracts (default: every contract)")
    p.add_argument("--latency-trials", type=int, default=3, help="save-to-replay trials (default 3)")
    p.add_argument("--redis", default=None, metavar="URL", help="a Redis server to use (default: start one)")
    p.add_argument("--json", default=None, metavar="OUT", help="also write every figure as JSON")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="batchfuzz-nightly-bench-"))
    server = None
    if args.redis is None:
        if shutil.which("redis-server") is None:
            raise SystemExit("redis-server is not on PATH (apt-get install redis-server), or pass --redis URL")
        server = RedisServer(work / "redis").start()
    base = args.redis or (server.url if server else "")
    try:
        machine = _machine(base)
        print(f"machine: {machine}", flush=True)
        runs = []
        for rep in range(args.repeat):
            order = ["shards", "workers"] if rep % 2 == 0 else ["workers", "shards"]
            for config in order:
                url = f"{base}?namespace=bench-{rep}-{config}"
                r = throughput_run(config, work / f"tp-{rep}-{config}", url, args.budget, args.contract, seed=rep + 1)
                runs.append(r)
                print(json.dumps(r), flush=True)
        sharded = [r["examples_per_s"] for r in runs if r["config"].startswith("2 shards")]
        unsharded = [r["examples_per_s"] for r in runs if r["config"].startswith("1 shard")]
        ratios = [round(a / b, 3) for a, b in zip(sharded, unsharded, strict=True) if b]
        print(f"examples/s: 2 shards x 1 worker {sharded}, 1 shard x 2 workers {unsharded}, ratios {ratios}", flush=True)
        floor = redis_floor(f"{base}?namespace=bench-floor", work)
        print(f"redis floor: {floor}", flush=True)
        trials = []
        for i in range(args.latency_trials):
            t = latency_trial(work / f"latency-{i}", f"{base}?namespace=bench-latency-{i}", i)
            trials.append(t)
            print(json.dumps(t), flush=True)
        result = {"machine": machine, "budget_s": args.budget, "contracts": args.contract or "all", "throughput": runs,
                  "ratios": ratios, "redis_floor": floor, "latency": trials, "load_after": os.getloadavg()}
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"median save-to-replay: {statistics.median(t['save_to_replay_s'] for t in trials):.3f}s; "
              f"replayed at example(s) {[t['b_found_at_example'] for t in trials]}")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
