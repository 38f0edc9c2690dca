"""Text from outside (what a target raises or prints, a corpus file, a
merged report), made safe to show and to store.

One sanitiser for every writer: :func:`printable` escapes what a terminal,
an XML document or a UTF-8 file cannot take as it is (control characters
but tab and newline, lone surrogates, U+FFFE/U+FFFF) as visible
``\\x1b``/``\\ud800`` escapes, and :func:`bounded` keeps at most
``MAX_CHARS`` characters, its start and its end, with a marker saying how
many were cut. :func:`outside` does both; the execution layer applies it to
everything a target produces (``batchfuzz.execution.Outcome``), the report
writers (``batchfuzz.output``) to what they write. The README's "Targets
that raise, fork, stop or tamper" states the sizes; tests/test_outside_text.py
checks them.
"""

from __future__ import annotations

import re

MAX_CHARS = 4000  # characters kept of one text from a target (a message, an exit, a printed tail)
MAX_TRACEBACK_CHARS = 16000  # characters kept of a traceback (its frames, each message bounded by MAX_CHARS)
MAX_NAME_CHARS = 200  # characters kept of a name from a target (an exception's type)

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal, XML or UTF-8 cannot take
    as it is (a control character other than tab and newline, a lone
    surrogate, U+FFFE, U+FFFF) written as a visible escape (``\\x1b``)."""
    return _UNSAFE.sub(_escape, text)


def bounded(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters and a marker: its start
    and its end, and in between how many characters were cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]} [... {len(text) - 2 * half} characters cut ...] {text[len(text) - half:]}"


def outside(text: object, limit: int = MAX_CHARS) -> str:
    """Text from outside as batchfuzz keeps it: ``str``, bounded, printable."""
    return printable(bounded(text if isinstance(text, str) else str(text), limit))
