"""The known-bug catalogue: every registered variant, hunted, shrunk and timed.

For each :class:`~batchfuzz.registry.Variant` of every contract the catalogue

1. runs the variant's primary property (``caught_by[0]``) with
   :func:`batchfuzz.runner.hunt`, the same code path as the generated tests
   and ``batchfuzz check``, under the ``ci`` profile (derandomized, no
   database) with ``max_examples`` raised to :data:`MAX_EXAMPLES`;
2. records how many examples (and seconds) it took to *find* a failure, and
   the totals including shrinking;
3. compares the shrunk case with the variant's documented ``canonical`` form
   (:func:`compare`): ``equal``, ``smaller`` (no larger, where shrinking is
   not unique), or ``larger``; on ``larger``, up to
   :data:`EXTRA_SHRINK_STREAMS` seeded streams get a chance to shrink to a
   case no larger (finding the bug stays the ci stream's job);
4. checks that every property in ``caught_by`` really fails on the variant:
   replayed on the shrunk case first, and by a separate search (same
   settings) for any property the shrunk case does not violate.

Every search runs with Hypothesis's source-constant pool pinned
(:func:`pinned_source_constants`), so a row does not depend on what else the
process imported.

A variant passes (:attr:`Row.ok`) when it is found, its shrunk case is no
larger than its canonical form, and every ``caught_by`` property fails on it.
``batchfuzz catalogue`` prints and writes the table; ``tests/test_catalogue.py``
asserts :attr:`Row.ok` per variant. Nothing here names a contract: both are
driven by the registry.

Comparison rules (:func:`compare`), for a canonical dict that may be partial:

- only the keys present in ``canonical`` are compared; a missing key means
  "anything" (prefer complete forms);
- ``equal``: every present key has the same value. Arrays and sequences
  compare by shape and values; a canonical numpy array also pins the dtype,
  a plain list leaves it free. Dataclasses compare field by field.
- ``smaller`` ("no larger"): not equal, but the case is no larger in the
  contract's order (``Contract.size(case)``, a tuple compared
  lexicographically: for contract E, requests first, then tokens, groups,
  block sizes, table cells) than the case with the canonical values put in;
- ``larger`` otherwise (the detail gives both sizes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import settings

from batchfuzz import profiles, registry, runner
from batchfuzz._host import to_host
from batchfuzz.case import Case
from batchfuzz.codec import encode, encode_case, literal
from batchfuzz.execution import InProcess
from batchfuzz.registry import Contract, Property, Target, Variant
from batchfuzz.reproduce import reproduction

# The catalogue's search budget: the ``ci`` profile with more examples. Only a
# variant that is not found pays for all of them; a found one stops at its
# first failure and then shrinks.
MAX_EXAMPLES = profiles.CATALOGUE_MAX_EXAMPLES

# Shrinking can stop in a local minimum that depends on the example stream.
# When the ci stream's shrunk case is larger than the documented form, up to
# this many further streams (the same settings, randomized with the fixed
# seeds 1, 2, ...) are tried for a case no larger than it. Finding the bug
# is the ci stream's job alone; the extra streams only judge shrinking, and
# a row that needed one says so.
EXTRA_SHRINK_STREAMS = 3

# The Hypothesis version the variants' canonical forms were recorded with.
# Another version generates and shrinks differently: the catalogue still
# runs, and says which version it ran under.
RECORDED_WITH = "6.168.0"


def catalogue_settings(max_examples: int = MAX_EXAMPLES) -> settings:
    """The ``ci`` profile (derandomized, no database) with ``max_examples``.

    Independent of the environment's active profile, so the table, the tests
    and a developer's run agree example for example.
    """
    profiles.register_profiles()
    return settings(settings.get_profile("ci"), max_examples=max_examples, database=None)


def contract_constants(contract: Contract) -> Any:
    """Hypothesis's ``Constants`` harvested from the source files of exactly
    the modules ``contract``'s record references (``Contract.modules()``: the
    record, its variants, oracle, implementations and strategies), so a
    literal added anywhere else changes no row of this contract."""
    import importlib
    import types

    from hypothesis.internal.conjecture import providers
    from hypothesis.internal.constants_ast import constants_from_module

    pool = providers.Constants()
    for name in contract.modules():
        path = getattr(importlib.import_module(name), "__file__", None)
        if not path:
            continue
        stand_in = types.ModuleType(name)
        stand_in.__file__ = path
        pool |= constants_from_module(stand_in)
    return pool


_CONSTANTS: dict[str, Any] = {}


@contextlib.contextmanager
def pinned_source_constants(contract: Contract) -> Iterator[None]:
    """Hypothesis with a fixed pool of source constants: ``contract_constants(contract)``.

    Hypothesis (6.1xx) sometimes draws integers and strings found in the
    source of the *local* modules in ``sys.modules`` (anything outside
    site-packages and the standard library), re-scanned whenever
    ``sys.modules`` grows. A derandomized run would therefore depend on which
    modules happen to be imported (an xdist worker's history, the CLI's
    commands, a script's own file) and on every literal of the project.
    Inside this context the pool is the contract's own, whatever is
    imported, so a row is the same from the CLI and from any pytest worker,
    and changes only when a module the record references changes. Should the
    internal hook move in another Hypothesis version, this context does
    nothing (``RECORDED_WITH`` names the version the canonical forms were
    recorded with).
    """
    from hypothesis.internal.conjecture import providers

    original = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if original is None or cache is None:
        yield
        return
    if contract.name not in _CONSTANTS:
        _CONSTANTS[contract.name] = contract_constants(contract)
    pool = _CONSTANTS[contract.name]
    providers._get_local_constants = lambda: pool
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.cache.clear()


# ---------------------------------------------------------------- comparison


def _plain(value: Any) -> Any:
    """Tensors to numpy, numpy scalars to ints."""
    value = to_host(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer))


def _is_seq(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray))


def _items(value: Any) -> list[Any]:
    return value.tolist() if isinstance(value, np.ndarray) else list(value)


def same_value(actual: Any, canonical: Any) -> bool:
    """Structural equality; see the module docstring for arrays and dtypes."""
    actual, canonical = _plain(actual), _plain(canonical)
    if canonical is None or actual is None:
        return actual is canonical
    if isinstance(canonical, bool) or isinstance(actual, bool):
        return type(actual) is type(canonical) and actual == canonical
    if _is_int(canonical):
        return _is_int(actual) and int(actual) == int(canonical)
    if _is_seq(canonical):
        if not _is_seq(actual):
            return False
        if isinstance(canonical, np.ndarray):
            if not isinstance(actual, np.ndarray) or actual.dtype != canonical.dtype:
                return False
            return actual.shape == canonical.shape and bool(np.array_equal(actual, canonical))
        a, c = _items(actual), _items(canonical)
        return len(a) == len(c) and all(same_value(x, y) for x, y in zip(a, c, strict=True))
    if dataclasses.is_dataclass(canonical) and not isinstance(canonical, type):
        return type(actual) is type(canonical) and all(
            same_value(getattr(actual, f.name), getattr(canonical, f.name)) for f in dataclasses.fields(canonical))
    if isinstance(canonical, dict):
        return isinstance(actual, dict) and set(actual) == set(canonical) and all(
            same_value(actual[k], canonical[k]) for k in canonical)
    return bool(actual == canonical)


def compare(contract: Contract, case: Case, canonical: dict[str, Any] | None) -> tuple[str, str]:
    """``(verdict, detail)``: ``equal`` (every key of the canonical form has the
    case's value), ``smaller`` (not equal, but no larger in the contract's
    order, ``Contract.size``, with the canonical values put into the case),
    ``larger``, or ``undocumented`` (no canonical form registered)."""
    if canonical is None:
        return "undocumented", "the variant documents no canonical counterexample"
    unknown = [k for k in canonical if k not in case.args]
    if unknown:
        return "larger", f"canonical names argument(s) {unknown} the case does not have (has {list(case.args)})"
    if all(same_value(case.args[k], v) for k, v in canonical.items()):
        return "equal", ""
    shrunk, documented = contract.size(case), contract.size(Case({**case.args, **canonical}, case.context))
    if shrunk > documented:
        return "larger", f"size {shrunk} is larger than the canonical form's size {documented} (in the contract's order)"
    differ = [k for k, v in canonical.items() if not same_value(case.args[k], v)]
    return "smaller", f"size {shrunk} <= {documented}; differs in " + ", ".join(differ)


# ---------------------------------------------------------------- formatting


def _run_length(items: list[Any]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and _is_int(items[i]) and _is_int(items[j + 1]) and items[j + 1] == items[i]:
            j += 1
        n = j - i + 1
        text = compact(items[i])
        out.extend([f"{text}×{n}"] if n >= 4 else [text] * n)
        i = j + 1
    return out


def compact(value: Any, limit: int = 12) -> str:
    """A short human rendering of a case value for tables: arrays as lists
    (dtype omitted; the JSON report keeps it), runs of four or more equal
    entries as ``v×n``, long lists elided with their length."""
    value = _plain(value)
    if isinstance(value, np.ndarray) and value.ndim > 1:
        return "[" + ", ".join(compact(row, limit) for row in value) + "]"
    if _is_seq(value):
        parts = _run_length(_items(value))
        if len(parts) > limit:
            parts = parts[: limit - 2] + ["…", *parts[-1:]]
            return "[" + ", ".join(parts) + f"] (len {len(_items(value))})"
        text = "[" + ", ".join(parts) + "]"
        return text if not isinstance(value, tuple) else "(" + text[1:-1] + ("," if len(value) == 1 else "") + ")"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = ", ".join(f"{f.name}={compact(getattr(value, f.name), limit)}" for f in dataclasses.fields(value))
        return f"{type(value).__name__}({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {compact(v, limit)}" for k, v in value.items()) + "}"
    return repr(value)


def compact_args(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={compact(v)}" for k, v in args.items())


# ---------------------------------------------------------------- running


@dataclass
class Search:
    """One property hunted against one variant."""

    property: str
    found: bool
    examples_to_find: int | None  # examples run up to and including the first failure
    seconds_to_find: float | None
    examples: int  # all examples, shrinking included
    seconds: float
    failure: runner.Failure | None = None


@dataclass
class Row:
    """One catalogue row: a variant, how it was found and what it shrank to."""

    contract: str
    section: str
    variant: str
    origin: str
    description: str
    caught_by: tuple[str, ...]
    canonical: dict[str, Any] | None
    primary: Search  # the ci stream: finding the bug is judged here
    best: Search | None = None  # the search whose shrunk case is reported (the ci stream's unless it shrank worse)
    stream: int = 1  # 1 for the ci stream, k > 1 for the seeded stream k - 1
    ci_case: Case | None = None  # the ci stream's shrunk case, when another stream's is reported
    verdict: str = "not found"
    verdict_detail: str = ""
    violated: list[str] = field(default_factory=list)  # every property the shrunk case violates
    separate: list[Search] = field(default_factory=list)  # caught_by properties searched for on their own
    missing: list[str] = field(default_factory=list)  # caught_by properties that never failed

    @property
    def found(self) -> bool:
        return self.primary.found

    @property
    def case(self) -> Case | None:
        best = self.best if self.best is not None else self.primary
        return best.failure.case if best.failure is not None else None

    @property
    def failure(self) -> runner.Failure | None:
        best = self.best if self.best is not None else self.primary
        return best.failure

    @property
    def ok(self) -> bool:
        return self.found and self.verdict in ("equal", "smaller") and not self.missing

    def problems(self) -> list[str]:
        out = []
        if not self.found:
            out.append(f"not caught by its primary property {self.caught_by[0]} in {self.primary.examples} examples")
        elif self.verdict == "undocumented":
            out.append(f"no canonical counterexample is documented; it shrinks to {compact_args(self.case.args) if self.case else '?'}")
        elif self.verdict not in ("equal", "smaller"):
            out.append(f"shrunk case {compact_args(self.case.args) if self.case else '?'} is larger than the documented "
                       f"canonical form (and no case as small in {EXTRA_SHRINK_STREAMS} further streams): {self.verdict_detail}")
        if self.missing:
            out.append(f"listed in caught_by but never failed: {', '.join(self.missing)}")
        return out

    def to_json(self) -> dict[str, Any]:
        f = self.failure
        return {
            "contract": self.contract, "section": self.section, "variant": self.variant,
            "origin": self.origin, "description": self.description, "caught_by": list(self.caught_by),
            "found": self.found, "ok": self.ok, "problems": self.problems(),
            "property": self.caught_by[0],
            "error_type": f.error_type if f else None, "message": f.message if f else None,
            "case": encode_case(f.case) if f else None,
            "case_literal": {k: literal(v) for k, v in f.case.args.items()} if f else None,
            "reproduction": reproduction(f, f"variant:{self.variant}") if f else None,
            "canonical": {k: encode(v) for k, v in self.canonical.items()} if self.canonical is not None else None,
            "verdict": self.verdict, "verdict_detail": self.verdict_detail,
            "stream": self.stream,
            "ci_stream_case": encode_case(self.ci_case) if self.ci_case is not None else None,
            "violated_by_shrunk_case": self.violated,
            "examples_to_find": self.primary.examples_to_find, "seconds_to_find": _round(self.primary.seconds_to_find),
            "examples": self.primary.examples, "seconds": _round(self.primary.seconds),
            "separate_searches": [
                {"property": s.property, "found": s.found, "examples_to_find": s.examples_to_find,
                 "seconds_to_find": _round(s.seconds_to_find), "examples": s.examples, "seconds": _round(s.seconds),
                 "case": encode_case(s.failure.case) if s.failure else None}
                for s in self.separate
            ],
            "missing": self.missing,
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


class _Counting(InProcess):
    """The variant run in this process, its checks counted: the index and time
    of the first failing example are what the catalogue reports as the cost
    of finding the bug (Hypothesis and the runner see the property as it is).
    The time counts from the first check, as the search's own ``seconds``
    count from its start: the search's set-up (its domain, say) is in neither."""

    def __init__(self, contract: Contract, target: Target, name: str) -> None:
        super().__init__(contract, target, name)
        self.calls = 0
        self.first: tuple[int, float] | None = None
        self.start: float | None = None

    def check(self, prop_name: str, case: Case, timeout_s: float | None = None, *, scores: bool = False) -> Any:
        if self.start is None:
            self.start = time.perf_counter()
        outcome = super().check(prop_name, case, timeout_s, scores=scores)
        if not prop_name.startswith("__") and outcome.status != "rejected":
            self.calls += 1
            if self.first is None and outcome.status in ("failed", "raises", "crash", "timeout"):
                self.first = (self.calls, time.perf_counter() - self.start)
        return outcome


def search(contract: Contract, target: Target, prop: Property, *, target_name: str, run_settings: settings,
           seed: int | None = None) -> Search:
    """``runner.hunt`` (in this process) with the first failure's example index and time recorded."""
    counting = _Counting(contract, target, target_name)
    with pinned_source_constants(contract):
        r = runner.hunt(contract, counting, prop, runner.HuntOptions(run_settings, seed=seed), target_name=target_name)
    found = r.failure is not None
    first = counting.first if found else None
    return Search(
        property=prop.name, found=found,
        examples_to_find=first[0] if first else None,
        seconds_to_find=first[1] if first else None,
        examples=r.examples, seconds=r.seconds, failure=r.failure,
    )


def run_variant(contract: Contract, variant: Variant, *, run_settings: settings | None = None,
                check_all: bool = True) -> Row:
    """Hunt ``variant`` with its primary property, compare the shrunk case with
    its canonical form, and (``check_all``) confirm every ``caught_by`` property."""
    rs = run_settings if run_settings is not None else catalogue_settings()
    name = f"variant:{variant.name}"
    primary = search(contract, variant.fn, contract.property(variant.caught_by[0]), target_name=name, run_settings=rs)
    entry = Row(contract=contract.name, section=contract.section, variant=variant.name, origin=variant.origin,
                  description=variant.description, caught_by=variant.caught_by, canonical=variant.canonical, primary=primary)
    if primary.failure is None:
        entry.missing = [variant.caught_by[0]] if check_all else []
        return entry
    prop = contract.property(variant.caught_by[0])
    entry.best = primary
    entry.verdict, entry.verdict_detail = compare(contract, primary.failure.case, variant.canonical)
    if entry.verdict == "larger":
        seeded = settings(rs, derandomize=False, database=None)
        for k in range(1, EXTRA_SHRINK_STREAMS + 1):
            s = search(contract, variant.fn, prop, target_name=name, run_settings=seeded, seed=k)
            if s.failure is None:
                continue
            verdict, detail = compare(contract, s.failure.case, variant.canonical)
            if verdict in ("equal", "smaller"):
                entry.ci_case, entry.best, entry.stream = primary.failure.case, s, k + 1
                entry.verdict, entry.verdict_detail = verdict, detail
                break
    case = entry.best.failure.case if entry.best.failure is not None else primary.failure.case
    entry.violated = runner.violated_properties(contract, variant.fn, case)
    if check_all:
        for pname in variant.caught_by[1:]:
            if pname in entry.violated:
                continue
            s = search(contract, variant.fn, contract.property(pname), target_name=name, run_settings=rs)
            entry.separate.append(s)
            if not s.found:
                entry.missing.append(pname)
    return entry


def variants(contract_names: Iterable[str] | None = None) -> list[tuple[Contract, Variant]]:
    """Every registered (contract, variant), in section order; ``contract_names``
    (contract names or section letters, ``registry.select``) selects
    contracts; an unknown one raises ``registry.UnknownName``."""
    return [(c, v) for c in registry.select(contract_names) for v in c.variants]


def _run_named(contract_name: str, variant_name: str, max_examples: int, check_all: bool) -> Row:
    """Worker entry point for ``jobs > 1`` (names and ints pickle; records do not)."""
    c = registry.get(contract_name)
    return run_variant(c, c.variant(variant_name), run_settings=catalogue_settings(max_examples), check_all=check_all)


def run_items(items: Sequence[tuple[Contract, Variant]], *, max_examples: int = MAX_EXAMPLES, check_all: bool = True,
              jobs: int = 1, on_entry: Callable[[int, int, Row], None] | None = None,
              on_start: Callable[[Contract, Variant], None] | None = None) -> list[Row]:
    """Each (contract, variant) through :func:`run_variant`, rows in the given order.

    ``jobs > 1`` runs variants in that many worker processes, forked from
    the fork server (``execution.process_context``: the registry is already
    imported there); ``on_entry`` is called as each finishes. Per-variant seconds are then measured under the load of the
    other workers. ``on_start`` is called as each starts (in this process: with ``jobs`` 1 only).
    """
    if jobs <= 1:
        rs = catalogue_settings(max_examples)
        out = []
        for k, (c, v) in enumerate(items):
            if on_start is not None:
                on_start(c, v)
            e = run_variant(c, v, run_settings=rs, check_all=check_all)
            out.append(e)
            if on_entry is not None:
                on_entry(k + 1, len(items), e)
        return out
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from batchfuzz.execution import process_context, without_main_module

    results: dict[int, Row] = {}
    with without_main_module(), ProcessPoolExecutor(max_workers=jobs, mp_context=process_context()) as pool:
        futures = {pool.submit(_run_named, c.name, v.name, max_examples, check_all): k for k, (c, v) in enumerate(items)}
        for done, fut in enumerate(as_completed(futures)):
            e = fut.result()
            results[futures[fut]] = e
            if on_entry is not None:
                on_entry(done + 1, len(items), e)
    return [results[k] for k in range(len(items))]


def kill_matrix(entries: Sequence[Row], contract: Contract) -> dict[str, list[str]]:
    """Property -> the variants that fail it (as primary, on the shrunk case,
    or in a separate search)."""
    out: dict[str, list[str]] = {p.name: [] for p in contract.properties}
    for e in entries:
        if e.contract != contract.name:
            continue
        killed = set(e.violated) | {s.property for s in e.separate if s.found}
        if e.found:
            killed.add(e.caught_by[0])
        for p in killed:
            out.setdefault(p, []).append(e.variant)
    return out


# ---------------------------------------------------------------- tables

BEGIN_MARKER = "<!-- batchfuzz catalogue: begin (generated by `batchfuzz catalogue --markdown`; do not edit by hand) -->"
END_MARKER = "<!-- batchfuzz catalogue: end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _verdict_cell(e: Row) -> str:
    if not e.found:
        return "**NOT FOUND**"
    later = ""
    if e.stream > 1 and e.ci_case is not None:
        later = f" (stream {e.stream}; the ci stream shrank to `{_cell(compact_args(e.ci_case.args))}`)"
    if e.verdict == "equal":
        return "= documented" + later
    if e.verdict == "smaller":
        assert e.canonical is not None
        return f"≤ documented `{_cell(compact_args(e.canonical))}`" + later
    if e.verdict == "undocumented":
        return "**no canonical form**"
    assert e.canonical is not None
    return f"**LARGER** than `{_cell(compact_args(e.canonical))}`"


def _caught_cell(e: Row) -> str:
    primary = e.caught_by[0]
    others = [p for p in e.violated if p != primary]
    found_apart = [s.property for s in e.separate if s.found]
    text = f"`{primary}`"
    if others:
        text += "; shrunk case also fails " + ", ".join(f"`{p}`" for p in others)
    if found_apart:
        text += "; found separately: " + ", ".join(f"`{p}`" for p in found_apart)
    if e.missing:
        text += "; **never failed: " + ", ".join(f"`{p}`" for p in e.missing) + "**"
    return text


def _seconds(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def markdown_table(entries: Sequence[Row], run_settings: settings | None = None) -> str:
    """The catalogue as Markdown: one table per contract, between markers."""
    import hypothesis

    rs = run_settings if run_settings is not None else catalogue_settings()
    ok = sum(e.ok for e in entries)
    lines = [
        BEGIN_MARKER,
        "",
        f"{len(entries)} variants, {ok} caught with a counterexample no larger than the documented one. "
        f"Profile `ci` (derandomized, no database), `max_examples={rs.max_examples}`, Hypothesis {hypothesis.__version__} "
        f"(canonical forms recorded with {RECORDED_WITH}). "
        "*Examples* and *s to find*: examples run, and seconds, up to the first failing one; "
        "*s total*: with shrinking (ci stream). Where the ci stream's shrinking stopped at a larger case, the row says which "
        f"further stream (the same settings, seeded; up to {EXTRA_SHRINK_STREAMS}) reached the documented form. "
        "Arrays are shown without their dtype (the JSON report keeps it); `v×n` is n copies of v.",
        "",
    ]
    by_contract: dict[str, list[Row]] = {}
    for e in entries:
        by_contract.setdefault(e.contract, []).append(e)
    for name, rows in by_contract.items():
        c = registry.get(name)
        lines += [
            f"#### Contract {c.section}: {c.title} (`{c.name}`)",
            "",
            "| variant | origin | what it models | caught by | shrunk counterexample | vs documented | examples | s to find | s total |",
            "|---|---|---|---|---|---|---:|---:|---:|",
        ]
        for e in rows:
            case = f"`{_cell(compact_args(e.case.args))}`" if e.case is not None else "–"
            lines.append(
                f"| `{e.variant}` | {e.origin} | {_cell(e.description)} | {_caught_cell(e)} | {case} | {_verdict_cell(e)} | "
                f"{e.primary.examples_to_find if e.primary.examples_to_find is not None else e.primary.examples} | "
                f"{_seconds(e.primary.seconds_to_find)} | {_seconds(e.primary.seconds)} |"
            )
        kills = kill_matrix(rows, c)
        lines += ["", "Variants each property kills (in this table): " + ", ".join(
            f"`{p}` {len(v)}" if v else f"`{p}` **0**" for p, v in kills.items()) + ".", ""]
    lines.append(END_MARKER)
    return "\n".join(lines) + "\n"


def marker_span(text: str) -> tuple[int, int] | None:
    """``(start, stop)`` of the generated block in ``text`` (markers included),
    or None when the text has no begin marker followed by an end marker."""
    begin = text.find(BEGIN_MARKER)
    if begin < 0:
        return None
    end = text.find(END_MARKER, begin + len(BEGIN_MARKER))
    return None if end < 0 else (begin, end + len(END_MARKER))


def splice_markdown(existing: str | None, table: str) -> str:
    """Put ``table`` (which carries its own markers) into ``existing``: between
    the markers when the text has them, as the whole text when there is none.
    Raises ValueError for a text without markers (it would be overwritten)."""
    if existing is None or not existing.strip():
        return table
    span = marker_span(existing)
    if span is None:
        raise ValueError(
            "the file exists and has no catalogue markers; put these two lines where the table goes:\n"
            f"{BEGIN_MARKER}\n{END_MARKER}")
    return existing[: span[0]] + table.rstrip("\n") + existing[span[1]:]


def text_table(entries: Sequence[Row]) -> str:
    """The catalogue for a terminal."""
    rows = [("contract", "variant", "origin", "caught by", "verdict", "examples", "s find", "s total", "shrunk counterexample")]
    for e in entries:
        rows.append((
            e.contract, e.variant, e.origin, e.caught_by[0],
            ("ok " if e.ok else "BAD ") + (e.verdict if e.found else "not found") + (f"@{e.stream}" if e.stream > 1 else ""),
            str(e.primary.examples_to_find if e.primary.examples_to_find is not None else e.primary.examples),
            _seconds(e.primary.seconds_to_find), _seconds(e.primary.seconds),
            compact_args(e.case.args) if e.case is not None else "-",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join(col.ljust(w) for col, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows
    )
