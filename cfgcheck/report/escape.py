"""One line of output per line of text: control characters in user input shown as escapes.

A file name, a data path or a value can hold a newline, a carriage return or an ANSI escape.
Written raw, a newline starts a line of cfgcheck's output with whatever follows it, and a
line that starts with ``::error::`` is a GitHub Actions workflow command (the runner reads
every line a step prints); an ANSI escape rewrites the terminal. Every reporter and every
one-line error message passes user text through :func:`printable` first, so each line it
prints is one line that cfgcheck wrote.
"""

from __future__ import annotations

import re

# C0 controls (tab excepted), DEL, C1 controls, and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\x1b": "\\x1b"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def printable(text: str) -> str:
    """``text`` with every control character written as its escape (``\\n``, ``\\x1b``)."""
    return _CONTROL.sub(_escape, text)
