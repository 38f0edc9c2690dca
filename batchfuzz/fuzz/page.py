"""The fuzz reports' page: ``index.html``, one self-contained file beside
``summary.json`` (styles and plots inline, nothing fetched when it is viewed).

Built from a summary dict alone (:func:`build_page`), so a single run, merged
shards and anyone holding the JSON get the same page; it opens on what
failed, before any chart. Plots are matplotlib figures saved as SVG with
text kept as text (no pyplot, imported only when a page is built); every
text from a summary is escaped. What it shows: docs/nightly.md
(``index.html``).
"""

from __future__ import annotations

import html
import io
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from batchfuzz.fuzz.records import unshrunk_note
from batchfuzz.output import write_text_atomic
from batchfuzz.usage import UsageError

PAGE_FILE = "index.html"
MAX_LABELS = 30  # input classes drawn per contract; the rest are counted under the plot
_RC: dict[Any, Any] = {"svg.fonttype": "none", "svg.hashsalt": "batchfuzz", "text.parse_math": False, "font.size": 8.0,
       "axes.titlesize": 9.0, "legend.fontsize": 7.0}


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _short(name: str, width: int = 48) -> str:
    """A name for a legend: long target paths keep their end (the table has them whole)."""
    return name if len(name) <= width else "\u2026" + name[-(width - 1):]


# --------------------------------------------------------------------------- history


def night(summary: dict[str, Any], where: str) -> dict[str, Any]:
    """What the history keeps of one run: when, its status and totals, each
    contract's examples, examples per second and failures, and ``where`` it
    was read from."""
    totals = summary.get("totals") or {}
    return {
        "where": where, "started": summary.get("started") or "", "status": summary.get("status", ""),
        "examples": int(totals.get("examples", 0)), "failures": int(totals.get("failures", 0)),
        "errors": int(totals.get("errors", 0)), "throughput": float(totals.get("throughput", 0.0)),
        "contracts": {name: {"examples": int(c.get("examples", 0)), "cases_per_second": float(c.get("cases_per_second", 0.0)),
                             "failures": int(c.get("failures", 0))}
                      for name, c in (summary.get("contracts") or {}).items()},
    }


def read_history(dirs: Iterable[str], what: str = "--history") -> list[dict[str, Any]]:
    """The :func:`night` of each report directory's ``summary.json``, oldest
    first (by ``started``); every unreadable one named at once in a UsageError
    (``what`` is the option that gave them). Each file is read with the limits
    of every untrusted file (:func:`batchfuzz.fuzz.untrusted.load_report`), and
    what :func:`night` reads of it is checked (:func:`night_problem`)."""
    from batchfuzz.fuzz.untrusted import UntrustedFileError, load_report

    nights, problems = [], []
    for d in dirs:
        path = Path(d) / "summary.json"
        if not path.parent.is_dir() or not os.path.lexists(path):
            problems.append(f"{what} {d}: cannot read {path} (no such file)")
            continue
        try:
            data = load_report(path)
        except UntrustedFileError as exc:
            problems.append(f"{what} {d}: {exc}")
            continue
        why = night_problem(data)
        if why:
            problems.append(f"{what} {d}: {path}: {why}")
            continue
        nights.append(night(data, str(d)))
    if problems:
        raise UsageError("; ".join(problems))
    return sorted(nights, key=lambda n: n["started"])


def night_problem(summary: Any) -> str | None:
    """Why :func:`night` cannot read ``summary`` (a field missing or of the wrong type), or None."""
    if not isinstance(summary, dict) or not isinstance(summary.get("contracts"), dict) or not isinstance(summary.get("totals"), dict):
        return "is not a batchfuzz fuzz summary (no contracts and totals)"
    number, integer = ((int, float), "a number"), ((int,), "an integer")
    totals = summary["totals"]
    fields: list[tuple[str, Any, tuple[tuple[type, ...], str]]] = [
        ("started", summary.get("started"), ((str, type(None)), "a string or null")),
        ("status", summary.get("status", ""), ((str,), "a string")), ("totals.throughput", totals.get("throughput", 0.0), number)]
    fields += [(f"totals.{k}", totals.get(k, 0), integer) for k in ("examples", "failures", "errors")]
    for name, c in summary["contracts"].items():
        if not isinstance(c, dict):
            return f"field 'contracts.{name}' must be an object, got {type(c).__name__}"
        fields += [(f"contracts.{name}.{k}", c.get(k, 0), integer) for k in ("examples", "failures")]
        fields.append((f"contracts.{name}.cases_per_second", c.get("cases_per_second", 0.0), number))
    for name, value, (types, word) in fields:
        if isinstance(value, bool) or not isinstance(value, types):
            return f"field {name!r} must be {word}, got {type(value).__name__}"
    return None


# --------------------------------------------------------------------------- plots


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _segments(timeline: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """x and y of one item's slices: each slice a segment from its start (its
    end less the seconds it ran) to its end, at its examples over its seconds;
    NaN between slices."""
    xs: list[float] = []
    ys: list[float] = []
    ex0, sec0 = 0.0, 0.0
    for sample in timeline:
        t, ex, sec = float(sample[0]), float(sample[1]), float(sample[2])
        if sec > sec0:
            rate = (ex - ex0) / (sec - sec0)
            xs += [max(0.0, t - (sec - sec0)), t, math.nan]
            ys += [rate, rate, math.nan]
        ex0, sec0 = ex, sec
    return xs, ys


def rate_plot(contract: str, c: dict[str, Any]) -> str | None:
    """Examples per second of each of the contract's work items over the run
    (an SVG), a colour per implementation; None when no item has a timeline."""
    fig = _figure(5.6, 2.6)
    ax = fig.add_subplot()
    drawn = False
    for k, (iname, impl) in enumerate((c.get("implementations") or {}).items()):
        colour = f"C{k % 10}"
        labelled = False
        for p in (impl.get("properties") or {}).values():
            xs, ys = _segments(p.get("timeline") or [])
            if not xs:
                continue
            ax.plot(xs, ys, color=colour, linewidth=1.2, marker="|", markersize=5,
                    label=None if labelled else _short(iname))
            labelled = drawn = True
    if not drawn:
        return None
    ax.set_title(contract)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("examples per second")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=2, frameon=False)
    return _svg(fig)


def coverage_plot(contract: str, c: dict[str, Any]) -> str | None:
    """The share of the contract's examples in each input class its labels
    name, a bar each (an SVG); None when no label was recorded."""
    coverage = c.get("coverage") or {}
    if not coverage:
        return None
    shown = list(coverage.items())[:MAX_LABELS]
    fig = _figure(5.6, 0.9 + 0.2 * len(shown))
    ax = fig.add_subplot()
    names = [label for label, _ in shown]
    shares = [100.0 * float(v.get("fraction", 0.0)) for _, v in shown]
    bars = ax.barh(range(len(shown)), shares, color="C0")
    ax.bar_label(bars, labels=[str(int(v.get("examples", 0))) for _, v in shown], padding=2, fontsize=7)
    ax.set_yticks(range(len(shown)), labels=names)
    ax.invert_yaxis()
    ax.set_xlim(0, 110)
    ax.set_xlabel(f"% of {int(c.get('examples', 0))} examples (bar labels: examples)")
    ax.set_title(contract)
    ax.grid(True, axis="x", alpha=0.3)
    return _svg(fig)


def history_plot(nights: Sequence[dict[str, Any]]) -> str:
    """Each contract's examples per second, night by night, and each night's
    failures (an SVG)."""
    fig = _figure(11.0, 3.2)
    rates, fails = fig.subplots(1, 2, width_ratios=[3, 2])
    xs = list(range(len(nights)))
    ticks = [n["started"][:16].replace("T", " ") or n["where"] for n in nights]
    contracts = sorted({name for n in nights for name in n["contracts"]})
    for k, name in enumerate(contracts):
        ys = [n["contracts"][name]["cases_per_second"] if name in n["contracts"] else math.nan for n in nights]
        rates.plot(xs, ys, marker="o", markersize=3, color=f"C{k % 10}", linestyle="-" if k < 10 else "--", label=_short(name))
    rates.set_title("examples per second per contract")
    rates.set_ylim(bottom=0)
    rates.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fails.bar(xs, [n["failures"] for n in nights], color="C3", label="failures")
    fails.bar(xs, [n["errors"] for n in nights], bottom=[n["failures"] for n in nights], color="C7", label="errors")
    from matplotlib.ticker import MaxNLocator

    fails.yaxis.set_major_locator(MaxNLocator(integer=True))
    fails.set_title("failures and errors per night")
    fails.legend(frameon=False)
    for ax in (rates, fails):
        ax.set_xticks(xs, labels=ticks, rotation=30, ha="right")
        ax.grid(True, alpha=0.3)
    return _svg(fig)


# --------------------------------------------------------------------------- the page


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #1b1b1b; max-width: 1250px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.9em; } td, th { padding: 2px 8px; border-bottom: 1px solid #eee; }
th { text-align: left; background: #f3f3f3; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.status { font-weight: bold; padding: 1px 6px; border-radius: 3px; }
.passed { background: #d9f2d9; } .failed, .error { background: #f8d0d0; }
.incomplete, .interrupted, .not-run, .no-examples { background: #fbeec4; }
.plots { display: flex; flex-wrap: wrap; gap: 12px; } .plots figure { margin: 0; }
svg { max-width: 100%; height: auto; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; font-size: 0.85em; }
.failure { border-left: 4px solid #c33; padding-left: 10px; margin: 1em 0; } .unshrunk { color: #a40; }
.kernel { border-left: 4px solid #837; padding-left: 8px; }
.none { color: #666; }
"""


def _status(status: Any) -> str:
    return f'<span class="status {_e(str(status).replace(" ", "-"))}">{_e(status)}</span>'


def _header(summary: dict[str, Any]) -> list[str]:
    t = summary.get("totals") or {}
    head = (f"partial (interrupted by {summary.get('interrupted_by')})" if summary.get("partial")
            else summary.get("status", ""))
    shards = summary.get("shards") or {}
    facts = [
        ("status", _status(head)),
        ("started", _e(summary.get("started", ""))), ("finished", _e(summary.get("finished", ""))),
        ("examples", f"{_e(t.get('examples', 0))} in {_e(summary.get('wall_seconds', 0))} s "
                     f"(budget {_e(summary.get('budget_seconds', ''))} s), {_e(t.get('throughput', 0))} per wall second"),
        ("failures", f"{_e(t.get('failures', 0))} ({_e(t.get('new_corpus_entries', 0))} new in the corpus), "
                     f"errors {_e(t.get('errors', 0))}, items run {_e(t.get('items_run', 0))} of {_e(t.get('items', 0))}"),
        ("run", f"profile {_e(summary.get('profile', ''))}, seed {_e(summary.get('seed', ''))}, "
                f"{_e(summary.get('workers', ''))} worker(s) on {_e(summary.get('device', ''))}"),
        ("versions", _e(", ".join(f"{k} {v}" for k, v in (summary.get("versions") or {}).items()))),
    ]
    if summary.get("merged"):
        facts.append(("shards", f"{_e(len(shards.get('given') or []))} of {_e(shards.get('count', ''))} merged"
                                + (f", missing {_e(', '.join(str(k) for k in shards.get('missing') or []))}"
                                   if shards.get("missing") else "")))
    if summary.get("replay_command"):
        facts.append(("rerun", f"<code>{_e(summary['replay_command'])}</code>"))
    out = ["<h1>batchfuzz fuzz</h1>", "<table>"]
    out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts]
    out.append("</table>")
    if summary.get("notes"):
        out.append("<ul>" + "".join(f"<li>note: {_e(n)}</li>" for n in summary["notes"]) + "</ul>")
    return out


def _items(contracts: dict[str, Any]) -> list[str]:
    out = ['<h2 id="items">Implementations</h2>', "<table><tr><th>contract</th><th>implementation</th><th>status</th>"
           "<th>properties run</th><th>examples</th><th>examples/s</th><th>failures</th></tr>"]
    for cname, c in contracts.items():
        for iname, i in (c.get("implementations") or {}).items():
            props = i.get("properties") or {}
            ran = sum(1 for p in props.values() if p.get("status") != "not run")
            out.append(f"<tr><td>{_e(cname)}</td><td><code>{_e(iname)}</code></td><td>{_status(i.get('status', ''))}</td>"
                       f"<td class=n>{ran}/{len(props)}</td><td class=n>{_e(i.get('examples', 0))}</td>"
                       f"<td class=n>{_e(i.get('cases_per_second', 0))}</td><td class=n>{len(i.get('failures') or [])}</td></tr>")
    out.append("</table>")
    return out


def _plots(title: str, anchor: str, contracts: dict[str, Any], draw: Any, missing: str) -> list[str]:
    out = [f'<h2 id="{anchor}">{title}</h2>', '<div class="plots">']
    without = []
    for cname, c in contracts.items():
        svg = draw(cname, c)
        if svg is None:
            without.append(cname)
        else:
            out.append(f'<figure class="{anchor}" data-contract="{_e(cname)}">{svg}</figure>')
    out.append("</div>")
    if without:
        out.append(f'<p class="none">{missing}: {_e(", ".join(without))}</p>')
    return out


def _coverage_notes(contracts: dict[str, Any]) -> list[str]:
    rest = [f"{cname}: {len(c['coverage']) - MAX_LABELS} more input classes than drawn"
            for cname, c in contracts.items() if len(c.get("coverage") or {}) > MAX_LABELS]
    return [f'<p class="none">{_e("; ".join(rest))}</p>'] if rest else []


def _kernel(f: dict[str, Any]) -> list[str]:
    confirm = f.get("confirm")
    if not isinstance(confirm, dict):
        return []
    return [f'<p class="kernel">kernel <code>{_e(confirm.get("kernel", ""))}</code>: {_e(confirm.get("verdict", ""))}'
            + (f" &mdash; {_e(confirm['consequence'])}" if confirm.get("consequence") else "") + "</p>"]


def _failures(summary: dict[str, Any]) -> list[str]:
    """The failures, one per origin where the summary lists its origins
    (every property it breaks in the heading), else one per failure."""
    out = ['<h2 id="failures">Failures</h2>']
    failures = summary.get("origins") or summary.get("failures") or []
    if not failures:
        return out + ['<p class="none">none</p>']
    for f in failures:
        message = str(f.get("message") or "")
        first = message.splitlines()[0] if message else ""
        where = f"{f.get('corpus_file')} ({'new' if f.get('new') else 'already known'})" if f.get("corpus_file") else ""
        what = ", ".join(f["properties"]) if isinstance(f.get("properties"), list) else f.get("property", "")
        shards = f.get("shards") if isinstance(f.get("shards"), list) else [f["shard"]] if f.get("shard") is not None else []
        out += [
            '<div class="failure">',
            f"<h3>{_e(f.get('contract', ''))} / <code>{_e(f.get('implementation', ''))}</code>: {_e(what)}"
            + (f" (shard {_e(', '.join(str(k) for k in shards))})" if shards else "") + "</h3>",
            f"<p><b>{_e(f.get('error_type', ''))}</b>: {_e(first)}</p>",
        ]
        if unshrunk_note(f):
            out.append(f'<p class="unshrunk"><b>{_e(unshrunk_note(f))}</b></p>')
        if where:
            out.append(f"<p>corpus: <code>{_e(where)}</code></p>")
        out += _kernel(f)
        if f.get("reproduction"):
            out.append(f'<pre class="reproduction">{_e(f["reproduction"])}</pre>')
        if len(message.splitlines()) > 1:
            out.append(f"<details><summary>the whole message</summary><pre>{_e(message)}</pre></details>")
        out.append("</div>")
    return out


def _errors(summary: dict[str, Any]) -> list[str]:
    errors = summary.get("errors") or []
    if not errors:
        return []
    out = ['<h2 id="errors">Errors (items the harness could not run)</h2>', "<ul>"]
    for e in errors:
        out.append(f"<li>{_e(e.get('contract', ''))} / <code>{_e(e.get('implementation', ''))}</code> "
                   f"{_e(e.get('property', ''))}: {_e(e.get('type', ''))}: {_e(e.get('message', ''))}</li>")
    return out + ["</ul>"]


def _history(nights: Sequence[dict[str, Any]]) -> list[str]:
    out = ['<h2 id="history">History</h2>', f'<figure class="history">{history_plot(nights)}</figure>',
           "<table><tr><th>started</th><th>status</th><th>examples</th><th>examples/s</th><th>failures</th>"
           "<th>errors</th><th>report</th></tr>"]
    for n in nights:
        out.append(f"<tr><td>{_e(n['started'])}</td><td>{_status(n['status'])}</td><td class=n>{n['examples']}</td>"
                   f"<td class=n>{n['throughput']:g}</td><td class=n>{n['failures']}</td><td class=n>{n['errors']}</td>"
                   f"<td><code>{_e(n['where'])}</code></td></tr>")
    return out + ["</table>"]


def build_page(summary: dict[str, Any], history: Sequence[dict[str, Any]] = ()) -> str:
    """The page (HTML) of ``summary`` (a ``summary.json``'s content), with the
    history of the earlier nights ``history`` (:func:`night` records, oldest
    first) and this run as the last night when any are given."""
    from matplotlib import rc_context

    contracts = summary.get("contracts") or {}
    # What failed first (a reader opens the page for it), then the implementations and the charts.
    body = _header(summary) + _failures(summary) + _errors(summary) + _items(contracts)
    with rc_context(_RC):
        body += _plots("Examples per second per item over the run", "rates", contracts, rate_plot,
                       "no timeline recorded for")
        body += _plots("Input classes covered per contract", "coverage", contracts, coverage_plot,
                       "no input-class labels recorded for")
        body += _coverage_notes(contracts)
        if history:
            body += _history([*history, night(summary, "this report")])
    title = f"batchfuzz fuzz: {summary.get('status', '')} ({summary.get('started', '')})"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_page(report_dir: Path | str, summary: dict[str, Any], history: Sequence[dict[str, Any]] = ()) -> Path:
    """Write ``index.html`` into ``report_dir`` atomically; return its path."""
    path = Path(report_dir) / PAGE_FILE
    write_text_atomic(path, build_page(summary, history))
    return path
