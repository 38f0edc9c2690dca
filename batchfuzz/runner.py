"""Run a contract's properties against a target with Hypothesis.

The same code serves the generated tests, ``batchfuzz check`` and
``batchfuzz fuzz``: ``hunt`` runs one property once with given settings and
returns the shrunk counterexample, if any; ``hunt_for`` repeats rounds with
fresh seeds until a wall-clock budget is spent.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import Phase, event, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import HypothesisException

from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation
from batchfuzz.codec import call_literal, encode_case, literal
from batchfuzz.preconditions import declared_assumptions, declared_domain
from batchfuzz.reduce import reduce_case
from batchfuzz.registry import Contract, Property, Target


@dataclass
class Failure:
    contract: str
    target: str
    property: str
    spec: str
    case: Case
    error_type: str
    message: str
    traceback: str = ""

    def kind(self) -> str:
        return "violation" if self.error_type == PropertyViolation.__name__ else "exception"

    def reproduction(self, function_name: str | None = None, import_line: str | None = None) -> str:
        """A copy-paste Python reproduction of the shrunk case.

        The call is positional (the canonical argument order of SPEC.md), so it
        works whatever the target names its parameters.
        """
        from batchfuzz import registry

        imports: set[str] = set()
        name = function_name or self.contract
        try:
            hook = registry.get(self.contract).reproduce
        except KeyError:
            hook = None
        if hook is not None:
            body = hook(name, self.case, self.property, imports)
        else:
            body = [f"{k} = {literal(v, imports)}  # context the property uses" for k, v in self.case.context.items()]
            body.append(f"result = {call_literal(name, self.case, imports)}")
        lines = sorted(imports)
        if import_line:
            lines.append(import_line)
        lines.extend(body)
        lines.append(f"# violates {self.property}: {self.spec}")
        lines.append(f"# {self.error_type}: {self.message.splitlines()[0] if self.message else ''}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": self.contract, "target": self.target, "property": self.property,
            "spec": self.spec, "case": encode_case(self.case), "error_type": self.error_type,
            "message": self.message,
        }


@dataclass
class HuntResult:
    property: str
    examples: int = 0
    seconds: float = 0.0
    failure: Failure | None = None
    events: Counter[str] = field(default_factory=Counter)
    scores: Counter[str] = field(default_factory=Counter)


def hunt(
    contract: Contract,
    target: Target,
    prop: Property,
    *,
    target_name: str,
    run_settings: settings,
    seed: int | None = None,
    extra_examples: tuple[Case, ...] = (),
    on_example: Callable[[], None] | None = None,
    domain: str | None = None,
    reduce: bool = True,
) -> HuntResult:
    """Run ``prop`` against ``target`` once under ``run_settings``, on cases of
    the contract's ``domain`` (default: the one the target declares with
    ``@batchfuzz.domain``, else ``spec``), minus the cases the target's
    ``@batchfuzz.assumes`` predicates reject.

    Returns the number of examples run and, on failure, the shrunk case (the
    last failing case Hypothesis replays is its minimal one, since
    ``report_multiple_bugs`` is off).

    ``reduce``: the shrunk case is then reduced further by the contract's
    structural reductions (``batchfuzz.reduce``).

    Seeds: a randomized run uses ``seed`` (fresh when None); a derandomized
    run (the ``ci`` profile) is seeded from (contract, property, domain)
    alone, so its example stream does not depend on the target or on the
    source code of this function.
    """
    domain = domain or declared_domain(target) or "spec"
    dom = contract.domain(domain)
    assumptions = declared_assumptions(target)
    result = HuntResult(prop.name)
    last_failure: list[tuple[Case, BaseException]] = []

    def admitted(case: Case) -> bool:
        return all(p(*(case.args[k] for k in contract.arguments)) for p in assumptions)

    def body(case: Case) -> None:
        if assumptions and not admitted(case):
            reject()
        result.examples += 1
        for label in contract.labels(case):
            event(label)
            result.events[label] += 1
        snapshot = case.copy()
        try:
            prop.check(target, case)
        except HypothesisException:
            raise
        except Exception as exc:
            last_failure.append((snapshot, exc))
            raise
        if contract.scores is not None:
            result.scores.update(contract.scores(target, snapshot))
        if on_example is not None:
            on_example()

    # One database key per (contract, domain, target, property): the inner
    # function is the same for every hunt, so without this every hunt would
    # share a key and replay each other's saved failures against the wrong
    # strategy.
    body._hypothesis_internal_add_digest = repr((contract.name, domain, target_name, prop.name)).encode()  # type: ignore[attr-defined]
    test = given(case=dom.cases())(body)
    for ex in reversed(extra_examples):
        from hypothesis import example

        test = example(case=ex)(test)
    if run_settings.derandomize:
        test = hypothesis_seed(_round_seed(0, contract.name, prop.name, domain))(test)
    elif seed is not None:
        # @seed switches the example database off; applying the settings
        # after it switches it back on, so a seeded hunt (every round of
        # hunt_for) still saves and replays failures.
        test = hypothesis_seed(seed)(test)
    test = settings(run_settings, report_multiple_bugs=False)(test)
    start = time.perf_counter()
    try:
        test()
    except HypothesisException:
        raise
    except Exception as exc:
        if not last_failure:
            raise
        case, err = last_failure[-1]
        if reduce:
            within = dataclasses.replace(dom, contains=lambda c: dom.contains(c) and admitted(c))
            case, err = reduce_case(contract, within, case, err, lambda c: _raised(prop, target, c))
        result.failure = Failure(
            contract=contract.name, target=target_name, property=prop.name, spec=prop.spec, case=case,
            error_type=type(err).__name__, message=str(err),
            traceback="".join(traceback.format_exception(type(err), err, err.__traceback__)) if err.__traceback__ else str(exc),
        )
    finally:
        result.seconds = time.perf_counter() - start
    return result


def admits(contract: Contract, target: Target, case: Case, domain: str | None = None) -> bool:
    """Whether ``case`` is an input of ``target``: it lies in ``domain`` (default:
    the target's declared domain, else ``spec``) and every ``@assumes``
    predicate of the target accepts it."""
    dom = contract.domain(domain or declared_domain(target) or "spec")
    args = [case.args[k] for k in contract.arguments]
    return dom.contains(case) and all(p(*args) for p in declared_assumptions(target))


def _raised(prop: Property, target: Target, case: Case) -> BaseException | None:
    try:
        prop.check(target, case)
    except Exception as exc:
        return exc
    return None


def hunt_for(
    contract: Contract,
    target: Target,
    properties: tuple[Property, ...],
    *,
    target_name: str,
    budget_s: float,
    base_settings: settings,
    seed: int = 0,
    round_examples: int | Callable[[int], int] = 50,
    stop_on_failure: bool = True,
    deadline: float | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_result: Callable[[HuntResult, HuntResult], None] | None = None,
    max_rounds: int | None = None,
    domain: str | None = None,
) -> list[HuntResult]:
    """Round-robin over ``properties`` with fresh seeds until ``budget_s`` is spent.

    Each round runs every still-passing property with ``round_examples``
    examples; a derandomized profile runs a single round of its own size, since
    a repeated round would replay the same examples.

    ``should_stop`` is polled before every hunt (an interrupted run stops at
    the next hunt boundary and returns what it has); ``on_result(round_result,
    accumulated)`` is called after every hunt, so a caller can persist a
    failure the moment it is found; ``max_rounds`` caps the rounds (with a
    fixed ``seed`` and a fixed ``round_examples`` that makes a run replayable
    example for example). ``round_examples`` may be a function of the round
    number, to size rounds to a time slice.
    """
    results = {p.name: HuntResult(p.name) for p in properties}
    end = deadline if deadline is not None else time.monotonic() + budget_s
    round_no = 0
    while True:
        live = [p for p in properties if results[p.name].failure is None]
        if not live:
            break
        n_examples = round_examples(round_no) if callable(round_examples) else round_examples
        for p in live:
            if should_stop is not None and should_stop():
                return list(results.values())
            if time.monotonic() >= end and round_no > 0:
                break
            rs = base_settings if base_settings.derandomize else settings(base_settings, max_examples=n_examples)
            r = hunt(contract, target, p, target_name=target_name, run_settings=rs,
                     seed=_round_seed(seed, contract.name, p.name, round_no), domain=domain)
            acc = results[p.name]
            acc.examples += r.examples
            acc.seconds += r.seconds
            acc.events.update(r.events)
            acc.scores.update(r.scores)
            if r.failure is not None:
                acc.failure = r.failure
            if on_result is not None:
                on_result(r, acc)
            if r.failure is not None and stop_on_failure:
                return list(results.values())
        round_no += 1
        if base_settings.derandomize or time.monotonic() >= end or (max_rounds is not None and round_no >= max_rounds):
            break
    if should_stop is not None and should_stop():
        return list(results.values())
    # The contract's explicit regression examples run last: a failure there is
    # not shrunk by Hypothesis, so generated search gets the first chance to
    # report a minimal case.
    if contract.examples:
        for p in properties:
            acc = results[p.name]
            if acc.failure is not None:
                continue
            examples = tuple(ex for ex in contract.examples if admits(contract, target, ex, domain))
            if not examples:
                continue
            r = hunt(contract, target, p, target_name=target_name, extra_examples=examples,
                     run_settings=settings(base_settings, phases=[Phase.explicit], database=None), domain=domain)
            acc.examples += r.examples
            acc.seconds += r.seconds
            if r.failure is not None:
                acc.failure = r.failure
            if on_result is not None:
                on_result(r, acc)
            if r.failure is not None and stop_on_failure:
                break
    return list(results.values())


def _round_seed(seed: int, *parts: object) -> int:
    """A stable 32-bit seed per (run seed, contract, property, round): unlike
    ``hash()``, independent of PYTHONHASHSEED, so ``--seed`` replays a run."""
    import zlib

    return zlib.crc32(repr((seed, *parts)).encode()) & 0xFFFFFFFF


def violated_properties(contract: Contract, target: Target, case: Case) -> list[str]:
    """Every property of ``contract`` that ``case`` violates (or crashes) on ``target``."""
    out = []
    for p in contract.properties:
        try:
            p.check(target, case.copy())
        except Exception:
            out.append(p.name)
    return out
