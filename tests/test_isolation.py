"""Crash isolation, on the CPU: a worker that dies or raises is reported and
replaced, the search shrinks the case, and the run goes on."""

from __future__ import annotations

import os
import textwrap

from hypothesis import settings

from batchfuzz import registry, runner
from batchfuzz.isolate import IsolatedRunner


def test_isolated_violation_is_shrunk_and_the_run_continues() -> None:
    contract = registry.get("split_dummy_tokens")
    prop = contract.property("dummy_attention_in_bounds")
    bad = IsolatedRunner(contract, "variant:remainder_to_last.dummy_run", device="cpu")
    try:
        r = runner.hunt(contract, None, bad.isolated(prop), target_name="isolated",  # type: ignore[arg-type]
                        run_settings=settings(settings(), max_examples=200))
    finally:
        bad.close()
    assert r.failure is not None
    assert r.failure.error_type == "PropertyViolation"
    good = IsolatedRunner(contract, "impl:numpy", device="cpu")
    try:
        r2 = runner.hunt(contract, None, good.isolated(prop), target_name="isolated",  # type: ignore[arg-type]
                         run_settings=settings(settings(), max_examples=20))
    finally:
        good.close()
    assert r2.failure is None and r2.examples > 0


def test_dying_worker_is_reported_as_crash_and_replaced(tmp_path) -> None:  # type: ignore[no-untyped-def]
    mod = tmp_path / "dies.py"
    mod.write_text(textwrap.dedent("""
        import os
        def split(num_reqs, num_tokens):
            if num_reqs == 3:
                os.abort()  # a hard fault: the process is gone, like a kernel crash
            q, r = divmod(num_tokens, num_reqs)
            return [q + (i >= num_reqs - r) for i in range(num_reqs)]
    """))
    contract = registry.get("split_dummy_tokens")
    prop = contract.property("sum_is_num_tokens")
    worker = IsolatedRunner(contract, f"target:{mod}:split", device="cpu")
    try:
        from batchfuzz.codec import decode_case

        outcomes = [worker.evaluate(prop, decode_case({"args": {"num_reqs": r, "num_tokens": 10}, "context": {"max_model_len": 10}}))
                    for r in (2, 3, 4)]
    finally:
        worker.close()
    assert [o["status"] for o in outcomes] == ["passed", "crash", "passed"]
    assert worker.crashes == 1
    assert "worker died" in outcomes[1]["message"]
    assert os.getpid() > 0  # this process is untouched
