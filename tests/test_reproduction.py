"""Printed reproductions are real code: executed, they replay the failure."""

from __future__ import annotations

import numpy as np
from hypothesis import settings

from batchfuzz import registry, runner


def _hunt(contract_name: str, variant: str, prop: str) -> runner.Failure:
    c = registry.get(contract_name)
    r = runner.hunt(c, c.variant(variant).fn, c.property(prop), target_name=variant,
                    run_settings=settings(settings(), max_examples=300, database=None))
    assert r.failure is not None
    return r.failure


def test_positional_reproduction_replays_a_dummy_split_failure() -> None:
    f = _hunt("split_dummy_tokens", "remainder_to_last.dummy_run", "max_is_ceil")
    ns: dict = {"bad": registry.get("split_dummy_tokens").variant("remainder_to_last.dummy_run").fn}
    exec(f.reproduction(function_name="bad"), ns)
    n = ns["result"]
    assert max(n) > -(-f.case.args["num_tokens"] // f.case.args["num_reqs"])


def test_out_form_reproduction_replays_the_stale_padding_through_its_history() -> None:
    f = _hunt("pad_query_start_loc", "padding_unwritten", "persistent_buffer")
    ns: dict = {"bad": registry.get("pad_query_start_loc").variant("padding_unwritten").fn}
    code = f.reproduction(function_name="bad")
    assert "out = np.array(" in code and "result_out = bad(" in code
    exec(code, ns)
    oracle = registry.get("pad_query_start_loc").oracle
    steps = [*f.case.context["history"], (f.case.args["num_scheduled_tokens"], f.case.args["num_reqs_padded"])]
    results = [ns[f"step_{k + 1}"] for k in range(len(steps) - 1)] + [np.asarray(ns["result_out"]).tolist()]
    wrong = [k for k, ((nst, p), got) in enumerate(zip(steps, results, strict=True)) if got != oracle(nst, p).tolist()]
    assert wrong, code
