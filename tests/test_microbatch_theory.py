"""Contract E's definitions checked against each other and against the
simulation, the final judge (batchfuzz.reference.allow_microbatching.simulate).

The contract claims: unsplit, a step never has violations; split, the violations
are exactly the harmful conflicts. docs/microbatch.md claims the exact,
split-agnostic rule: a harmful split exists iff some reader's computed slot
is first written by a token after the reader's first token, which on
well-formed steps is "some conflict has its reader before its writer in
batch order". Each claim is a property here, over general, ill-formed
(``raw``) and realizable steps, with the engine's splits, adversarial cut
points and, where cheap, every two-ubatch split.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from batchfuzz.case import Case
from batchfuzz.contracts import _microbatch as derived
from batchfuzz.reference import _step as ref_step
from batchfuzz.reference import allow_microbatching as ref_decision
from batchfuzz.reference import find_conflicts as ref_conflicts
from batchfuzz.reference._step import STEP_ARGUMENTS, Step, cuts_to_split
from batchfuzz.reference.allow_microbatching import Violation
from batchfuzz.strategies import find_conflicts as conflict_cases
from batchfuzz.strategies._steps import general_steps, realizable_steps_for_ci


def _step(case: Case) -> Step:
    return ref_step.check_step(*(case.args[k] for k in STEP_ARGUMENTS))


def _args(step: Step) -> tuple[object, ...]:
    return step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables, step.block_sizes


def _splits(case: Case, step: Step) -> list[list[tuple[int, int]]]:
    return [*case.context["engine_splits"], *case.context["adversarial_splits"], *derived.witness_splits(step)]


def _total(step: Step) -> int:
    return int(step.num_scheduled_tokens.sum())


def _as_conflicts(violations: list[Violation]) -> set[ref_step.Conflict]:
    return {(v.group, v.reader, v.writer, v.block) for v in violations if v.writer != v.reader}


@given(case=conflict_cases.cases())
def test_unsplit_step_never_violates(case: Case) -> None:
    step = _step(case)
    assert ref_decision.simulate(step, [(0, _total(step))]) == []
    assert ref_conflicts.harmful_conflicts(step, [(0, _total(step))]) == set()


@given(case=conflict_cases.cases())
def test_violations_are_exactly_the_harmful_conflicts(case: Case) -> None:
    """The contract's claim, on well-formed steps; in general every violation whose
    slot is first written by another request is a harmful conflict."""
    step = _step(case)
    well_formed = ref_step.is_well_formed(step)
    for split in _splits(case, step):
        violations = ref_decision.simulate(step, split)
        harmful = ref_conflicts.harmful_conflicts(step, split)
        assert _as_conflicts(violations) <= harmful, (split, violations, harmful)
        if well_formed:
            assert all(v.writer != v.reader for v in violations)
            assert _as_conflicts(violations) == harmful, (split, violations, harmful)
            assert ref_decision.allow_split(step, split) == (not violations)


@given(case=conflict_cases.cases())
def test_harmful_conflicts_are_the_conflicts_harmful_under_the_split(case: Case) -> None:
    step = _step(case)
    conflicts = ref_conflicts.find_conflicts(*_args(step))
    for split in _splits(case, step):
        assert ref_conflicts.harmful_conflicts(step, split) == derived.harmful_among(step, split, conflicts)


@given(case=conflict_cases.cases())
def test_exact_rule_against_every_two_ubatch_split(case: Case) -> None:
    """allow_microbatching(step) is True iff no split in two has a violation;
    when False, the witness cut (after the reader's first token) shows one."""
    step = _step(case)
    total = _total(step)
    allowed = ref_decision.allow_microbatching(*_args(step))
    broken = [cut for cut in range(1, total) if ref_decision.simulate(step, cuts_to_split([cut], total))]
    assert allowed == (not broken), (allowed, broken)
    if not allowed:
        assert any(ref_decision.simulate(step, w) for w in derived.witness_splits(step))


@given(case=conflict_cases.cases())
def test_exact_rule_is_sound_for_every_generated_split(case: Case) -> None:
    """Splits into 3 or 4 ubatches (engine rule and adversarial cut points) included."""
    step = _step(case)
    if ref_decision.allow_microbatching(*_args(step)):
        for split in _splits(case, step):
            assert ref_decision.simulate(step, split) == [], split


@given(case=conflict_cases.cases())
def test_exact_rule_in_terms_of_conflicts_on_well_formed_steps(case: Case) -> None:
    """On well-formed steps: unsafe iff some conflict has its reader's first
    token before the writer's token, iff some request reads a slot that a
    later request in batch order writes."""
    step = _step(case)
    if not ref_step.is_well_formed(step):
        return
    allowed = ref_decision.allow_microbatching(*_args(step))
    assert allowed == (not derived.unsafe_conflicts(step))
    assert allowed == (not any(r < w for _g, r, w, _b in ref_conflicts.find_conflicts(*_args(step))))


@given(step=general_steps())
def test_general_steps_are_well_formed(step: Step) -> None:
    assert ref_step.is_well_formed(step)


@given(step_info=realizable_steps_for_ci())
def test_realizable_steps_are_well_formed(step_info: tuple[Step, dict[str, object]]) -> None:
    assert ref_step.is_well_formed(step_info[0])


@given(case=conflict_cases.cases(), data=st.data())
def test_harm_depends_only_on_which_ubatch_holds_each_token(case: Case, data: st.DataObject) -> None:
    """Padding past the last real token changes nothing."""
    step = _step(case)
    for split in _splits(case, step):
        padded = [*split[:-1], (split[-1][0], split[-1][1] + data.draw(st.integers(0, 8)))]
        assert ref_decision.simulate(step, padded) == ref_decision.simulate(step, split)


# ---------------------------------------------------------------- ill-formed steps, as literals


def _lit(c: list[int], q: list[int], tables: list[list[list[int]]], sizes: list[int]) -> Step:
    return ref_step.check_step(np.array(c), np.array(q), [np.array(t) for t in tables], sizes)


def test_self_overlap_is_a_violation_but_no_conflict() -> None:
    """One request, block 1 at columns 0 and 2: its computed position 0 and
    its written position 2 share slot (1, 0). Split after its first token,
    it reads the slot before its own later token writes it. The contract's
    conflicts need w != r, so there is no conflict: the contract's "violations are
    exactly the harmful conflicts" does not hold for such a step (no engine
    makes one: a block id never repeats inside a row)."""
    step = _lit([1], [2], [[[1, 2, 1]]], [1])
    assert ref_conflicts.find_conflicts(*_args(step)) == set()
    assert ref_step.self_overlaps(step) == {(0, 0, 1, 0)}
    assert ref_decision.simulate(step, [(0, 1), (1, 2)]) == [Violation(0, 0, 0, 0, 1, 0, 0)]
    assert ref_conflicts.harmful_conflicts(step, [(0, 1), (1, 2)]) == set()
    assert ref_decision.allow_microbatching(*_args(step)) is False  # the exact rule follows the simulation


def test_slot_written_twice_has_a_harmful_conflict_without_violation() -> None:
    """Requests 0 and 2 both write slot (1, 0); request 1 reads it. Split
    [0] [1] [2]: the conflict (0, 1, 2, 1) is harmful by definition (request 2
    writes in a later ubatch) but request 0's write came first, so the
    simulation sees no violation."""
    step = _lit([0, 1, 0], [1, 1, 1], [[[1, 0], [1, 2], [1, 0]]], [1])
    split = [(0, 1), (1, 2), (2, 3)]
    assert ref_step.multi_written_slots(step) == {(0, 1, 0)}
    assert ref_conflicts.harmful_conflicts(step, split) == {(0, 1, 2, 1)}
    assert ref_decision.simulate(step, split) == []
    assert ref_decision.allow_microbatching(*_args(step)) is True
    assert derived.unsafe_conflicts(step) == {(0, 1, 2, 1)}  # the conflict rule would veto: sound, imprecise


def test_idle_request_is_no_reader() -> None:
    """q == 0: no token, so no read and no conflict, whatever its table says."""
    step = _lit([1, 0], [0, 1], [[[1], [1]]], [1])
    assert ref_conflicts.find_conflicts(*_args(step)) == set()
    assert ref_decision.simulate(step, [(0, 1)]) == []
