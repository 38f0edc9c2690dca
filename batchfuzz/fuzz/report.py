"""Reports of a fuzz run: ``summary.json``, ``summary.md`` and ``junit.xml``.

All three are built from the per-item state files the workers write
(:mod:`batchfuzz.fuzz.job`), so an interrupted run gets the same reports,
marked ``"partial": true``.

Rates: an item's ``cases_per_second`` is examples over the seconds that item
ran (one worker, one core); a contract's is its examples over the seconds its
items ran; the run's ``throughput`` is all examples over the run's wall time,
the figure that scales with ``--workers``.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchfuzz.fuzz import page
from batchfuzz.fuzz.corpus import versions
from batchfuzz.fuzz.job import ItemState, Job, WorkItem, new_state
from batchfuzz.fuzz.origin import one_bug
from batchfuzz.fuzz.records import (
    ContractRecord,
    ErrorRecord,
    FailureRecord,
    OriginRecord,
    RunReport,
    Totals,
    unshrunk_note,
)
from batchfuzz.machine import machine_info
from batchfuzz.output import junit_text, write_json_atomic, write_text_atomic

NOT_RUN = "not run"


def _rate(examples: int, seconds: float) -> float:
    return round(examples / seconds, 1) if seconds > 0 else 0.0


def _coverage(events: dict[str, int], examples: int) -> dict[str, Any]:
    """Input classes (the contract's ``labels``, recorded with ``hypothesis.event``)."""
    return {
        label: {"examples": n, "fraction": round(n / examples, 4) if examples else 0.0}
        for label, n in sorted(events.items(), key=lambda kv: (-kv[1], kv[0]))
    }


def _origin_id(failure: dict[str, Any]) -> str:
    origin = failure.get("origin")
    if isinstance(origin, dict) and isinstance(origin.get("id"), str):
        return origin["id"]
    if isinstance(origin, str):  # an implementation's failure names its origin by id
        return origin
    return f"failure {failure.get('id')}"  # a record written before origins were: its own


def _case_order(failure: dict[str, Any]) -> tuple[list[int], int, str]:
    """``batchfuzz.fuzz.corpus.case_order`` of a failure record (its ``size`` and encoded ``case``)."""
    case = failure.get("case")
    text = json.dumps(case, sort_keys=True, separators=(",", ":")) if case is not None else ""
    size = failure.get("size")
    return (list(size) if isinstance(size, list) else []), len(text), text


def broken_property(failure: dict[str, Any]) -> str:
    """The contract's property a failure breaks: its ``during`` for a crash,
    timeout or raises (the property whose calls it happened in), else its own."""
    return str(failure.get("during") or failure.get("property") or "")


def _violates(failure: dict[str, Any]) -> list[str]:
    """Every property a failure's case breaks (``violates``, recorded by the
    job process); a record without it, its own property."""
    v = failure.get("violates")
    return [str(p) for p in v] if isinstance(v, list) else [broken_property(failure)]


def _group_keys(failures: list[dict[str, Any]]) -> list[str]:
    """Each failure's origin as the report groups them: its own, but a wrong
    answer joins the smallest wrong answer of its contract and target that is
    the same bug (``batchfuzz.fuzz.origin.one_bug``)."""
    keys = [_origin_id(f) for f in failures]
    reps: dict[tuple[Any, Any], list[int]] = {}  # (contract, implementation) -> wrong answers standing for their origin
    for k in sorted(range(len(failures)), key=lambda k: _case_order(failures[k])):
        f = failures[k]
        if f.get("kind") != "violation":
            continue
        mine = reps.setdefault((f.get("contract"), f.get("implementation")), [])
        rep = next((r for r in mine if one_bug(_violates(failures[r]), _violates(f), broken_property(f))), None)
        if rep is None:
            mine.append(k)
        else:
            keys[k] = keys[rep]
    return keys


def origins(failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per origin (``batchfuzz.fuzz.origin``) of the run's failures,
    in the order first found: what it is (``description``), every property it
    breaks, how many failures it stands for, and its smallest failure's case,
    reproduction and corpus file. A run's report and merged shards list these
    as their failures, one line each (tests/test_origin.py reads them)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for f, key in zip(failures, _group_keys(failures), strict=True):
        groups.setdefault(key, []).append(f)
    out = []
    for oid, fs in groups.items():
        best = min(fs, key=_case_order)
        recorded = best.get("origin")
        origin: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
        entry = {
            "id": oid, "contract": best.get("contract"), "implementation": best.get("implementation"),
            "description": origin.get("description") or f"{best.get('property')}: {best.get('error_type')}",
            "kind": origin.get("kind") or best.get("kind"), "error_type": best.get("error_type"),
            "location": origin.get("location", ""), "exit": best.get("exit"),
            "properties": sorted({broken_property(f) for f in fs}
                                 | (set(_violates(best)) if best.get("kind") == "violation" else set())),
            "failures": len(fs),
            "property": best.get("property"), "during": best.get("during"), "spec": best.get("spec", ""),
            "message": best.get("message"), "inputs": best.get("inputs"), "reproduction": best.get("reproduction", ""),
            "corpus_file": best.get("corpus_file"), "new": any(bool(f.get("new")) for f in fs),
            "shrink_complete": best.get("shrink_complete", True) is not False,
            "origin_ids": sorted({_origin_id(f) for f in fs}),  # the failures' own origins it stands for
        }
        if "confirm" in best:  # what the engine's kernel did with the case (batchfuzz confirm --json)
            entry["confirm"] = best["confirm"]
        if any("shard" in f for f in fs):
            entry["shards"] = sorted({f["shard"] for f in fs if "shard" in f})
        out.append(entry)
    return out


def point_at_origins(failures: list[dict[str, Any]], found: list[dict[str, Any]]) -> None:
    """Every failure's ``corpus_file`` made its origin's one entry (a failure
    saved first may have been replaced by a smaller case of its origin); the
    file it was saved to, when another, stays as ``saved_as``."""
    kept = {member: o.get("corpus_file") for o in found for member in o.get("origin_ids") or [o["id"]]}
    for f in failures:
        file = kept.get(_origin_id(f))
        if file and f.get("corpus_file") != file:
            f["saved_as"], f["corpus_file"] = f.get("corpus_file"), file


def implementation_status(property_statuses: Iterable[str], *, failed: bool) -> str:
    """An implementation's status from its properties' (work items') statuses and
    whether a failure of it was recorded: the first that applies of error,
    failed, interrupted, not run (every property), incomplete (some property
    not run), passed. One rule for a run's report and for merged shards (whose
    properties of one implementation come from several shards)."""
    statuses = set(property_statuses)
    if "error" in statuses:
        return "error"
    if failed:
        return "failed"
    if "interrupted" in statuses:
        return "interrupted"
    if statuses == {NOT_RUN}:
        return NOT_RUN
    return "incomplete" if NOT_RUN in statuses else "passed"


def run_status(*, partial: bool, failed: bool, incomplete: bool, examples: int) -> str:
    """A whole run's status: interrupted (stopped by a signal), failed (a failure
    or a harness error), incomplete (work items that did not run; for merged
    shards also a missing shard), passed, or "no examples"."""
    if partial:
        return "interrupted"
    if failed:
        return "failed"
    if incomplete:
        return "incomplete"
    return "passed" if examples else "no examples"


@dataclass(frozen=True)
class RunEnd:
    """What the controller knows of a run beside its item states: when it
    started and finished, whether a signal stopped it (``partial``, and by
    what), its notes, the start-up not charged to the budget, what was said
    when the shared example database was lost, and per item index the
    samples taken after each slice (each property's ``timeline``)."""

    started: float
    finished: float
    partial: bool = False
    interrupted_by: str | None = None
    notes: tuple[str, ...] = ()
    startup_seconds: float = 0.0
    database_lost: tuple[str, ...] = ()
    timeline: dict[int, list[list[float]]] = field(default_factory=dict)


@dataclass
class _Tally:
    """A run's items gathered by contract and implementation, in the shape of
    ``summary.json``'s records (built into them by :func:`build_summary`)."""

    contracts: dict[str, dict[str, Any]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)

    def add(self, item: WorkItem, s: ItemState, timeline: list[list[float]]) -> None:
        """One work item (a property of an implementation) and its state."""
        c = self.contracts.setdefault(item.contract, {
            "examples": 0, "seconds": 0.0, "cases_per_second": 0.0, "failures": 0, "errors": 0,
            "items": 0, "items_run": 0, "coverage": {}, "implementations": {}, "_events": {},
        })
        impl = c["implementations"].setdefault(item.name, {
            "status": NOT_RUN, "reason": "", "examples": 0, "seconds": 0.0, "cases_per_second": 0.0, "failures": [],
            "properties": {}, "coverage": {}, "scores": {}, "settings": {}, "_events": {},
        })
        c["items"] += 1
        impl["properties"][item.property] = {"examples": s.examples, "seconds": round(s.seconds, 3), "status": s.status,
                                             "startup_seconds": round(s.startup_seconds, 3), "slices": s.slices,
                                             "reason": s.reason, "timeline": timeline}
        if s.status == NOT_RUN:
            self.not_run.append(f"{item.contract}/{item.name}/{item.property}")
        else:
            c["items_run"] += 1
        for f in s.failures:
            self.failures.append({"contract": item.contract, "implementation": item.name, **f})
            impl["failures"].append({**{k: f.get(k) for k in ("property", "during", "error_type", "message", "exit",
                                                              "corpus_file", "new", "id")}, "origin": _origin_id(f)})
        if s.error:
            self.errors.append({"contract": item.contract, "implementation": item.name, "property": item.property, **s.error})
            c["errors"] += 1
        impl["settings"] = s.settings or impl["settings"]
        _add_counts(impl["scores"], s.scores)
        _add_counts(impl["_events"], s.events)
        _add_counts(c["_events"], s.events)
        for record in (impl, c):
            record["examples"] += s.examples
            record["seconds"] += s.seconds
        c["failures"] += len(s.failures)

    def close(self) -> None:
        """Each implementation's status, and every rate and coverage from the sums."""
        for c in self.contracts.values():
            for impl in c["implementations"].values():
                impl["status"] = implementation_status((p["status"] for p in impl["properties"].values()),
                                                       failed=bool(impl["failures"]))
                _close_rates(impl)
            _close_rates(c)

    @property
    def examples(self) -> int:
        return sum(c["examples"] for c in self.contracts.values())


def _add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    for k, v in counts.items():
        into[k] = into.get(k, 0) + int(v)


def _close_rates(record: dict[str, Any]) -> None:
    """A contract's or implementation's seconds rounded, its rate, and its coverage from its raw label counts."""
    record["seconds"] = round(record["seconds"], 3)
    record["cases_per_second"] = _rate(record["examples"], record["seconds"])
    record["coverage"] = _coverage(record.pop("_events"), record["examples"])


def build_summary(job: Job, states: dict[int, ItemState], end: RunEnd) -> dict[str, Any]:
    """The whole run as one JSON-able dict (the content of ``summary.json``),
    written through the typed records (:class:`batchfuzz.fuzz.records.RunReport`):
    per contract, per implementation (target), per property (a work item)."""
    tally = _Tally()
    for item in job.items:
        s = states.get(item.index) or dataclasses.replace(new_state(item), status=NOT_RUN, reason="never started")
        tally.add(item, s, end.timeline.get(item.index, []))
    tally.close()
    notes = list(end.notes)
    if tally.not_run and not end.partial:
        notes.append(f"incomplete: {len(tally.not_run)} of {len(job.items)} items did not run (the budget ended before "
                     f"they started): " + ", ".join(tally.not_run[:20]) + (" ..." if len(tally.not_run) > 20 else ""))
    found = origins(tally.failures)
    point_at_origins([*tally.failures, *(f for c in tally.contracts.values() for i in c["implementations"].values()
                                         for f in i["failures"])], found)
    return _run_report(job, tally, end, notes, found).to_json()


def _run_report(job: Job, tally: _Tally, end: RunEnd, notes: list[str], found: list[dict[str, Any]]) -> RunReport:
    """The run's record from its tally (``found``: its origins)."""
    machine = machine_info()
    examples, wall, where = tally.examples, max(0.0, end.finished - end.started), "<the run's summary>"
    status = run_status(partial=end.partial, failed=bool(tally.failures or tally.errors), incomplete=bool(tally.not_run),
                        examples=examples)
    return RunReport(
        partial=end.partial, interrupted_by=end.interrupted_by, status=status, started=_iso(end.started),
        finished=_iso(end.finished), wall_seconds=round(wall, 3), startup_seconds=round(end.startup_seconds, 3),
        budget_seconds=job.budget_s, database_lost=list(end.database_lost), profile=job.profile, seed=job.seed,
        workers=job.workers, isolated=job.isolate, device=job.items[0].device if job.items else None,
        database=job.shown_database, corpus=job.corpus_dir, shard=job.shard,
        replay_command=job.replay_command, versions=versions(),
        host={"platform": machine["platform"], "cpus": machine["cpu_count"]},
        totals=Totals(
            examples=examples, failures=len(tally.failures), origins=len(found),
            new_corpus_entries=sum(1 for f in tally.failures if f.get("new")), errors=len(tally.errors),
            items=len(job.items), items_run=len(job.items) - len(tally.not_run), items_not_run=len(tally.not_run),
            throughput=_rate(examples, wall),
        ),
        not_run=tally.not_run, notes=notes,
        contracts={name: ContractRecord.from_json(c, where, (name,)) for name, c in tally.contracts.items()},
        failures=[FailureRecord.from_json(f, where, ("failures",)) for f in tally.failures],
        origins=[OriginRecord.from_json(o, where, ("origins",)) for o in found],
        errors=[ErrorRecord.from_json(e, where, ("errors",)) for e in tally.errors],
    )


def _iso(t: float) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).replace(microsecond=0).isoformat()


def render_markdown(summary: dict[str, Any]) -> str:
    """A human-readable report, ready to paste into an issue."""
    t = summary["totals"]
    head = "PARTIAL (interrupted by " + str(summary["interrupted_by"]) + ")" if summary["partial"] else summary["status"]
    lines = [
        f"## batchfuzz fuzz: {head}",
        "",
        f"- {t['examples']} examples in {summary['wall_seconds']:.0f}s (budget {summary['budget_seconds']:g}s), "
        f"{t['throughput']:.0f} examples/s with {summary['workers']} worker(s) on {summary['device']}",
        f"- profile `{summary['profile']}`, seed `{summary['seed']}`"
        + (f", rerun with `{summary['replay_command']}`" if summary.get("replay_command") else ""),
        f"- failures: {t['failures']} ({t['new_corpus_entries']} new in the corpus), errors: {t['errors']}"
        + (f", items not run: {t['items_not_run']}" if t["items_not_run"] else ""),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in summary["versions"].items()),
    ]
    for n in summary.get("notes", []):
        lines.append(f"- note: {n}")
    lines += ["", "| contract | implementation | status | examples | cases/s | failures |", "|---|---|---|---:|---:|---:|"]
    for cname, c in summary["contracts"].items():
        for iname, i in c["implementations"].items():
            lines.append(f"| {cname} | `{iname}` | {i['status']} | {i['examples']} | {i['cases_per_second']:.0f} | "
                         f"{len(i['failures'])} |")
    lines += ["", "### Input classes covered (labels recorded with `event()`)", ""]
    for cname, c in summary["contracts"].items():
        if not c["coverage"]:
            lines.append(f"- {cname}: no labels recorded")
            continue
        top = ", ".join(f"{label} {v['fraction'] * 100:.0f}%" for label, v in c["coverage"].items())
        lines.append(f"- {cname} ({c['examples']} examples): {top}")
    if summary["failures"]:
        lines += ["", "### Failures (one per origin)", ""]
        for o in summary.get("origins") or origins(summary["failures"]):
            first = o["message"].splitlines()[0] if o.get("message") else ""
            lines += [
                f"**{o['contract']} / `{o['implementation']}`: {o['description']}**, breaks "
                + ", ".join(o["properties"]) + (f" ({o['failures']} failures)" if o["failures"] > 1 else ""),
                "",
                f"{o['error_type']}: {first}",
                "",
                *([f"**{unshrunk_note(o)}**", ""] if unshrunk_note(o) else []),
                f"Corpus: `{o.get('corpus_file')}`" + (" (new)" if o.get("new") else " (already known)"),
                "",
                "```python",
                o.get("reproduction") or "",
                "```",
                "",
            ]
    if summary["errors"]:
        lines += ["", "### Errors (the harness could not run an item)", ""]
        for e in summary["errors"]:
            first = e["message"].splitlines()[0] if e["message"] else ""
            lines.append(f"- {e['contract']} / `{e['implementation']}`: {e['type']}: {first}")
    return "\n".join(lines) + "\n"


def render_junit(summary: dict[str, Any]) -> str:
    """JUnit XML: a testsuite per contract, a testcase per (implementation, property)."""
    root = ET.Element("testsuites", name="batchfuzz fuzz", time=f"{summary['wall_seconds']:.3f}")
    # The failures as the run recorded them (inputs, reproduction), by contract, implementation and property.
    whole = {(f.get("contract"), f.get("implementation"), broken_property(f)): f for f in summary.get("failures") or []}
    for cname, c in summary["contracts"].items():
        suite = ET.SubElement(root, "testsuite", name=cname)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for iname, i in c["implementations"].items():
            failed = {f.get("during") or f["property"]: f for f in i["failures"]}
            props = i["properties"] or {"(all properties)": {"examples": 0, "seconds": 0.0, "status": i["status"]}}
            for pname, p in props.items():
                case = ET.SubElement(suite, "testcase", classname=f"{cname}.{iname}", name=pname,
                                     time=f"{float(p.get('seconds', 0.0)):.3f}")
                ET.SubElement(ET.SubElement(case, "properties"), "property", name="examples", value=str(p.get("examples", 0)))
                counts["tests"] += 1
                if pname in failed:
                    _junit_failure(case, {**failed[pname], **whole.get((cname, iname, pname), {})})
                    counts["failures"] += 1
                elif p.get("status") == NOT_RUN:
                    ET.SubElement(case, "skipped", message=p.get("reason") or NOT_RUN)
                    counts["skipped"] += 1
                elif p.get("status") == "error":
                    ET.SubElement(case, "error", message="the harness could not run this item")
                    counts["errors"] += 1
                elif p.get("status") == "interrupted":
                    ET.SubElement(case, "system-out").text = f"partial: interrupted after {p.get('examples', 0)} examples"
        for k, v in counts.items():
            suite.set(k, str(v))
    return junit_text(root)


def _junit_failure(case: ET.Element, f: dict[str, Any]) -> None:
    """A ``<failure>`` under ``case``: the error in its message, and in its
    body the whole message, the shrunk inputs, the reproduction and the corpus
    file (ElementTree escapes every text)."""
    first = f["message"].splitlines()[0] if f.get("message") else ""
    note = unshrunk_note(f)
    el = ET.SubElement(case, "failure", message=f"{f['error_type']}: {first}" + (f" ({note})" if note else ""),
                       type=str(f["error_type"]))
    inputs = f.get("inputs") if isinstance(f.get("inputs"), dict) else {}
    body = [str(f.get("message") or "")]
    if note:
        body.append(note)
    if inputs:
        body.append("inputs (shrunk): " + ", ".join(f"{k}={v}" for k, v in inputs.items()))
    if f.get("reproduction"):
        body += ["reproduction:", str(f["reproduction"])]
    body.append(f"corpus: {f.get('corpus_file')}")
    el.text = "\n".join(body)


def write_reports(report_dir: Path | str, summary: dict[str, Any], history: Sequence[dict[str, Any]] = ()) -> list[Path]:
    """Write the three reports and the page (``index.html``, with the earlier
    nights ``history``: :func:`batchfuzz.fuzz.page.read_history`) atomically;
    return their paths."""
    d = Path(report_dir)
    d.mkdir(parents=True, exist_ok=True)
    out = [d / "summary.json", d / "summary.md", d / "junit.xml"]
    write_json_atomic(out[0], summary)
    write_text_atomic(out[1], render_markdown(summary))
    write_text_atomic(out[2], render_junit(summary))
    out.append(page.write_page(d, summary, history))
    return out
