"""A launch script read as far as it assigns, never run: :mod:`shlex` splits each command
(quotes, comments, ``\\`` line continuations), ``VAR=value`` / ``export VAR=value`` and
``${VAR:-default}`` are substituted, ``$1``... come from the script's arguments.

``$(...)``, backticks and variables the script never sets are :class:`Unknown` (named with
their line); control flow (``if``/``for``/``case``) is not followed: its commands are read as
written. Every token keeps the line it starts on.
"""

from __future__ import annotations

import io
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from cfgcheck.errors import ConfigLoadError

# Shell words that start control flow or end a command list: their commands are read as
# written (an `if` around a torchrun still launches it).
KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac"}
)
SEPARATORS = frozenset({";", "&", "|", "&&", "||", ";;"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_VAR = re.compile(
    r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+|@|\*)(?::?-([^}]*))?\}"
    r"|([A-Za-z_][A-Za-z0-9_]*|[0-9]|@|\*))"
)


@dataclass(frozen=True)
class Word:
    """One word of a command after substitution; ``unknown`` names what could not be read."""

    text: str
    line: int
    unknown: str | None = None


@dataclass
class Command:
    """One simple command: its words, and the ``VAR=value`` prefixes it runs with."""

    words: list[Word]
    line: int
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Script:
    file: str
    commands: list[Command] = field(default_factory=list)
    variables: dict[str, tuple[str, int]] = field(default_factory=dict)  # name -> value, line


def _logical_lines(text: str, file: str) -> list[tuple[int, str, list[int]]]:
    """(first line, text, offsets where each physical line starts) per logical line: lines
    ending in a backslash, or with a quote still open, continue on the next."""
    out: list[tuple[int, str, list[int]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start, buf, starts = i + 1, "", []
        while i < len(lines):
            line = lines[i]
            starts.append(len(buf))
            i += 1
            if line.endswith("\\") and not line.endswith("\\\\"):
                buf += line[:-1] + " "
                continue
            buf += line
            try:
                shlex.split(buf, comments=True)
            except ValueError:
                if i < len(lines):
                    buf += "\n"
                    continue
                raise ConfigLoadError(
                    f"{file}:{start}: the shell cannot be parsed: a quote opened here is never "
                    "closed"
                ) from None
            break
        out.append((start, buf, starts))
    return out


def _lex(text: str) -> list[tuple[str, int]]:
    """The words of ``text`` with the offset each starts at."""
    lexer = shlex.shlex(io.StringIO(text), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    stream = lexer.instream
    out: list[tuple[str, int]] = []
    while True:
        before = stream.tell()
        token = lexer.get_token()
        if token is None or token == lexer.eof:
            return out
        rest = text[before:]
        out.append((token, before + len(rest) - len(rest.lstrip())))


def read_script(
    text: str, file: str, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> Script:
    """Read ``text`` (see the module); raises :class:`ConfigLoadError` on an unbalanced quote."""
    script = Script(file)
    values: dict[str, tuple[str, int]] = {k: (v, 0) for k, v in (env or {}).items()}
    positional = list(args)
    for first, logical, starts in _logical_lines(text, file):
        if "<<" in logical:  # a here-document: its body is data, not commands
            continue
        words: list[Word] = []
        for token, offset in _lex(logical):
            line = first + sum(1 for s in starts[1:] if s <= offset)
            if token in SEPARATORS or set(token) <= set(";&|"):
                _finish(script, words, values)
                words = []
                continue
            words.append(_substitute(token, line, values, positional))
        _finish(script, words, values)
    script.variables = values
    return script


def _substitute(
    token: str, line: int, values: dict[str, tuple[str, int]], positional: list[str]
) -> Word:
    if "$(" in token or "`" in token:
        return Word(token, line, f"the output of a command ({token})")
    unknown: list[str] = []

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        default = m.group(2)
        if name.isdigit():
            index = int(name) - 1
            if 0 <= index < len(positional):
                return positional[index]
        elif name in ("@", "*"):
            if positional:
                return " ".join(positional)
        elif name in values:
            return values[name][0]
        if default is not None:
            return default
        unknown.append(f"${name}" if name in ("@", "*") or name.isdigit() else name)
        return m.group(0)

    text = _VAR.sub(one, token)
    if unknown:
        what = ", ".join(unknown)
        return Word(text, line, f"{what}, which the script never sets")
    return Word(text, line)


def _finish(script: Script, words: list[Word], values: dict[str, tuple[str, int]]) -> None:
    while words and words[0].text in KEYWORDS:
        words = words[1:]
    if not words:
        return
    if words[0].text in ("export", "local", "declare", "readonly"):
        for w in words[1:]:
            _assign(w, values)
        return
    env: dict[str, str] = {}
    while words and _assignment(words[0].text):
        name, _, value = words[0].text.partition("=")
        env[name] = value
        if len(words) == 1:
            _assign(words[0], values)
        words = words[1:]
    if words:
        script.commands.append(Command(words, words[0].line, env))


def _assignment(text: str) -> bool:
    name, sep, _ = text.partition("=")
    return bool(sep) and bool(_NAME.match(name))


def _assign(word: Word, values: dict[str, tuple[str, int]]) -> None:
    if _assignment(word.text):
        name, _, value = word.text.partition("=")
        if word.unknown is None:
            values[name] = (value, word.line)
        else:
            values.pop(name, None)  # read later: unknown
