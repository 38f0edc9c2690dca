"""Merging the reports of a sharded fuzz run (:func:`merge`) and the shards'
failure corpora (:func:`merge_corpora`): ``batchfuzz merge-reports``.

The shards' reports are untrusted files, checked with every problem named at
once (:class:`MergeError`); the merged report has the format of a single
run's, its statuses by the single run's rules
(:func:`batchfuzz.fuzz.report.implementation_status`, ``run_status``), so
the same renderers write it. The corpora merge keeps one entry per failure
origin, its smallest case that still fails (checked by replaying it).
What is checked, what is recomputed and the exit codes: docs/nightly.md
("batchfuzz merge-reports").
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from batchfuzz.fuzz import corpus, page, report, untrusted
from batchfuzz.fuzz.origin import Origin
from batchfuzz.fuzz.records import (
    ContractRecord,
    FailureRecord,
    ImplementationRecord,
    OriginRecord,
    Record,
    RecordError,
    RunReport,
    Totals,
)
from batchfuzz.fuzz.shards import MAX_SHARDS
from batchfuzz.output import copy_atomic, junit_text, markdown_table, write_json_atomic, write_text_atomic
from batchfuzz.redaction import printable
from batchfuzz.usage import ExitCode, UsageError

# found = {seed, profile, worker}: differ between processes finding the same failure; origin: the merge keeps
# the one the case gives on replay, which the same file of another machine may record otherwise
VOLATILE_FIELDS = ("date", "found", "origin")
REPORT_FILES = ("summary.json", "summary.md", "junit.xml")
SHARDS_SUITE = "batchfuzz.shards"  # the JUnit suite name readers already filter on

R = TypeVar("R", bound=Record)


class MergeError(ValueError):
    """Reports that cannot be merged; the message names every file and problem."""


@dataclass
class ShardReport:
    """One shard's report directory, loaded and checked: its summary read
    through the typed records (:class:`batchfuzz.fuzz.records.RunReport`)."""

    path: Path
    record: RunReport
    junit: ET.Element
    index: int = 1
    count: int = 1
    sharded: bool = False  # False: the summary has no "shard" field (a single unsharded run)

    @property
    def name(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def items(self) -> list[tuple[str, str, str]]:
        """(contract, implementation, property) of every work item in this shard."""
        return [(c, i, p) for c, data in self.record.contracts.items()
                for i, impl in data.implementations.items() for p in impl.properties]


@dataclass
class Merged:
    """The merged report: what to write and the exit code."""

    summary: dict[str, Any]
    markdown: str
    junit: str
    missing: list[int] = field(default_factory=list)
    exit_code: ExitCode = ExitCode.OK


# --------------------------------------------------------------------------- loading


def _read_json(path: Path) -> Any:
    if not os.path.lexists(path):
        raise MergeError(f"{path}: missing (is {path.parent} the report directory of a batchfuzz fuzz run?)")
    try:
        return untrusted.load_report(path)
    except untrusted.UntrustedFileError as exc:
        raise MergeError(str(exc)) from None


def _read_junit(path: Path) -> ET.Element:
    if not os.path.lexists(path):
        raise MergeError(f"{path}: missing (is {path.parent} the report directory of a batchfuzz fuzz run?)")
    try:
        raw = untrusted.read_bounded(path, untrusted.MAX_REPORT_BYTES, "report file")
    except untrusted.UntrustedFileError as exc:
        raise MergeError(str(exc)) from None
    if b"<!DOCTYPE" in raw or b"<!ENTITY" in raw:  # batchfuzz writes neither: entities could expand without bound
        raise MergeError(f"{path}: not a batchfuzz JUnit report (it declares a DOCTYPE or entities)")
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        line, col = exc.position
        raise MergeError(f"{path}: not well-formed XML (line {line}, column {col}); truncated?") from None
    if root.tag != "testsuites" or any(child.tag != "testsuite" for child in root):
        raise MergeError(f"{path}: not a batchfuzz JUnit report (expected <testsuites> holding <testsuite> elements)")
    return root


def _testcases(root: ET.Element) -> list[tuple[str, str, str]]:
    """(suite, classname, name) of every testcase, sorted."""
    return sorted((s.get("name", ""), c.get("classname", ""), c.get("name", "")) for s in root for c in s.iter("testcase"))


def load_shard(directory: str | os.PathLike[str]) -> ShardReport:
    """Load and check one shard's report directory; raises MergeError naming the file."""
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a path, got {type(directory).__name__} {directory!r}")
    d = Path(directory)
    if not d.is_dir():
        raise MergeError(f"{d}: no such report directory")
    path = d / "summary.json"
    summary = _read_json(path)
    try:
        record = RunReport.from_json(summary, str(path))
    except RecordError as exc:
        raise MergeError(str(exc)) from None
    bad_timeline = _timeline_problem(record)
    if bad_timeline:
        raise MergeError(f"{path}: {bad_timeline}")
    junit = _read_junit(d / "junit.xml")
    if _testcases(junit) != _testcases(ET.fromstring(report.render_junit(summary))):
        raise MergeError(f"{d / 'junit.xml'}: its test cases are not those of {path} (files of different runs?)")
    shard_report = ShardReport(path=d, record=record, junit=junit)
    shard = record.shard
    if shard is not None:
        ok = all(isinstance(shard.get(k), int) and not isinstance(shard.get(k), bool) for k in ("index", "count"))
        if not ok or not 1 <= shard["index"] <= shard["count"] <= MAX_SHARDS:
            raise MergeError(f"{path}: field 'shard' must be {{\"index\": K, \"count\": N}} with 1 <= K <= N <= {MAX_SHARDS}, "
                             f"got {shard!r}")
        if "plan" in shard and not isinstance(shard["plan"], str):
            raise MergeError(f"{path}: field 'shard.plan' must be a string, got {shard['plan']!r}")
        shard_report.index, shard_report.count, shard_report.sharded = shard["index"], shard["count"], True
    return shard_report


def _timeline_problem(record: RunReport) -> str | None:
    """Why a property's ``timeline`` (what the page plots) is not a list of
    [seconds, examples, seconds] samples, or None."""
    for cname, c in record.contracts.items():
        for iname, impl in c.implementations.items():
            for pname, p in impl.properties.items():
                timeline = p.extra.get("timeline", [])
                if not isinstance(timeline, list) or not all(
                        isinstance(s, list) and len(s) == 3
                        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in s) for s in timeline):
                    return f"{cname}/{iname}/{pname}: field 'timeline' must be a list of [seconds, examples, seconds] samples"
    return None


# --------------------------------------------------------------------------- checking the set


def check_same_run(reports: Sequence[ShardReport]) -> list[int]:
    """Raise MergeError naming every shard given twice and every sign of different runs;
    return the missing shard numbers."""
    if not reports:
        raise MergeError("no shard reports given")
    problems: list[str] = []
    by_index: dict[int, ShardReport] = {}
    for r in reports:
        if r.index in by_index:
            problems.append(f"shard {r.name} given twice: {by_index[r.index].path} and {r.path}")
        else:
            by_index[r.index] = r
    first = reports[0]
    for r in reports[1:]:
        if r.count != first.count:
            problems.append(f"shards of different runs: {first.path} is shard {first.name}, {r.path} is shard {r.name}")
        if r.record.seed != first.record.seed:
            problems.append(f"shards of different runs: seed {first.record.seed!r} in {first.path}, "
                            f"{r.record.seed!r} in {r.path}")
        plans = (first.record.shard or {}).get("plan"), (r.record.shard or {}).get("plan")
        if None not in plans and plans[0] != plans[1]:
            problems.append(f"shards of different runs: item list {plans[0]} in {first.path}, {plans[1]} in {r.path}")
    owner: dict[tuple[str, str, str], ShardReport] = {}
    for r in reports:
        for item in r.items:
            other = owner.setdefault(item, r)
            if other is not r and other.index != r.index:
                problems.append(f"the same work item in two shards: {'/'.join(item)} is in shard {other.name} ({other.path}) "
                                f"and in shard {r.name} ({r.path}): shards of different runs or partitions")
    if problems:
        raise MergeError("cannot merge these reports:\n  " + "\n  ".join(problems))
    return [k for k in range(1, first.count + 1) if k not in by_index]


# --------------------------------------------------------------------------- merging


def _parse_time(text: Any) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(text)).timestamp()
    except (TypeError, ValueError):
        return None


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).replace(microsecond=0).isoformat()


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _add_counts(into: dict[str, int], counts: dict[str, Any]) -> None:
    for k, v in counts.items():
        into[k] = into.get(k, 0) + _count(v)


def _label_counts(coverage: dict[str, Any]) -> dict[str, int]:
    """The raw per-label example counts a report's ``coverage`` carries (its fractions are recomputed)."""
    return {label: _count(v.get("examples")) if isinstance(v, dict) else 0 for label, v in coverage.items()}


def _merge_implementation(into: ImplementationRecord | None, impl: ImplementationRecord, shard: int,
                          labels: dict[str, int]) -> ImplementationRecord:
    """Add one shard's entry of an implementation to what the earlier shards gave
    (``into``), and its raw per-label counts to ``labels``."""
    if into is None:
        into = copy.deepcopy(impl)
        into.examples, into.seconds, into.failures, into.properties, into.scores, into.settings = 0, 0.0, [], {}, {}, {}
        into.extra["shards"] = []
    into.examples += impl.examples
    into.seconds += float(impl.seconds)
    into.failures += copy.deepcopy(impl.failures)
    for p, v in impl.properties.items():
        tagged = copy.deepcopy(v)
        tagged.extra["shard"] = shard
        into.properties[p] = tagged
    _add_counts(into.scores, impl.scores)
    _add_counts(labels, _label_counts(impl.coverage))
    into.settings = copy.deepcopy(impl.settings) or into.settings  # as in a run: the last item's that ran
    into.extra["shards"].append(shard)
    return into


def _merge_contracts(reports: Sequence[ShardReport]) -> dict[str, ContractRecord]:
    contracts: dict[str, ContractRecord] = {}
    labels: dict[tuple[str, str | None], dict[str, int]] = {}  # (contract, implementation or None) -> label counts
    for r in reports:
        for cname, c in r.record.contracts.items():
            m = contracts.setdefault(cname, ContractRecord(examples=0, seconds=0.0, failures=0, errors=0, items=0,
                                                           items_run=0, coverage={}, implementations={}))
            m.examples += c.examples
            m.seconds += c.seconds
            m.failures += c.failures
            m.errors += c.errors
            m.items += c.items
            m.items_run += c.items_run
            _add_counts(labels.setdefault((cname, None), {}), _label_counts(c.coverage))
            for iname, impl in c.implementations.items():
                m.implementations[iname] = _merge_implementation(m.implementations.get(iname), impl, r.index,
                                                                 labels.setdefault((cname, iname), {}))
    for cname, m in contracts.items():
        for iname, impl in m.implementations.items():
            impl.status = report.implementation_status((p.status for p in impl.properties.values()),
                                                       failed=bool(impl.failures))
            impl.seconds = round(impl.seconds, 3)
            impl.cases_per_second = report._rate(impl.examples, impl.seconds)
            impl.coverage = report._coverage(labels[(cname, iname)], impl.examples)
        m.seconds = round(float(m.seconds), 3)
        m.cases_per_second = report._rate(m.examples, m.seconds)
        m.coverage = report._coverage(labels[(cname, None)], m.examples)
    return contracts


def _tagged(record: R, shard: int) -> R:
    out = copy.deepcopy(record)
    out.extra["shard"] = shard
    return out


def merge(reports: Sequence[ShardReport]) -> Merged:
    """One report from the shards' reports (checked with :func:`check_same_run`),
    built as a :class:`~batchfuzz.fuzz.records.RunReport`."""
    missing = check_same_run(reports)
    shards = sorted(reports, key=lambda r: r.index)
    first = shards[0].record
    contracts = _merge_contracts(shards)
    failures = [_tagged(f, r.index) for r in shards for f in r.record.failures]
    errors = [_tagged(e, r.index) for r in shards for e in r.record.errors]
    not_run = [name for r in shards for name in r.record.not_run]
    started, finished, wall = _span(shards)
    examples = sum(c.examples for c in contracts.values())
    partial = [r for r in shards if r.record.partial]
    status = report.run_status(partial=bool(partial), failed=bool(failures or errors), incomplete=bool(missing or not_run),
                               examples=examples)
    # One entry per origin across the shards; every failure points at its origin's corpus entry.
    failure_dicts = [f.to_json() for f in failures]
    impl_failures = [f for c in contracts.values() for i in c.implementations.values() for f in i.failures]
    found = report.origins(failure_dicts)
    report.point_at_origins([*failure_dicts, *impl_failures], found)
    totals = Totals(
        examples=examples, failures=len(failures), origins=len(found),
        new_corpus_entries=sum(1 for f in failures if f.new), errors=len(errors),
        items=sum(r.record.totals.items for r in shards), items_run=sum(r.record.totals.items_run for r in shards),
        items_not_run=sum(r.record.totals.items_not_run for r in shards), throughput=report._rate(examples, wall),
    )
    merged = RunReport(
        partial=bool(partial), status=status, wall_seconds=round(wall, 3), budget_seconds=first.budget_seconds,
        profile=first.profile, workers=sum(r.record.workers for r in shards), versions=first.versions, totals=totals,
        contracts=contracts, failures=[FailureRecord.from_json(f, "merged failures") for f in failure_dicts],
        errors=errors, notes=_notes(shards, missing), not_run=not_run, tool=first.tool,
        interrupted_by="; ".join(f"shard {r.name}: {r.record.interrupted_by}" for r in partial) or None,
        started=_iso(started) if started is not None else None, finished=_iso(finished) if finished is not None else None,
        startup_seconds=max(float(r.record.startup_seconds or 0.0) for r in shards),
        database_lost=[m for r in shards for m in r.record.database_lost], seed=first.seed, isolated=first.isolated,
        device=next((r.record.device for r in shards if r.record.device), None),  # an empty shard has none
        database=None if first.database is None else printable(first.database), corpus=first.corpus,
        shard=None, replay_command=None, host=None,  # the merged run is the whole run
        origins=[OriginRecord.from_json(o, "merged origins") for o in found],
        extra={**first.extra, "merged": True, "shards": _shards_record(shards, missing)},
    )
    summary = merged.to_json()
    return Merged(summary=summary, markdown=render_markdown(summary), junit=render_junit(summary),
                  missing=missing, exit_code=_exit_code(bool(failures or errors), status))


def _span(shards: Sequence[ShardReport]) -> tuple[float | None, float | None, float]:
    """The merged run's first start, last finish and wall seconds between them
    (the longest shard's wall time where a shard's times cannot be read)."""
    starts = [_parse_time(r.record.started) for r in shards]
    ends = [_parse_time(r.record.finished) for r in shards]
    if None in starts or None in ends:
        return None, None, max(float(r.record.wall_seconds) for r in shards)
    started, finished = min(s for s in starts if s is not None), max(e for e in ends if e is not None)
    return started, finished, max(0.0, finished - started)


def _notes(shards: Sequence[ShardReport], missing: list[int]) -> list[str]:
    """The merged run's notes: which shards it holds (and lacks), the interrupted
    ones, other versions, and every shard's own notes, prefixed with its name."""
    count = shards[0].count
    notes = []
    if count > 1 or len(shards) > 1:
        notes.append(f"merged from shard(s) {', '.join(r.name for r in shards)}"
                     + (f"; MISSING: {', '.join(f'{k}/{count}' for k in missing)} (incomplete)" if missing else ""))
    notes += [f"shard {r.name} was interrupted: {r.record.interrupted_by}" for r in shards if r.record.partial]
    notes += [f"shard {r.name} ran other versions: {r.record.versions}" for r in shards[1:]
              if r.record.versions != shards[0].record.versions]
    notes += [f"shard {r.name}: {n}" for r in shards for n in r.record.notes]
    return notes


def _shards_record(shards: Sequence[ShardReport], missing: list[int]) -> dict[str, Any]:
    """The merged summary's ``shards``: the count, whether complete, the missing and each given shard's facts."""
    return {
        "count": shards[0].count,
        "complete": not missing,
        "missing": missing,
        "given": [{
            "index": r.index, "dir": str(r.path), "sharded": r.sharded, "status": r.record.status,
            "partial": r.record.partial, "wall_seconds": r.record.wall_seconds,
            "examples": r.record.totals.examples, "failures": len(r.record.failures),
            "errors": len(r.record.errors), "items": r.record.totals.items,
            "workers": r.record.workers, "host": r.record.host,
            "replay_command": r.record.replay_command,
        } for r in shards],
    }


def _exit_code(failed: bool, status: str) -> ExitCode:
    """The merged run's exit code: 1 a failure or harness error, 3 incomplete or interrupted, else 0."""
    if failed:
        return ExitCode.COUNTEREXAMPLE
    if status in ("incomplete", "interrupted"):
        return ExitCode.INCOMPLETE
    return ExitCode.OK


def render_junit(summary: dict[str, Any]) -> str:
    """The single-run JUnit report of the merged summary (a testsuite per contract, a
    testcase per implementation and property), plus a ``batchfuzz.shards`` suite
    with an error per missing shard."""
    root = ET.fromstring(report.render_junit(summary))
    s = summary["shards"]
    if s["missing"]:
        suite = ET.SubElement(root, "testsuite", name=SHARDS_SUITE, tests=str(len(s["missing"])), failures="0",
                              errors=str(len(s["missing"])), skipped="0")
        for k in s["missing"]:
            case = ET.SubElement(suite, "testcase", classname=SHARDS_SUITE, name=f"shard {k}/{s['count']}", time="0.000")
            ET.SubElement(case, "error", message=f"shard {k}/{s['count']} missing: no report was given to merge-reports")
    return junit_text(root)


def render_markdown(summary: dict[str, Any]) -> str:
    """The single-run renderer on the merged summary, plus a table of the shards."""
    s = summary["shards"]
    rows = [[f"{g['index']}/{s['count']}", g["status"], g["items"], g["examples"], g["failures"], g["errors"],
             f"{float(g['wall_seconds']):.0f}", f"`{g['dir']}`"] for g in s["given"]]
    rows += [[f"{k}/{s['count']}", "**missing**", "", "", "", "", "", ""] for k in s["missing"]]
    table = markdown_table(["shard", "status", "items", "examples", "failures", "errors", "wall s", "report"], rows, "llrrrrrl")
    lines = [report.render_markdown(summary).rstrip("\n"), "", f"### Shards ({len(s['given'])} of {s['count']} merged)", "",
             *table]
    return "\n".join(lines) + "\n"


def merge_dirs(directories: Sequence[str | os.PathLike[str]]) -> Merged:
    """Load every directory (all problems named at once), then :func:`merge`."""
    reports, problems = [], []
    for d in directories:
        try:
            reports.append(load_shard(d))
        except MergeError as exc:
            problems.append(str(exc))
    if problems:
        raise MergeError("cannot merge these reports:\n  " + "\n  ".join(problems))
    return merge(reports)


def write(out_dir: str | os.PathLike[str], merged: Merged, history: Sequence[dict[str, Any]] = ()) -> list[Path]:
    """Write summary.json, summary.md, junit.xml and the page index.html (with
    the earlier nights ``history``: :func:`batchfuzz.fuzz.page.read_history`)
    into ``out_dir`` (atomically); return their paths."""
    d = Path(out_dir)
    if d.exists() and not d.is_dir():
        raise MergeError(f"{d}: the output report directory exists and is not a directory")
    d.mkdir(parents=True, exist_ok=True)
    paths = [d / name for name in REPORT_FILES]
    write_json_atomic(paths[0], merged.summary)
    write_text_atomic(paths[1], merged.markdown)
    write_text_atomic(paths[2], merged.junit)
    return [*paths, page.write_page(d, merged.summary, history)]


# --------------------------------------------------------------------------- corpora


@dataclass
class CorpusMerge:
    """What :func:`merge_corpora` did, file by file (paths relative to the destination)."""

    copied: list[str] = field(default_factory=list)  # new in the destination
    same: list[str] = field(default_factory=list)  # already there, equal but for VOLATILE_FIELDS
    conflicts: list[str] = field(default_factory=list)  # not copied: a readable account each
    same_origin: list[str] = field(default_factory=list)  # not copied: its origin has an entry no larger, or it passes
    replaced: list[str] = field(default_factory=list)  # copied over (or beside) an entry of its origin: an account each


def stable_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A corpus document without its :data:`VOLATILE_FIELDS`."""
    return {k: v for k, v in data.items() if k not in VOLATILE_FIELDS}


def _origins_in(root: Path) -> dict[str, tuple[Path, corpus.CorpusEntry]]:
    """The entries of a corpus by origin id (the smallest of each; unloadable files left out)."""
    out: dict[str, tuple[Path, corpus.CorpusEntry]] = {}
    for path in corpus.files(root) if root.is_dir() else []:
        try:
            entry = corpus.load(path)
            oid = entry.origin.id
        except corpus.CorpusError:
            continue
        if oid not in out or _smaller(entry, out[oid][1]):
            out[oid] = (path, entry)
    return out


def _known(by_origin: dict[str, tuple[Path, corpus.CorpusEntry]], oid: str,
           entry: corpus.CorpusEntry) -> tuple[Path, corpus.CorpusEntry] | None:
    """The destination's entry of origin ``oid`` (``entry``'s): the same origin id, or,
    for a wrong answer, the smallest of the same bug (``corpus.one_wrong_answer``)."""
    same = by_origin.get(oid)
    if same is not None:
        return same
    related = [v for v in by_origin.values() if corpus.one_wrong_answer(v[1], entry)]
    return min(related, key=lambda v: corpus.case_order(v[1].contract, v[1].case), default=None)


def _smaller(a: corpus.CorpusEntry, b: corpus.CorpusEntry) -> bool:
    return corpus.case_order(a.contract, a.case) < corpus.case_order(b.contract, b.case)


UNCHECKED = "unchecked"  # an entry the merge cannot replay (a user's function, an engine release, cuda without a GPU)


class _Replays:
    """The origin each corpus entry's own case gives now (``corpus.replayed_origin``),
    each entry replayed once, in one worker per target; closed with the merge."""

    def __init__(self, targets: dict[str, str], engines: Sequence[str], timeout_s: float) -> None:
        self.targets, self.engines, self.timeout_s = targets, list(engines), timeout_s
        self.executors: dict[tuple[str, str, str], Any] = {}
        self.seen: dict[Path, Origin | str | None] = {}

    def origin(self, path: Path, entry: corpus.CorpusEntry) -> Origin | str | None:
        """The entry's origin now, None when its case passes, or UNCHECKED."""
        if path not in self.seen:
            self.seen[path] = self._replay(entry)
        return self.seen[path]

    def _replay(self, entry: corpus.CorpusEntry) -> Origin | str | None:
        from batchfuzz import registry
        from batchfuzz.execution import executor_for
        from batchfuzz.targets import TargetError

        ref, _ = corpus.replay_target(entry, targets=self.targets, engines=self.engines)
        if ref is None or (entry.device == "cuda" and not _cuda()):
            return UNCHECKED
        key = (entry.contract, ref.spec, entry.device)
        try:
            corpus.check_entry(entry)  # the destination's entries too: only a case that fits its contract runs
            if key not in self.executors:
                self.executors[key] = executor_for(registry.get(entry.contract), ref, device=entry.device)
            ex = self.executors[key]
            if ex.describe().get("error"):
                return UNCHECKED
            return corpus.replayed_origin(entry, ex, self.timeout_s)
        except (TargetError, corpus.CorpusError):
            return UNCHECKED

    def close(self) -> None:
        for ex in self.executors.values():
            ex.close()


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def merge_corpora(sources: Sequence[str | os.PathLike[str]], dest: str | os.PathLike[str], *,
                  targets: dict[str, str] | None = None, engines: Sequence[str] = (),
                  timeout_s: float = 30.0) -> CorpusMerge:
    """Copy the corpus files of ``sources`` into ``dest``, one entry per origin
    (``batchfuzz.fuzz.origin``): the smallest case (``corpus.case_order``)
    that still fails.

    A file already in ``dest`` under its name is kept: if the two differ beyond
    :data:`VOLATILE_FIELDS`, or a file's name is not the id of its content, or a
    file does not load or does not fit its contract, that is reported as a
    conflict and nothing is copied. A source file is untrusted, so its origin is
    the one its own case gives on replay (``corpus.replayed_origin``; replayed as
    ``batchfuzz replay`` would, with ``targets`` and ``engines``), not the one
    it records. Where its origin has an entry in ``dest``, a smaller case
    replaces that entry only when it fails on replay, and a failing case
    replaces an entry that passes whatever their sizes; a smaller case that
    cannot be replayed (a user's function not in ``targets``) is copied
    beside the entry, never over it."""
    out = CorpusMerge()
    root = Path(dest)
    by_origin = _origins_in(root)
    replays = _Replays(dict(targets or {}), engines, timeout_s)
    try:
        for src in sources:
            src_root = Path(src)
            if not src_root.is_dir():
                out.conflicts.append(f"{src_root}: no such corpus directory")
                continue
            for path in corpus.files(src_root):
                rel = path.relative_to(src_root).as_posix()
                entry = _checked(out, rel, path)
                if entry is None:
                    continue
                target = root / rel
                if target.exists():
                    _compare_same_name(out, rel, target, path, entry)
                    continue
                _place(out, rel, path, entry, _Place(root, by_origin, replays))
    finally:
        replays.close()
    return out


def _checked(out: CorpusMerge, rel: str, path: Path) -> corpus.CorpusEntry | None:
    """The entry of a source file, or None with the conflict reported."""
    try:
        entry = corpus.load(path)
        if entry.id != path.stem or entry.data.get("id") != path.stem:
            out.conflicts.append(f"{rel}: not copied: {path} holds entry {entry.id}, not its name {path.stem}")
            return None
        corpus.check_entry(entry)  # fits its contract: before it may be replayed
        _ = entry.origin  # a recorded origin that is not one raises: a conflict
    except corpus.CorpusError as exc:
        out.conflicts.append(f"{rel}: not copied: {exc}")
        return None
    return entry


@dataclass
class _Place:
    """Where :func:`_place` puts an entry: the destination, its entries by origin, the replays."""

    root: Path
    by_origin: dict[str, tuple[Path, corpus.CorpusEntry]]
    replays: _Replays


def _place(out: CorpusMerge, rel: str, path: Path, entry: corpus.CorpusEntry, at: _Place) -> None:
    """Copy one source entry (not in the destination under its name) by the
    rules of :func:`merge_corpora`, saying what was done."""
    now = at.replays.origin(path, entry)
    oid = now.id if isinstance(now, Origin) else entry.origin.id
    where = f"its origin ({now.describe() if isinstance(now, Origin) else entry.origin.describe()})"
    known = _known(at.by_origin, oid, entry)
    target = at.root / rel
    if known is not None:
        known_now = at.replays.origin(known[0], known[1])
        if now is None:
            out.same_origin.append(f"{rel}: not copied: it passes on replay; {where} has the entry "
                                   f"{known[0].relative_to(at.root).as_posix()}")
            return
        if not (isinstance(now, Origin) and known_now is None) and not _smaller(entry, known[1]):
            out.same_origin.append(f"{rel}: not copied: {where} has the entry "
                                   f"{known[0].relative_to(at.root).as_posix()}, no larger")
            return
    if isinstance(now, Origin) and now.id != entry.origin.id:  # the file recorded another origin: the replay's is kept
        write_json_atomic(target, {**entry.data, "origin": now.to_json()})
    else:
        copy_atomic(path, target)
    out.copied.append(rel)
    if known is not None and now == UNCHECKED:
        out.replaced.append(f"{rel}: copied beside {known[0].relative_to(at.root).as_posix()}, a larger case of {where}: "
                            "it cannot be replayed here to check that it still fails")
        return
    if known is not None:
        known[0].unlink(missing_ok=True)
        at.by_origin.pop(known[1].origin.id, None)
        why = "which passes on replay" if known_now is None else "a larger case"
        out.replaced.append(f"{rel}: replaces {known[0].relative_to(at.root).as_posix()}, {why} of {where}")
    at.by_origin[oid] = (target, corpus.load(target))


def _compare_same_name(out: CorpusMerge, rel: str, target: Path, path: Path, entry: corpus.CorpusEntry) -> None:
    try:
        existing = json.loads(target.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        out.conflicts.append(f"{rel}: kept {target} (unreadable: {exc}); {path} not copied")
        return
    if not isinstance(existing, dict):
        out.conflicts.append(f"{rel}: kept {target} (not a JSON object); {path} not copied")
        return
    a, b = stable_fields(existing), stable_fields(entry.data)
    if a == b:
        out.same.append(rel)
    else:
        differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        out.conflicts.append(f"{rel}: kept {target}; {path} differs in {', '.join(differ)}")


def merge_run(dirs: Sequence[str], report_dir: str, corpus_dest: str | None = None, corpus_from: Sequence[str] = (),
              out: Any = None, history: Sequence[str] = ()) -> ExitCode:
    """``batchfuzz merge-reports``: merge the shards' reports in ``dirs`` into
    ``report_dir`` (and their corpora into ``corpus_dest``; the page plots the
    earlier nights' report directories ``history`` beside it), print what was
    merged, and return the whole run's exit code. Raises UsageError for bad input."""
    import sys

    def say(text: str) -> None:
        print(text, file=out or sys.stdout)

    if bool(corpus_dest) != bool(corpus_from):
        raise UsageError("--corpus DEST and --corpus-from SRC ... go together")
    dest = Path(report_dir)
    for d in dirs:
        if Path(d).exists() and dest.exists() and Path(d).resolve() == dest.resolve():
            raise UsageError(f"--report {dest} is one of the shard directories: the merged report would overwrite it")
    nights = page.read_history(history)
    try:
        merged = merge_dirs(dirs)
        paths = write(dest, merged, nights)
    except MergeError as exc:
        raise UsageError(str(exc)) from None
    s = merged.summary
    for g in s["shards"]["given"]:
        say(f"shard {g['index']}/{s['shards']['count']}: {g['status']}, {g['examples']} examples, {g['failures']} failures, "
            f"{g['errors']} errors ({g['dir']})")
    for k in merged.missing:
        say(f"shard {k}/{s['shards']['count']}: MISSING")
    t = s["totals"]
    say(f"merged: {s['status']}, {t['examples']} examples, {t['failures']} failures ({t['new_corpus_entries']} new), "
        f"{t['errors']} errors, {t['items']} items")
    for o in s["origins"]:  # one line per origin, listing every property it breaks
        say(f"FAILED {o.get('contract')} {o.get('implementation')} {', '.join(o['properties'])} (shard "
            f"{', '.join(str(k) for k in o.get('shards', []))}): {o.get('description')}; corpus {o.get('corpus_file')}")
        if report.unshrunk_note(o):
            say(f"  {report.unshrunk_note(o)}")
    say(f"reports: {', '.join(str(p) for p in paths)}")
    if corpus_dest:
        c = merge_corpora(corpus_from, corpus_dest)
        say(f"corpus {corpus_dest}: {len(c.copied)} copied, {len(c.same)} already there, {len(c.conflicts)} conflicts; "
            f"one entry per origin: {len(c.same_origin)} not copied (an entry of their origin, no larger, is there, "
            f"or they pass on replay), {len(c.replaced)} replacing an entry of their origin or copied beside it")
        for line in c.replaced:
            say(f"  replaced: {line}")
        for line in c.conflicts:
            say(f"  conflict: {line}")
    if merged.exit_code == ExitCode.INCOMPLETE:
        say("incomplete: " + "; ".join(
            [f"shard {k}/{s['shards']['count']} missing" for k in merged.missing]
            + [f"shard {g['index']}/{s['shards']['count']} interrupted" for g in s["shards"]["given"] if g["partial"]]
            + ([f"{t['items_not_run']} work item(s) did not run: {', '.join(s['not_run'][:10])}"
                + (" ..." if len(s["not_run"]) > 10 else "")] if s["not_run"] else [])))
    return merged.exit_code
