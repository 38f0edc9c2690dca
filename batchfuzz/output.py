"""Every file batchfuzz writes goes through here: atomic writes (a temporary
file in the same folder, then ``os.replace``, so a reader or a killed writer
never sees half a file), JSON (numpy scalars as Python ones), Markdown tables
and JUnit documents. Reports, corpus files, state files and the commands'
``--json`` / ``--markdown`` outputs all use these functions. Text files and
JUnit documents are written printable (``batchfuzz.text.printable``: no
control character but tab and newline, no lone surrogate), whatever a
target or a merged report put in them; JSON escapes them itself."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from batchfuzz.text import printable


def _atomic(path: Path | str, write: Callable[[Any], None], *, fsync: bool = False) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; reports and corpus files are for everyone to read
        with os.fdopen(fd, "w") as fh:
            write(fh)
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def json_default(o: Any) -> Any:
    """``json.dump``'s ``default``: numpy integers, floats and booleans as Python ones."""
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_json_atomic(path: Path | str, data: Any, *, fsync: bool = True, default: Callable[[Any], Any] = json_default) -> None:
    """JSON (indent 2, a final newline) written atomically; ``fsync`` also makes
    it survive a machine crash (skipped for state rewritten many times a second);
    ``default`` is ``json.dump``'s (numpy scalars as Python ones)."""

    def write(fh: Any) -> None:
        json.dump(data, fh, indent=2, sort_keys=False, default=default)
        fh.write("\n")

    _atomic(path, write, fsync=fsync)


def write_text_atomic(path: Path | str, text: str) -> None:
    """``text`` written atomically, printable (``batchfuzz.text.printable``)."""
    _atomic(path, lambda fh: fh.write(printable(text)))


def copy_atomic(source: Path | str, dest: Path | str) -> None:
    """A copy of ``source`` at ``dest`` (mode 0644), appearing whole or not at all."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_outputs(json_path: str | None, data: Any, markdown_path: str | None = None, markdown: str | None = None,
                  say: Callable[[str], None] = print) -> None:
    """A command's ``--json`` (``data``) and ``--markdown`` (``markdown``) files, each announced (``wrote PATH``)."""
    if json_path:
        write_json_atomic(json_path, data, fsync=False)
        say(f"wrote {json_path}")
    if markdown is not None and markdown_path:
        write_text_atomic(markdown_path, markdown)
        say(f"wrote {markdown_path}")


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[Any]], align: str) -> list[str]:
    """The lines of a Markdown table; ``align`` has one letter per column: ``l`` (``---``) or ``r`` (``---:``)."""
    if len(align) != len(head):
        raise ValueError(f"align must have one letter per column ({len(head)}), got {align!r}")
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"

    def line(cells: Sequence[Any]) -> str:
        return "|" + "|".join(f" {c} " if str(c) else " " for c in cells) + "|"

    return [line(head), rule] + [line(r) for r in rows]


def junit_text(root: ET.Element) -> str:
    """A JUnit XML document (indented, with its declaration) from its root
    element; printable, so well-formed whatever its texts held (a NUL, an ESC)."""
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + printable(ET.tostring(root, encoding="unicode")) + "\n"
