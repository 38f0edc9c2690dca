"""The one place where a database URL, or a command line holding one, is made printable.

A Redis URL may carry a password (``redis://[USER]:PASSWORD@HOST...``, or a
``password=`` query parameter, which the redis client reads too). Every
writer of what a run says or keeps (messages, ``repr`` of a database, the
start-up line, ``summary.json``, ``.run/job.json``, the observability
records' ``sys.argv``, merged reports) goes through :func:`printable`, so the
password is replaced by ``***`` everywhere. A leaf module: it imports nothing
of batchfuzz, so every layer may use it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

HIDDEN = "***"
# SCHEME://[USER]:PASSWORD@ up to the netloc's last @ (an unescaped @ in the password is hidden too)
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:)[^/\s]*@")
# ?password=... or &password=... (the redis client's query parameter), up to the next & or the end of the word
_QUERY = re.compile(r"([?&]password=)[^&\s]*", re.IGNORECASE)


def printable(text: str) -> str:
    """``text`` (a database URL, or any text holding one) with every password
    replaced by ``***``; text without one comes back unchanged. Never raises."""
    if not isinstance(text, str):
        text = str(text)
    if "://" not in text:
        return text
    return _QUERY.sub(rf"\g<1>{HIDDEN}", _USERINFO.sub(rf"\g<1>{HIDDEN}@", text))


def printable_argv(argv: Sequence[str]) -> list[str]:
    """A command line with :func:`printable` applied to each word (``--database URL``
    and ``--database=URL`` alike)."""
    return [printable(word) for word in argv]
