"""``batchfuzz replay --write-tests DIR``: the corpus as pytest files a team commits.

One file per corpus entry, ``DIR/test_<contract>_<id>.py``, whose one test
is the entry's reproduction (``batchfuzz.reproduce.regression_test``): it
fails while the bug is there and passes once it is fixed, on exactly the
entries ``batchfuzz replay`` reports as still failing. The entries replay
skips are not written, for the reasons it gives (a user's function or an
engine release the file names but the command line does not); an entry
recorded on ``cuda`` is written with a skip where no CUDA device is.
``tests/test_write_tests.py`` runs pytest on the files and compares with
``replay``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from batchfuzz.fuzz import corpus
from batchfuzz.runner import Failure
from batchfuzz.text import printable

# A crash or timeout test runs the call in a subprocess, with replay's timeout.
TIMEOUT_S = 60.0


def failure_of(entry: corpus.CorpusEntry) -> Failure:
    """The :class:`batchfuzz.runner.Failure` a corpus entry records."""
    exit = entry.data.get("failure", {}).get("exit", "")
    return Failure(contract=entry.contract, target=entry.target, property=entry.property, spec=entry.spec, case=entry.case,
                   error_type=entry.error_type, message=entry.message, exit=str(exit or ""), during=entry.during)


def write_tests(paths: list[Path], directory: Path, *, targets: dict[str, str], engines: list[str] | tuple[str, ...] = (),
                out: Any = None) -> dict[str, int]:
    """Write a test file under ``directory`` for every corpus entry under
    ``paths`` (default: the project's corpus); print one line per entry and a
    total; return the counts written, skipped and malformed. Raises
    UsageError for a given path that does not exist."""
    import sys

    from batchfuzz.usage import UsageError

    def say(text: str) -> None:
        print(printable(text), file=out or sys.stdout)  # names and errors from corpus files

    roots = list(paths) or [corpus.default_dir()]
    found: list[Path] = []
    for root in roots:
        if paths and not root.exists():
            raise UsageError(f"{root}: no such corpus file or directory")
        found.extend(corpus.files(root))
    from batchfuzz.reproduce import write_test

    counts = {"written": 0, "skipped": 0, "malformed": 0}
    for path in found:
        try:
            entry = corpus.load(path)
            corpus.check_entry(entry)
        except corpus.CorpusError as exc:
            counts["malformed"] += 1
            say(f"ERROR {exc}")
            continue
        ref, why = corpus.replay_target(entry, targets=targets, engines=engines)
        if ref is None:
            counts["skipped"] += 1
            say(f"skip  {path}: {why}")
            continue
        written = write_test(failure_of(entry), directory, ref, timeout_s=TIMEOUT_S, origin=str(path), key=entry.id,
                             device=entry.device)
        counts["written"] += 1
        say(f"wrote {written}: {entry.contract}/{ref.spec} {entry.property}")
    say(f"{len(found)} corpus entries: {counts['written']} tests written to {directory}, {counts['skipped']} skipped, "
        f"{counts['malformed']} malformed")
    return counts
