"""The matrix command's options for following an engine's code across
releases (``--where``, ``--drift``, ``--latest``, ``--follow``, ``--profile
nightly``; docs/where-it-lives.md): the "where it lives" table and the
drift report (``batchfuzz.engines.locate``), the newest releases on the
package index and the record of the releases seen
(``batchfuzz.engines.follow``).

Not a command (the underscore keeps ``cli.build_parser`` from loading it as one).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from batchfuzz.output import write_outputs
from batchfuzz.usage import UsageError, positive_int

NIGHTLY_LATEST = 2  # the releases --profile nightly takes from the index when --latest is not given


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--where", action="store_true",
                   help="print where each binding lives in each release given (contract, file, function, how it was found, "
                        "the binding used, its status) and run no cell; --markdown/--json write it")
    p.add_argument("--drift", action="store_true",
                   help="print the drift report of each release given against the next (the older first): per cell, whether "
                        "its function moved, was renamed, changed its signature or was removed, and where a removed one's "
                        "behaviour went; run no cell; --markdown/--json write it")
    p.add_argument("--latest", type=positive_int, default=None, metavar="N",
                   help="also the N newest final releases on pip's configured package index (pip index versions), and "
                        "--follow; an index that cannot be reached is said, and the run goes on without them")
    p.add_argument("--follow", action="store_true",
                   help="before the matrix, a drift report for each release never seen before (against the newest release "
                        "seen before it; a --source checkout always); after it, the releases run are recorded as seen "
                        "($BATCHFUZZ_CACHE/seen/ENGINE.json; the engine's published releases count as seen)")
    p.add_argument("--profile", choices=("nightly",), default=None,
                   help=f"nightly: follow the index, as a nightly job does: --follow and --latest {NIGHTLY_LATEST} "
                        "(unless --latest is given)")


def following(args: argparse.Namespace) -> bool:
    return bool(args.follow or args.latest or args.profile == "nightly")


def latest(engine: Any, args: argparse.Namespace) -> list[str]:
    """The newest releases on the index that ``--latest``/``--profile nightly`` ask for; [] (said on stderr)
    when the index cannot be reached."""
    from batchfuzz.engines import SourceError, follow

    n = args.latest or (NIGHTLY_LATEST if args.profile == "nightly" else 0)
    if not n:
        return []
    try:
        found = follow.newest(follow.index_versions(engine.ReleaseSource.distribution), n)
    except SourceError as exc:
        print(f"--latest {n}: the package index could not be asked, no newest releases added: {exc}", file=sys.stderr)
        return []
    print(f"--latest {n}: the newest releases of {engine.ReleaseSource.distribution} on the package index: "
          f"{', '.join(found) or 'none'}", flush=True)
    return found


def reports_only(args: argparse.Namespace) -> bool:
    return bool(args.where or args.drift)


def report(engine: Any, args: argparse.Namespace, sources: Sequence[Any], keep: Callable[[Any], bool]) -> int:
    """``--where`` and ``--drift``: the tables, printed and written; no cell runs."""
    from batchfuzz import matrix
    from batchfuzz.engines import locate

    if args.drift and len(sources) < 2:
        raise UsageError(f"--drift compares releases: give two or more (the older first), got {len(sources)}")
    started = time.time()
    search = matrix.searched(args.function, args.contract)
    made = {s.ref: locate.bindings(engine, s, keep, search) for s in sources}
    parts, data = [], {}
    if args.where:
        found = [locate.where(engine, s, bound=made[s.ref]) for s in sources]
        parts += [locate.where_markdown(rows, _title(engine, s)) for rows, s in zip(found, sources, strict=True)]
        data["where"] = [asdict(x) for rows in found for x in rows]
    if args.drift:
        data["drift"] = []
        for older, newer in itertools.pairwise(sources):
            drifts = locate.drift(engine, older, newer, bound=(made[older.ref], made[newer.ref]))
            parts.append(locate.drift_markdown(drifts, older.version, newer.version))
            data["drift"] += [{"older": older.version, "newer": newer.version, **asdict(d)} for d in drifts]
    seconds = time.time() - started
    text = f"# batchfuzz {engine.ENGINE}: {_what(args)}\n\nMade in {seconds:.0f} s from the releases' source " \
           "(docs/where-it-lives.md says how).\n\n" + "\n".join(parts)
    print(text)
    write_outputs(args.json_path, {"seconds": round(seconds, 1), **data}, args.markdown, text if args.markdown else None)
    return 0


def _what(args: argparse.Namespace) -> str:
    return " and ".join(w for w, on in (("where each binding lives", args.where), ("drift between releases", args.drift)) if on)


def _title(engine: Any, source: Any) -> str:
    kind, _, where = source.ref.partition(":")
    return f"{engine.ENGINE} {source.version} ({kind}{': ' + where.rsplit('/', 1)[-1] if where else ''})"


def before(engine: Any, args: argparse.Namespace, sources: Sequence[Any], keep: Callable[[Any], bool]) -> None:
    """``--follow``: the drift report of each release given that was never seen, against the newest seen before it."""
    from batchfuzz import matrix
    from batchfuzz.engines import SourceError, fetch_wheel, follow, locate

    if not following(args):
        return
    known = follow.seen(engine.ENGINE, getattr(engine, "RELEASES", ()))
    for source in sources:
        checkout = not source.ref.startswith(("wheel:", "installed:"))
        if source.version in known and not checkout:
            continue
        base = follow.baseline(source.version, known)
        if base is None:
            print(f"{engine.ENGINE} {source.version} is new, and no release was seen before it: no drift report", flush=True)
            continue
        try:
            older = engine.ReleaseSource.from_wheel(fetch_wheel(engine.ReleaseSource.distribution, base))
        except (SourceError, ValueError) as exc:
            print(f"no drift report for {engine.ENGINE} {source.version}: its baseline {base} cannot be opened: {exc}", flush=True)
            continue
        print(f"{engine.ENGINE} {source.version} was never seen: its drift against {base}, the newest release seen "
              "before it, first", flush=True)
        drifts = locate.drift(engine, older, source, keep, search=matrix.searched(args.function, args.contract))
        print(locate.drift_markdown(drifts, older.version, source.version), flush=True)


def after(engine: Any, args: argparse.Namespace, sources: Sequence[Any]) -> None:
    """``--follow``: the released versions the matrix ran, recorded as seen (not a source checkout's)."""
    from batchfuzz.engines import follow

    released = [s.version for s in sources if s.ref.startswith(("wheel:", "installed:"))]
    if following(args) and released:
        path = follow.record(engine.ENGINE, released)
        print(f"recorded as seen in {path}: {', '.join(released)}")
