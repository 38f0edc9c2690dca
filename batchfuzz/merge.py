"""Merging the reports of a sharded fuzz run, and the shards' failure corpora.

Each shard of ``batchfuzz fuzz --shard K/N`` writes ``summary.json``,
``summary.md`` and ``junit.xml`` in its report directory; its summary says
which shard it is (``"shard": {"index": K, "count": N}``, optionally
``"plan"``: :func:`batchfuzz.shards.plan_digest` of the whole item list). A
summary without ``"shard"`` is a single unsharded run (shard 1 of 1).

:func:`merge` combines them into one report of the same format as a single
run's (so one renderer, :func:`batchfuzz.report.render_markdown`, serves
both): per-contract figures and totals recomputed, every implementation,
failure and error tagged with its shard, plus a ``"shards"`` section (which
were given, which are missing). ``junit.xml`` is merged from the shards'
own files, a ``testsuite`` per contract, counts recomputed.

Checked, with every problem named at once (:class:`MergeError`): a
directory without a readable report, garbage or truncated files (named, with
line and column), a shard given twice, shards of different runs (different
N, seed or item list, or the same work item in two shards). A missing shard
is not an error: the merge goes on and says so (exit code 3, "incomplete").

Exit codes (:attr:`Merged.exit_code`): 0 complete, no failure; 1 a failure
or a harness error in any shard (even when incomplete: the failure is the
news); 3 incomplete (a shard missing, or a shard interrupted) without
failures. The command adds 2 for bad input.

Corpora: a corpus file's name is the hash of its identity (contract,
implementation or target, device, property, shrunk case:
:func:`batchfuzz.corpus.entry_id`), so merging the shards' corpora is a plain
copy (:func:`merge_corpora`). Two files of the same name are the same failure;
they may differ only in :data:`VOLATILE_FIELDS` (when, where and under which
seed it was found), and the first one is kept.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batchfuzz import corpus

EXIT_OK, EXIT_FAILURES, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
VOLATILE_FIELDS = ("date", "found")  # found = {seed, profile, worker}: differ between processes finding the same failure
REPORT_FILES = ("summary.json", "summary.md", "junit.xml")
SHARDS_SUITE = "batchfuzz.shards"

# Fields a shard's summary must have, with their types: what merging and rendering read.
_TOP: dict[str, type | tuple[type, ...]] = {
    "partial": bool, "status": str, "wall_seconds": (int, float), "budget_seconds": (int, float), "profile": str,
    "workers": int, "versions": dict, "totals": dict, "contracts": dict, "failures": list, "errors": list, "notes": list,
}
_IMPL: dict[str, type | tuple[type, ...]] = {"status": str, "examples": int, "failures": list}
_SUMMED = ("examples", "seconds", "failures", "errors", "items", "items_run")


class MergeError(ValueError):
    """Reports that cannot be merged; the message names every file and problem."""


@dataclass
class ShardReport:
    """One shard's report directory, loaded and checked."""

    path: Path
    summary: dict[str, Any]
    junit: ET.Element
    index: int = 1
    count: int = 1
    sharded: bool = False  # False: the summary has no "shard" field (a single unsharded run)

    @property
    def name(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def items(self) -> list[tuple[str, str]]:
        """(contract, implementation) of every work item in this shard."""
        return [(c, i) for c, data in self.summary["contracts"].items() for i in data["implementations"]]


@dataclass
class Merged:
    """The merged report: what to write and the exit code."""

    summary: dict[str, Any]
    markdown: str
    junit: str
    missing: list[int] = field(default_factory=list)
    exit_code: int = EXIT_OK


# --------------------------------------------------------------------------- loading


def _type_name(typ: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in typ) if isinstance(typ, tuple) else typ.__name__


def _check_fields(where: str, data: dict[str, Any], spec: dict[str, type | tuple[type, ...]]) -> None:
    for key, typ in spec.items():
        if key not in data:
            raise MergeError(f"{where}: missing field {key!r}")
        value = data[key]
        is_bool_for_number = isinstance(value, bool) and typ is not bool  # JSON true is not a count
        if is_bool_for_number or not isinstance(value, typ):
            raise MergeError(f"{where}: field {key!r} must be {_type_name(typ)}, got {type(value).__name__}")


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise MergeError(f"{path}: missing (is {path.parent} the report directory of a batchfuzz fuzz run?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MergeError(f"{path}: cannot read: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MergeError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); truncated?") from None


def _read_junit(path: Path) -> ET.Element:
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        raise MergeError(f"{path}: missing (is {path.parent} the report directory of a batchfuzz fuzz run?)") from None
    except ET.ParseError as exc:
        line, col = exc.position
        raise MergeError(f"{path}: not well-formed XML (line {line}, column {col}); truncated?") from None
    except OSError as exc:
        raise MergeError(f"{path}: cannot read: {exc}") from None
    if root.tag != "testsuites" or any(child.tag != "testsuite" for child in root):
        raise MergeError(f"{path}: not a batchfuzz JUnit report (expected <testsuites> holding <testsuite> elements)")
    return root


def load_shard(directory: str | os.PathLike[str]) -> ShardReport:
    """Load and check one shard's report directory; raises MergeError naming the file."""
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a path, got {type(directory).__name__} {directory!r}")
    d = Path(directory)
    if not d.is_dir():
        raise MergeError(f"{d}: no such report directory")
    path = d / "summary.json"
    summary = _read_json(path)
    if not isinstance(summary, dict) or summary.get("tool") != "batchfuzz":
        raise MergeError(f"{path}: not a batchfuzz fuzz summary (no \"tool\": \"batchfuzz\")")
    _check_fields(str(path), summary, _TOP)
    for cname, c in summary["contracts"].items():
        if not isinstance(c, dict) or not isinstance(c.get("implementations"), dict):
            raise MergeError(f"{path}: contract {cname!r} must be an object with an 'implementations' object")
        for iname, impl in c["implementations"].items():
            if not isinstance(impl, dict):
                raise MergeError(f"{path}: {cname}/{iname} must be an object")
            _check_fields(f"{path}: {cname}/{iname}", impl, _IMPL)
    for key in ("failures", "errors"):
        if not all(isinstance(x, dict) for x in summary[key]):
            raise MergeError(f"{path}: every entry of {key!r} must be an object")
    report = ShardReport(path=d, summary=summary, junit=_read_junit(d / "junit.xml"))
    shard = summary.get("shard")
    if shard is not None:
        ok = isinstance(shard, dict) and all(isinstance(shard.get(k), int) and not isinstance(shard.get(k), bool)
                                             for k in ("index", "count"))
        if not ok or not 1 <= shard["index"] <= shard["count"]:
            raise MergeError(f"{path}: field 'shard' must be {{\"index\": K, \"count\": N}} with 1 <= K <= N, got {shard!r}")
        if "plan" in shard and not isinstance(shard["plan"], str):
            raise MergeError(f"{path}: field 'shard.plan' must be a string, got {shard['plan']!r}")
        report.index, report.count, report.sharded = shard["index"], shard["count"], True
    return report


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
        if r.summary.get("seed") != first.summary.get("seed"):
            problems.append(f"shards of different runs: seed {first.summary.get('seed')!r} in {first.path}, "
                            f"{r.summary.get('seed')!r} in {r.path}")
        plans = (first.summary.get("shard") or {}).get("plan"), (r.summary.get("shard") or {}).get("plan")
        if None not in plans and plans[0] != plans[1]:
            problems.append(f"shards of different runs: item list {plans[0]} in {first.path}, {plans[1]} in {r.path}")
    owner: dict[tuple[str, str], ShardReport] = {}
    for r in reports:
        for item in r.items:
            other = owner.setdefault(item, r)
            if other is not r and other.index != r.index:
                problems.append(f"work item {item[0]}/{item[1]} is in shard {other.name} ({other.path}) and in shard "
                                f"{r.name} ({r.path}): shards of different runs or partitions")
    if problems:
        raise MergeError("cannot merge these reports:\n  " + "\n  ".join(problems))
    return [k for k in range(1, first.count + 1) if k not in by_index]


# --------------------------------------------------------------------------- merging


def _rate(examples: int, seconds: float) -> float:
    return round(examples / seconds, 1) if seconds > 0 else 0.0


def _parse_time(text: Any) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(text)).timestamp()
    except (TypeError, ValueError):
        return None


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).replace(microsecond=0).isoformat()


def _merge_contracts(reports: Sequence[ShardReport]) -> dict[str, dict[str, Any]]:
    contracts: dict[str, dict[str, Any]] = {}
    labels: dict[str, dict[str, int]] = {}
    for r in reports:
        for cname, c in r.summary["contracts"].items():
            if cname not in contracts:
                contracts[cname] = {**copy.deepcopy(c), **{k: 0 for k in _SUMMED}, "implementations": {}}
                labels[cname] = {}
            m = contracts[cname]
            for k in _SUMMED:
                value = c.get(k, 0)
                m[k] += value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
            for iname, impl in c["implementations"].items():
                m["implementations"][iname] = {**copy.deepcopy(impl), "shard": r.index}
            for label, cov in (c.get("coverage") or {}).items():
                n = cov.get("examples", 0) if isinstance(cov, dict) else 0
                labels[cname][label] = labels[cname].get(label, 0) + (n if isinstance(n, int) else 0)
    for cname, m in contracts.items():
        m["seconds"] = round(float(m["seconds"]), 3)
        m["cases_per_second"] = _rate(m["examples"], m["seconds"])
        m["coverage"] = {
            label: {"examples": n, "fraction": round(n / m["examples"], 4) if m["examples"] else 0.0}
            for label, n in sorted(labels[cname].items(), key=lambda kv: (-kv[1], kv[0]))
        }
    return contracts


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def merge(reports: Sequence[ShardReport]) -> Merged:
    """One report from the shards' reports (checked with :func:`check_same_run`)."""
    missing = check_same_run(reports)
    shards = sorted(reports, key=lambda r: r.index)
    first = shards[0]
    count = first.count
    contracts = _merge_contracts(shards)
    failures = [{**f, "shard": r.index} for r in shards for f in r.summary["failures"]]
    errors = [{**e, "shard": r.index} for r in shards for e in r.summary["errors"]]
    starts = [_parse_time(r.summary.get("started")) for r in shards]
    ends = [_parse_time(r.summary.get("finished")) for r in shards]
    if None in starts or None in ends:
        started = finished = None
        wall = max(float(r.summary["wall_seconds"]) for r in shards)
    else:
        started, finished = min(s for s in starts if s is not None), max(e for e in ends if e is not None)
        wall = max(0.0, finished - started)
    examples = sum(c["examples"] for c in contracts.values())
    partial = [r for r in shards if r.summary["partial"]]
    if missing:
        status = "incomplete"
    elif partial:
        status = "interrupted"
    elif failures or errors:
        status = "failed"
    else:
        status = "passed" if examples else "no examples"
    notes = []
    if count > 1 or len(shards) > 1:
        notes.append(f"merged from shard(s) {', '.join(r.name for r in shards)}"
                     + (f"; MISSING: {', '.join(f'{k}/{count}' for k in missing)} (incomplete)" if missing else ""))
    notes += [f"shard {r.name} was interrupted: {r.summary.get('interrupted_by')}" for r in partial]
    versions = first.summary["versions"]
    notes += [f"shard {r.name} ran other versions: {r.summary['versions']}" for r in shards[1:] if r.summary["versions"] != versions]
    notes += [f"shard {r.name}: {n}" for r in shards for n in r.summary["notes"]]
    totals = {
        "examples": examples,
        "failures": len(failures),
        "new_corpus_entries": sum(1 for f in failures if f.get("new")),
        "errors": len(errors),
        "items": sum(_int(r.summary["totals"].get("items")) for r in shards),
        "items_not_run": sum(_int(r.summary["totals"].get("items_not_run")) for r in shards),
        "throughput": _rate(examples, wall),
    }
    summary: dict[str, Any] = {
        **{k: v for k, v in first.summary.items() if k not in ("shard", "host", "replay_command")},
        "merged": True,
        "partial": bool(partial),
        "interrupted_by": "; ".join(f"shard {r.name}: {r.summary.get('interrupted_by')}" for r in partial) or None,
        "status": status,
        "started": _iso(started) if started is not None else None,
        "finished": _iso(finished) if finished is not None else None,
        "wall_seconds": round(wall, 3),
        "workers": sum(r.summary["workers"] for r in shards),
        "device": next((r.summary.get("device") for r in shards if r.summary.get("device")), None),  # an empty shard has none
        "replay_command": None,
        "host": None,
        "totals": totals,
        "notes": notes,
        "contracts": contracts,
        "failures": failures,
        "errors": errors,
        "shards": {
            "count": count,
            "complete": not missing,
            "missing": missing,
            "given": [{
                "index": r.index, "dir": str(r.path), "sharded": r.sharded, "status": r.summary["status"],
                "partial": r.summary["partial"], "wall_seconds": r.summary["wall_seconds"],
                "examples": _int(r.summary["totals"].get("examples")), "failures": len(r.summary["failures"]),
                "errors": len(r.summary["errors"]), "workers": r.summary["workers"], "host": r.summary.get("host"),
                "replay_command": r.summary.get("replay_command"),
            } for r in shards],
        },
    }
    if failures or errors:
        code = EXIT_FAILURES
    elif missing or partial:
        code = EXIT_INCOMPLETE
    else:
        code = EXIT_OK
    return Merged(summary=summary, markdown=render_markdown(summary), junit=merge_junit(shards, missing, count, wall),
                  missing=missing, exit_code=code)


def merge_junit(reports: Sequence[ShardReport], missing: Sequence[int], count: int, wall: float) -> str:
    """The shards' ``junit.xml`` as one: a testsuite per contract, counts recomputed; a
    ``batchfuzz.shards`` suite with an error per missing shard."""
    root = ET.Element("testsuites", name="batchfuzz fuzz", time=f"{wall:.3f}")
    suites: dict[str, ET.Element] = {}
    for r in reports:
        for suite in r.junit:
            name = suite.get("name", "")
            if name not in suites:
                suites[name] = ET.SubElement(root, "testsuite", name=name)
            for child in suite:
                suites[name].append(copy.deepcopy(child))
    if missing:
        suite = ET.SubElement(root, "testsuite", name=SHARDS_SUITE)
        for k in missing:
            case = ET.SubElement(suite, "testcase", classname=SHARDS_SUITE, name=f"shard {k}/{count}", time="0.000")
            ET.SubElement(case, "error", message=f"shard {k}/{count} missing: no report was given to merge-reports")
    for suite in root:
        cases = suite.findall("testcase")
        suite.set("tests", str(len(cases)))
        for kind, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            suite.set(attr, str(sum(1 for c in cases if c.find(kind) is not None)))
        suite.set("time", f"{sum(_float(c.get('time')) for c in cases):.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _float(text: str | None) -> float:
    try:
        return float(text or 0.0)
    except ValueError:
        return 0.0


def render_markdown(summary: dict[str, Any]) -> str:
    """The single-run renderer on the merged summary, plus a table of the shards."""
    from batchfuzz.report import render_markdown as render_run

    s = summary["shards"]
    lines = [render_run(summary).rstrip("\n"), "", f"### Shards ({len(s['given'])} of {s['count']} merged)", "",
             "| shard | status | examples | failures | errors | wall s | report |", "|---|---|---:|---:|---:|---:|---|"]
    for g in s["given"]:
        lines.append(f"| {g['index']}/{s['count']} | {g['status']} | {g['examples']} | {g['failures']} | {g['errors']} | "
                     f"{float(g['wall_seconds']):.0f} | `{g['dir']}` |")
    lines += [f"| {k}/{s['count']} | **missing** | | | | | |" for k in s["missing"]]
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


def write(out_dir: str | os.PathLike[str], merged: Merged) -> list[Path]:
    """Write summary.json, summary.md and junit.xml into ``out_dir`` (atomically); return their paths."""
    d = Path(out_dir)
    if d.exists() and not d.is_dir():
        raise MergeError(f"{d}: the output report directory exists and is not a directory")
    d.mkdir(parents=True, exist_ok=True)
    paths = [d / name for name in REPORT_FILES]
    corpus.write_json_atomic(paths[0], merged.summary)
    for path, text in ((paths[1], merged.markdown), (paths[2], merged.junit)):
        _write_text_atomic(path, text)
    return paths


def _write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --------------------------------------------------------------------------- corpora


@dataclass
class CorpusMerge:
    """What :func:`merge_corpora` did, file by file (paths relative to the destination)."""

    copied: list[str] = field(default_factory=list)  # new in the destination
    same: list[str] = field(default_factory=list)  # already there, equal but for VOLATILE_FIELDS
    conflicts: list[str] = field(default_factory=list)  # not copied: a readable account each


def stable_fields(data: dict[str, Any]) -> dict[str, Any]:
    """A corpus document without its :data:`VOLATILE_FIELDS`."""
    return {k: v for k, v in data.items() if k not in VOLATILE_FIELDS}


def merge_corpora(sources: Sequence[str | os.PathLike[str]], dest: str | os.PathLike[str]) -> CorpusMerge:
    """Copy every corpus file of ``sources`` into ``dest`` under its own name.

    A file already in ``dest`` under that name is kept: if the two differ beyond
    :data:`VOLATILE_FIELDS`, or a file's name is not the id of its content, or a
    file does not load, that is reported as a conflict and nothing is copied.
    """
    out = CorpusMerge()
    root = Path(dest)
    for src in sources:
        src_root = Path(src)
        if not src_root.is_dir():
            out.conflicts.append(f"{src_root}: no such corpus directory")
            continue
        for path in corpus.files(src_root):
            rel = path.relative_to(src_root).as_posix()
            try:
                entry = corpus.load(path)
            except corpus.CorpusError as exc:
                out.conflicts.append(f"{rel}: not copied: {exc}")
                continue
            if entry.id != path.stem or entry.data.get("id") != path.stem:
                out.conflicts.append(f"{rel}: not copied: {path} holds entry {entry.id}, not its name {path.stem}")
                continue
            target = root / rel
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
                os.close(fd)
                shutil.copyfile(path, tmp)
                os.chmod(tmp, 0o644)
                os.replace(tmp, target)
                out.copied.append(rel)
                continue
            try:
                existing = json.loads(target.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                out.conflicts.append(f"{rel}: kept {target} (unreadable: {exc}); {path} not copied")
                continue
            if not isinstance(existing, dict):
                out.conflicts.append(f"{rel}: kept {target} (not a JSON object); {path} not copied")
                continue
            a, b = stable_fields(existing), stable_fields(entry.data)
            if a == b:
                out.same.append(rel)
            else:
                differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                out.conflicts.append(f"{rel}: kept {target}; {path} differs in {', '.join(differ)}")
    return out
