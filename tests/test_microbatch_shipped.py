"""The engine's shipped microbatch check (docs/contracts.md, "What the engine ships"),
re-expressed in ``batchfuzz.contracts._microbatch.shipped_allow_microbatching``,
judged by the simulation.

- On realizable steps (what a prefix-caching scheduler produces) the harness
  finds and shrinks a step the shipped check allows and a split breaks.
- Each difference from the exact definitions is shown on a small literal
  step (docs/microbatch.md lists them).
- ``python -m tests.test_microbatch_shipped [--examples N]`` measures the
  check's soundness and precision (the figures in docs/microbatch.md).
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import given, settings

from batchfuzz import registry, runner
from batchfuzz.contracts import _microbatch as derived
from batchfuzz.contracts._microbatch import shipped_allow_microbatching
from batchfuzz.impl import allow_microbatching_numpy
from batchfuzz.reference import _step as ref_step
from batchfuzz.reference import allow_microbatching as ref_decision
from batchfuzz.reference import find_conflicts as ref_conflicts
from batchfuzz.reference._step import STEP_ARGUMENTS, Step
from batchfuzz.strategies import general_steps


def _lit(c: list[int], q: list[int], tables: list[list[list[int]]], sizes: list[int]) -> Step:
    return ref_step.check_step(np.array(c), np.array(q), [np.array(t) for t in tables], sizes)


def _args(step: Step) -> tuple[Any, Any, Any, Any]:
    return step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes


# ---------------------------------------------------------------- the search on realizable steps


def test_shipped_check_is_unsound_on_a_small_realizable_step() -> None:
    """The realizable-only search finds the shipped check allowing a step that
    a split breaks, and shrinks it to a fully cached prompt (q == 1, c > 0)
    moved to the front as a decode, reading a block that a later request in
    the batch fills in this step."""
    contract = registry.get("allow_microbatching")
    prop = contract.property("sound_under_adversarial_splits")
    r = runner.hunt(contract, shipped_allow_microbatching, prop,
                    runner.HuntOptions(settings(settings(), max_examples=300), domain="engine"), target_name="shipped")
    assert r.failure is not None, "the shipped check was sound on every realizable step tried"
    step = ref_step.check_step(*(r.failure.case.args[k] for k in STEP_ARGUMENTS))
    assert r.failure.case.context["source"] == "realizable"
    assert ref_step.is_well_formed(step)
    assert ref_decision.allow_microbatching(*_args(step)) is False
    c, q = step.num_computed_tokens, step.num_scheduled_tokens
    readers = {rd for _g, rd, w, _b in derived.unsafe_conflicts(step)}
    assert readers and all(q[rd] == 1 and c[rd] > 0 for rd in readers), (c, q, readers)
    assert step.num_reqs <= 3 and int(q.sum()) <= 6, r.failure.case.args  # small


# ---------------------------------------------------------------- the differences, on literals

# Unsound: a request with q == 1 and c > 0 is no reader. Realizable: request 1
# (prompt [a, b, c]) fills block 1 in this step; request 0, the same prompt,
# hits block 1 (c == 2) and recomputes its last token (q == 1), so it counts as
# a decode and is moved to the front. Split after token 0, request 0 reads
# block 1 before request 1 writes it. (The shipped variant's canonical form.)
DECODE_READER = ([2, 0], [1, 3], [[[1, 3], [1, 2]]], [2])

# Unsound: only whole blocks are read. Request 0 has 3 computed tokens in
# blocks of 2, so its whole block is column 0 and the computed position 2 in
# block 2 is not looked at; request 1 writes that slot. Not realizable (a
# partly filled block is private to its request).
PARTIAL_BLOCK_READER = ([3, 0], [2, 1], [[[1, 2, 3], [2, 0, 0]]], [2])

# False veto: order-blind. Request 0 fills block 1; request 1 hits it in the
# same step and prefills 2 more tokens. The writer runs first, so every split
# is safe, but request 1 is a reader (q == 2 > 1, c == 2) whose whole block 1
# is written. Realizable.
WRITER_FIRST = ([0, 2], [3, 2], [[[1, 2], [1, 3]]], [2])

# False veto: the null block. Request 1's prefix is null (outside a sliding
# window) and request 0's written column is null too: both count as block 0.
# Not realizable (a written column is never null).
NULL_PREFIX = ([0, 2], [2, 2], [[[0, 0], [0, 3]]], [2])

# False veto: a row without tokens. Request 1 (q == 0, c == 1) writes nothing,
# but its written columns [c // B, ceil((c + q) / B)) still hold its partly
# filled block 1, which is request 0's whole block. Not realizable (a batch
# has no request without tokens).
IDLE_ROW = ([2, 1], [2, 0], [[[1, 2], [1, 0]]], [2])


def _broken_split(step: Step) -> list[tuple[int, int]] | None:
    for split in derived.witness_splits(step):
        if ref_decision.simulate(step, split):
            return split
    return None


def test_decode_reader_is_missed() -> None:
    step = _lit(*DECODE_READER)
    assert shipped_allow_microbatching(*_args(step)) is True
    assert ref_decision.allow_microbatching(*_args(step)) is False
    assert ref_decision.simulate(step, [(0, 1), (1, 4)]) == [
        ref_decision.Violation(0, 0, 0, 0, 1, 0, 1), ref_decision.Violation(0, 0, 0, 1, 1, 1, 1)]
    # With the reader filter relaxed (every request with a token reads), the check vetoes.
    assert shipped_allow_microbatching(*_args(step), reorder_batch_threshold=0) is False


def test_partial_block_reader_is_missed() -> None:
    step = _lit(*PARTIAL_BLOCK_READER)
    assert ref_step.is_well_formed(step)
    assert shipped_allow_microbatching(*_args(step)) is True
    assert ref_decision.allow_microbatching(*_args(step)) is False
    assert _broken_split(step) == [(0, 1), (1, 3)]


def test_writer_before_reader_is_a_false_veto() -> None:
    step = _lit(*WRITER_FIRST)
    assert ref_conflicts.find_conflicts(*_args(step)) == {(0, 1, 0, 1)}
    assert ref_decision.allow_microbatching(*_args(step)) is True
    assert shipped_allow_microbatching(*_args(step)) is False
    total = int(step.num_scheduled_tokens.sum())
    assert all(not ref_decision.simulate(step, ref_step.cuts_to_split([k], total)) for k in range(1, total))


def test_null_prefix_is_a_false_veto() -> None:
    step = _lit(*NULL_PREFIX)
    assert ref_conflicts.find_conflicts(*_args(step)) == set()
    assert ref_decision.allow_microbatching(*_args(step)) is True
    assert shipped_allow_microbatching(*_args(step)) is False


def test_idle_row_is_a_false_veto() -> None:
    step = _lit(*IDLE_ROW)
    assert ref_conflicts.find_conflicts(*_args(step)) == set()
    assert ref_decision.allow_microbatching(*_args(step)) is True
    assert shipped_allow_microbatching(*_args(step)) is False


def test_canonical_form_is_the_decode_reader_step() -> None:
    v = registry.get("allow_microbatching").variant("shipped_check")
    assert v.canonical == dict(zip(STEP_ARGUMENTS, DECODE_READER, strict=True))


# ---------------------------------------------------------------- measurement


def classify(step: Step, threshold: int = 1) -> str:
    """How the shipped check's answer relates to the exact one, with a cause."""
    args = _args(step)
    exact = bool(allow_microbatching_numpy.allow_microbatching(*args))
    shipped = shipped_allow_microbatching(*args, reorder_batch_threshold=threshold)
    if exact == shipped:
        return "agree: allow" if exact else "agree: veto"
    if shipped:
        relaxed = shipped_allow_microbatching(*args, reorder_batch_threshold=0)
        return "unsound: decode reader (q <= threshold, c > 0)" if not relaxed else "unsound: partly computed block"
    c, q = step.num_computed_tokens, step.num_scheduled_tokens
    for g, (table, size) in enumerate(zip(step.block_tables, step.block_sizes, strict=True)):
        writers: dict[int, set[int]] = {}
        for w in range(step.num_reqs):
            for col in range(int(c[w]) // size, -(-int(c[w] + q[w]) // size)):
                writers.setdefault(int(table[w, col]), set()).add(w)
        for r in range(step.num_reqs):
            if q[r] > threshold and c[r] > 0:
                for col in range(int(c[r]) // size):
                    b = int(table[r, col])
                    if b not in writers:
                        continue
                    if b == 0:
                        return "false veto: null block"
                    if any((g, r, w, b) in ref_conflicts.find_conflicts(*args) for w in writers[b]):
                        return "false veto: writer before reader"
                    return "false veto: block counted as written, no slot written"
    return "false veto: other"


def measure(examples: int, seed: int = 0) -> dict[str, Counter[str]]:
    """Shipped check vs exact rule on general and realizable steps."""
    from batchfuzz.workloads import sample_realizable_step, sample_small_step

    out: dict[str, Counter[str]] = {}
    general: Counter[str] = Counter()

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None)
    @given(step=general_steps())
    def run_general(step: Step) -> None:
        general[classify(step)] += 1

    run_general()
    out["general (random tables)"] = general
    for name, bounds in (("realizable, small (threshold 1)", {}),
                         ("realizable, small (threshold drawn, spec decode)", {"reorder_batch_threshold": None})):
        counts: Counter[str] = Counter()
        rng = np.random.default_rng(seed)
        for _ in range(examples):
            step, info = sample_small_step(rng, **bounds)
            counts[classify(step, int(info["reorder_batch_threshold"]))] += 1
        out[name] = counts
    for profile in ("mixed", "prefill-heavy", "decode-heavy"):
        counts = Counter()
        for i in range(max(1, examples // 50)):
            step, info = sample_realizable_step(seed + i, num_reqs=64, max_blocks_per_req=128, profile=profile)
            counts[classify(step, int(info["reorder_batch_threshold"]))] += 1
        out[f"realizable, large ({profile}, 64 reqs)"] = counts
    return out


def report(results: dict[str, Counter[str]]) -> str:
    lines = []
    for name, counts in results.items():
        n = sum(counts.values())
        unsafe = sum(v for k, v in counts.items() if k == "agree: veto" or k.startswith("unsound"))
        safe = n - unsafe
        unsound = sum(v for k, v in counts.items() if k.startswith("unsound"))
        false_veto = sum(v for k, v in counts.items() if k.startswith("false veto"))
        lines.append(f"{name}: {n} steps, {unsafe} unsafe, {safe} safe; allows {unsound}/{unsafe} unsafe steps "
                     f"({100 * unsound / max(1, unsafe):.1f}%), vetoes {false_veto}/{safe} safe steps "
                     f"({100 * false_veto / max(1, safe):.1f}%)")
        for k, v in sorted(counts.items()):
            if not k.startswith("agree"):
                lines.append(f"    {k}: {v}")
    return "\n".join(lines)


def test_measurement_runs() -> None:
    results = measure(20)
    assert all(sum(c.values()) > 0 for c in results.values())
    assert "steps" in report(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Measure the shipped microbatch check against the exact rule.")
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    ns = parser.parse_args()
    print(report(measure(ns.examples, ns.seed)))
