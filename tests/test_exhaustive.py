"""Bounded-exhaustive checks (``batchfuzz check --exhaustive``, ``batchfuzz.exhaustive``).

- Every scope record is what it says: its enumeration has the declared
  number of cases, in the contract's order (``Contract.size``, never
  decreasing), each in the scope's domain.
- The oracle and every registered implementation hold on every input of
  their contract's ``ci`` scope.
- Every catalogue variant is found within one of its contract's scopes, with
  a counterexample no larger than its canonical form (the catalogue's
  ``compare``). The search here runs only the variant's primary property
  (``caught_by[0]``), to stay inside the CI budget. That bounds what
  ``check --exhaustive`` (every property) reports: its first failing input
  comes no later in the scope than this one, and sizes never decrease along
  a scope, so its counterexample is no larger either.
- Smallest first: on planted bugs whose minimal case is known, the reported
  input is that case, at its known position in the scope.
- The command: exit codes, the success sentence, the printed reproduction,
  the target's domain and ``@assumes`` (cases skipped and counted), a budget
  that ends first (exit 3), usage errors (exit 2).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import batchfuzz
from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.catalogue import compare, same_value
from batchfuzz.cli import main
from batchfuzz.exhaustive import run_scope, scope_cases
from batchfuzz.reference.pad_query_start_loc import pad_query_start_loc
from batchfuzz.reference.split_dummy_tokens import split_dummy_tokens
from batchfuzz.registry import RecordError, Scope
from tests._lazy import LazyModule

CONTRACTS = registry.contracts()
torch = LazyModule("torch")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Small torch ops on 2 shared cores are several times faster on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- the scope records


@pytest.mark.parametrize(("name", "scope"), [(c.name, s.name) for c in CONTRACTS for s in c.scopes])
def test_scope_record(name: str, scope: str) -> None:
    contract = registry.get(name)
    sc = contract.scope(scope)
    cases = scope_cases(contract, sc)
    assert len(cases) == sc.count
    sizes = [contract.size(case) for case in cases]
    assert all(a <= b for a, b in itertools.pairwise(sizes)), "a scope must come smallest first"
    domain = contract.domain(sc.domain)
    outside = [k for k, case in enumerate(cases) if not domain.contains(case)]
    assert not outside, f"cases {outside[:5]} lie outside the scope's domain {sc.domain}"


# ---------------------------------------------------------------- correct targets hold


def _targets() -> list[tuple[str, str]]:
    return [(c.name, "oracle") for c in CONTRACTS] + [(c.name, i.name) for c in CONTRACTS for i in c.implementations
                                                     if "cpu" in i.devices]


@pytest.mark.parametrize(("name", "target"), _targets())
def test_correct_targets_hold_on_the_ci_scope(name: str, target: str) -> None:
    contract = registry.get(name)
    fn = contract.oracle if target == "oracle" else next(i for i in contract.implementations if i.name == target).for_device("cpu")
    result = run_scope(contract, fn, "ci", target_name=target)
    assert result.failure is None, result.failure.to_json() if result.failure else None
    assert result.status == "passed" and result.checked == contract.scope("ci").count and result.skipped == 0
    assert result.summary() == f"all {result.checked} inputs within scope ci hold"


# ---------------------------------------------------------------- every known bug is found, no larger than documented


def _holds_canonical(contract: registry.Contract, scope: Scope, canonical: dict[str, Any]) -> bool:
    return any(all(same_value(case.args[k], v) for k, v in canonical.items()) for case in scope_cases(contract, scope))


@pytest.mark.parametrize(("name", "variant"), [(c.name, v.name) for c in CONTRACTS for v in c.variants])
def test_variant_found_no_larger_than_canonical(name: str, variant: str) -> None:
    """The variant's scope is the cheapest one its canonical form lies in
    (the canonical form fails, so the first failing input of that scope can
    be no larger: every smaller input comes before it), else the default
    scope (a canonical form recorded from random search can lie outside every
    scope: block size 4 or 8, block ids past 4)."""
    contract = registry.get(name)
    v = contract.variant(variant)
    assert v.canonical is not None, f"{name}.{variant} documents no canonical form"
    sc = next((s for s in sorted(contract.scopes, key=lambda s: s.count) if _holds_canonical(contract, s, v.canonical)),
              contract.scope())
    result = run_scope(contract, v.fn, sc, target_name=v.name, properties=(contract.property(v.caught_by[0]),))
    assert result.failure is not None, f"{name}.{variant} is not found in scope {sc.name}: {result.summary()}"
    verdict, detail = compare(contract, result.failure.case, v.canonical)
    assert verdict in ("equal", "smaller"), f"{name}.{variant} in scope {sc.name}: {detail}"


# ---------------------------------------------------------------- smallest first, on planted bugs


def _wrong_at(*pairs: tuple[int, int]) -> Any:
    """split_dummy_tokens, wrong (the remainder moved to the front) exactly at the ``(R, N)`` pairs."""
    def target(num_reqs: int, num_tokens: int) -> list[int]:
        out = split_dummy_tokens(num_reqs, num_tokens)
        return out[::-1] if (num_reqs, num_tokens) in pairs else out
    return target


def _position(contract: registry.Contract, scope: str, r: int, n: int) -> int:
    cases = scope_cases(contract, contract.scope(scope))
    return 1 + next(k for k, c in enumerate(cases) if (c.args["num_reqs"], c.args["num_tokens"]) == (r, n))


def test_first_counterexample_is_the_smallest_planted_one() -> None:
    contract = registry.get("split_dummy_tokens")
    # Wrong at three places; (2, 29) is the smallest in the order (R, then N)
    # although (4, 5) has fewer tokens and (3, 31) comes first in this list.
    result = run_scope(contract, _wrong_at((3, 31), (4, 5), (2, 29)), "ci")
    assert result.failure is not None
    assert (result.failure.case.args["num_reqs"], result.failure.case.args["num_tokens"]) == (2, 29)
    assert result.index == _position(contract, "ci", 2, 29) == 32 + 28
    assert result.checked == result.index and result.failure.complete


def test_planted_bug_in_a_buffer_contract_is_reported_at_its_smallest() -> None:
    """pad_query_start_loc, wrong only for P = 3 and a stale last slot of the
    buffer: the first counterexample of the ci scope has R = 1 (no step of
    R = 0 has P = 3 there), nst = [0] (the least sum), the shortest buffer
    (P + 1 entries) and a single stale letter."""
    contract = registry.get("pad_query_start_loc")

    def target(num_scheduled_tokens: Any, num_reqs_padded: int, out: Any = None) -> Any:
        stale_last = out is not None and int(out[-1]) != 0
        result = pad_query_start_loc(num_scheduled_tokens, num_reqs_padded, out=out)
        if stale_last and num_reqs_padded == 3:
            result[0] = 5
        return result

    result = run_scope(contract, target, "ci")
    assert result.failure is not None
    args = result.failure.case.args
    assert [int(x) for x in args["num_scheduled_tokens"]] == [0] and args["num_reqs_padded"] == 3
    assert list(result.failure.case.context["out"]) == [0, 0, 0, 7]


def _fake_scope(cases: list[Case], count: int) -> Scope:
    return Scope("fake", "a hand-made scope", "spec", count, lambda: iter(cases))


def _a(r: int, n: int) -> Case:
    return Case({"num_reqs": r, "num_tokens": n}, {"max_model_len": -(-n // r)})


def test_a_scope_out_of_order_or_miscounted_is_a_record_error() -> None:
    contract = registry.get("split_dummy_tokens")
    with pytest.raises(RecordError, match="not in the contract's order"):
        run_scope(contract, contract.oracle, _fake_scope([_a(2, 2), _a(1, 3)], 2))
    with pytest.raises(RecordError, match="declares 3"):
        run_scope(contract, contract.oracle, _fake_scope([_a(1, 1), _a(1, 2)], 3))
    with pytest.raises(RecordError, match="more than the 1 cases"):
        run_scope(contract, contract.oracle, _fake_scope([_a(1, 1), _a(1, 2)], 1))


def test_a_scribbling_target_does_not_change_the_enumeration() -> None:
    contract = registry.get("split_ubatches")
    before = [c.args["num_scheduled_tokens"].copy() for c in scope_cases(contract, contract.scope("ci"))]

    def scribbler(num_scheduled_tokens: Any, num_tokens_padded: int, num_reqs_padded: int, num_ubatches: int) -> Any:
        from batchfuzz.reference.split_ubatches import split_ubatches
        result = split_ubatches(num_scheduled_tokens, num_tokens_padded, num_reqs_padded, num_ubatches)
        num_scheduled_tokens[:] = 0
        return result

    result = run_scope(contract, scribbler, "ci")
    assert result.failure is not None and result.failure.property == "inputs_unchanged"
    after = [c.args["num_scheduled_tokens"] for c in scope_cases(contract, contract.scope("ci"))]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


# ---------------------------------------------------------------- domains and assumptions


@batchfuzz.domain("engine")
def _engine_only_qsl(num_scheduled_tokens: Any, num_reqs_padded: int, out: Any = None) -> Any:
    """Correct on the engine domain (R >= 1, out[0] == 0), wrong for R == 0."""
    if len(num_scheduled_tokens) == 0:
        raise ValueError("num_scheduled_tokens must not be empty")
    return pad_query_start_loc(num_scheduled_tokens, num_reqs_padded, out=out)


def test_the_targets_domain_is_respected() -> None:
    contract = registry.get("pad_query_start_loc")
    assert run_scope(contract, _engine_only_qsl, "ci", domain="spec").failure is not None
    result = run_scope(contract, _engine_only_qsl, "ci")  # its own domain, engine
    engine = contract.domain("engine")
    inside = sum(engine.contains(c) for c in scope_cases(contract, contract.scope("ci")))
    assert result.status == "passed" and result.checked == inside and result.skipped == contract.scope("ci").count - inside
    assert result.skipped > 0 and "skipped" in result.summary()


@batchfuzz.assumes(lambda num_reqs, num_tokens: num_tokens <= 20)
def _small_only(num_reqs: int, num_tokens: int) -> list[int]:
    return _wrong_at((2, 25))(num_reqs, num_tokens)


def test_the_targets_assumptions_are_respected() -> None:
    contract = registry.get("split_dummy_tokens")
    result = run_scope(contract, _small_only, "ci")
    n = sum(c.args["num_tokens"] <= 20 for c in scope_cases(contract, contract.scope("ci")))
    assert result.status == "passed" and result.checked == n and result.skipped == contract.scope("ci").count - n


# ---------------------------------------------------------------- the command


@functools.cache
def _targets_file(tmp: Path) -> Path:
    path = tmp / "planted.py"
    path.write_text(
        "import time\n"
        "from batchfuzz.reference.split_dummy_tokens import split_dummy_tokens\n\n"
        "def wrong_at_2_29(num_reqs, num_tokens):\n"
        "    out = split_dummy_tokens(num_reqs, num_tokens)\n"
        "    return out[::-1] if (num_reqs, num_tokens) == (2, 29) else out\n\n"
        "def slow(num_reqs, num_tokens):\n"
        "    time.sleep(0.002)\n"
        "    return split_dummy_tokens(num_reqs, num_tokens)\n")
    return path


def test_cli_counterexample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = f"{_targets_file(tmp_path)}:wrong_at_2_29"
    report = tmp_path / "r.json"
    assert main(["check", "split_dummy_tokens", target, "--exhaustive", "--scope", "ci", "--no-isolation",
                 "--json", str(report)]) == 1
    out = capsys.readouterr().out
    assert "counterexample at input 60 of 528 within scope ci" in out
    assert "--- reproduction (copy-paste; run it with python) ---" in out
    assert "wrong_at_2_29(2, 29)  # num_reqs, num_tokens" in out
    assert f"--- replay: batchfuzz check split_dummy_tokens {target} --exhaustive --scope ci" in out
    data = json.loads(report.read_text())
    assert data["status"] == "counterexample" and data["index"] == 60 and data["scope"] == "ci"
    assert data["counterexample"]["args"] == {"num_reqs": "2", "num_tokens": "29"}


def test_cli_pass_in_a_worker_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "split_dummy_tokens", "impl:numpy@cpu", "--exhaustive", "--scope", "int16_edge"]) == 0
    out = capsys.readouterr().out
    assert "in a worker process" in out and "all 10 inputs within scope int16_edge hold" in out


def test_cli_budget_ends_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = f"{_targets_file(tmp_path)}:slow"
    assert main(["check", "split_dummy_tokens", target, "--exhaustive", "--no-isolation", "--budget", "1"]) == 3
    out = capsys.readouterr().out
    assert "incomplete: the budget ended after" in out and "of the 2080 inputs within scope small" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--exhaustive", "--scope", "huge"], "has no scope 'huge' (has: small, ci, int16_edge)"),
    (["--scope", "ci"], "--scope needs --exhaustive"),
    (["--exhaustive", "--seed", "3"], "--seed does not apply to --exhaustive"),
])
def test_cli_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "split_dummy_tokens", "oracle", "--no-isolation", *argv]) == 2
    assert message in capsys.readouterr().err
