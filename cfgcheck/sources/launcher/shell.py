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
OPENERS = frozenset({"if", "for", "while", "until", "case"})
CLOSERS = frozenset({"fi", "done", "esac"})
SEPARATORS = frozenset({";", "&", "|", "&&", "||", ";;"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_SLICE = re.compile(r"\$\{@:([0-9]+)\}")
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
    marked: str = ""  # the text with the markers of unknown values (for assignments)
    arg: int = 0  # the script argument (1-based) a "$@" expansion took it from

    @property
    def raw(self) -> str:
        return self.marked or self.text


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
    reasons: dict[str, str] = field(default_factory=dict)  # marker -> why it is unknown
    depth: int = 0  # inside how many if/for/while/case blocks (their bodies may not run)
    # The script's arguments still to be read ($1 $2 ... and "$@"), each with its number
    # among those given; ``args_unknown`` says why they are not known (a loop not followed).
    positional: list[tuple[int, str]] = field(default_factory=list)
    args_unknown: str | None = None
    optind: int | None = None  # OPTIND - 1 after a getopts loop: what `shift $((OPTIND-1))` drops


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
                shlex.split(buf.replace("$#", "$" + _COUNT), comments=True)
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


_COUNT = "\x01"  # stands for the # of $# while lexing (shlex would start a comment there)


def _lex(text: str) -> list[tuple[str, int]]:
    """The words of ``text`` with the offset each starts at (``$#``, the argument count, is a
    word: bash starts a comment only at a word's start)."""
    text = text.replace("$#", "$" + _COUNT)
    stream = io.StringIO(text)
    lexer = shlex.shlex(stream, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    out: list[tuple[str, int]] = []
    while True:
        before = stream.tell()
        token = lexer.get_token()
        if token is None or token == lexer.eof:
            return out
        rest = text[before:]
        out.append((token.replace(_COUNT, "#"), before + len(rest) - len(rest.lstrip())))


def read_script(
    text: str, file: str, args: Sequence[str] = (), env: dict[str, str] | None = None
) -> Script:
    """Read ``text`` (see the module); raises :class:`ConfigLoadError` on an unbalanced quote."""
    script = Script(file)
    values: dict[str, tuple[str, int]] = {k: (v, 0) for k, v in (env or {}).items()}
    script.positional = list(enumerate(args, 1))
    lines = _logical_lines(text, file)
    i = 0
    while i < len(lines):
        first, logical, starts = lines[i]
        i += 1
        if "<<" in logical:  # a here-document: its body is data, not commands
            continue
        logical = _commands_out(logical, script)
        lexed = _lex(logical)
        if lexed and lexed[0][0] in ("while", "until", "for") and not script.depth:
            end = _loop_end(lines, i - 1)
            if end is not None and _argument_loop(script, lines[i - 1 : end], values):
                i = end
                continue
        words: list[Word] = []
        for token, offset in lexed:
            line = first + sum(1 for s in starts[1:] if s <= offset)
            if token in SEPARATORS or set(token) <= set(";&|"):
                _finish(script, words, values)
                words = []
                continue
            words += _substitute(token, line, values, script)
        _finish(script, words, values)
    script.variables = values
    return script


def _tokens(lines: list[tuple[int, str, list[int]]], script: Script) -> list[tuple[str, int]]:
    """The words of ``lines`` with their lines, "\n" between logical lines (unsubstituted)."""
    out: list[tuple[str, int]] = []
    for first, logical, starts in lines:
        for token, offset in _lex(_commands_out(logical, script)):
            out.append((token, first + sum(1 for s in starts[1:] if s <= offset)))
        out.append(("\n", first))
    return out


def _loop_end(lines: list[tuple[int, str, list[int]]], start: int) -> int | None:
    """The index after the logical line holding the ``done`` of the loop at ``start``."""
    depth = 0
    for k in range(start, len(lines)):
        for token, _offset in _lex(lines[k][1]):
            if token in ("do",):
                depth += 1
            elif token == "done":
                depth -= 1
                if depth == 0:
                    return k + 1
    return None


def _argument_loop(
    script: Script, lines: list[tuple[int, str, list[int]]], values: dict[str, tuple[str, int]]
) -> bool:
    """Follow an argument loop over the script's arguments (:mod:`.argloop`); False when the
    loop is not one (it is then read as written)."""
    from cfgcheck.sources.launcher import argloop

    tokens = _tokens(lines, script)
    head = " ".join(
        t for t, _ in tokens[: next((k for k, t in enumerate(tokens) if t[0] == "do"), 0)]
    )
    if not any(k in head for k in ("$1", "$#", "$@", "${@}", "getopts")):
        return False
    launchers = ("torchrun", "deepspeed", "accelerate", "python")
    if any(t.rsplit("/", 1)[-1].startswith(launchers) for t, _ in tokens):
        return False  # a loop that launches training per argument: read as written
    line = lines[0][0]
    if not script.positional and script.args_unknown is None:
        script.optind = 0 if "getopts" in head else script.optind
        return True  # no arguments: the loop's body never runs
    try:
        loop = argloop.parse(tokens)
        if script.args_unknown is not None:
            raise argloop.CannotFollow(script.args_unknown)

        def assign(name: str, value: str, at: int) -> None:
            values[name] = (value, at)

        left = argloop.run(loop, [a for _, a in script.positional], assign, script.file)
        script.positional = script.positional[len(script.positional) - len(left) :]
        if loop.kind == "getopts":
            script.optind = loop.consumed
    except argloop.CannotFollow as e:
        why = f"the argument loop at line {line}, which cfgcheck does not follow ({e})"
        for name in _assigned(tokens):
            key = f"argloop:{name}"
            script.reasons[key] = f"${name}, set by {why}"
            values[name] = (f"{_MARK}{key}{_MARK}", line)
        texts = [t for t, _ in tokens]
        if texts[0] != "for" or "shift" in texts or "set" in texts:
            # a for loop that does not shift leaves the arguments as they were
            script.args_unknown = f"the script's arguments after {why}"
            script.positional = []
    return True


def _assigned(tokens: list[tuple[str, int]]) -> list[str]:
    out: list[str] = []
    for token, _line in tokens:
        name, sep, _ = token.partition("=")
        if sep and _NAME.match(name) and name not in out:
            out.append(name)
    return out


_MARK = "\x00"  # a value the script computes when it runs: MARK name MARK


def _commands_out(text: str, script: Script) -> str:
    """``$(...)`` and backticks replaced by a marker naming the command (never run)."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$(", i) or text[i] == "`":
            if text[i] == "`":
                close = text.find("`", i + 1)
                end = len(text) if close < 0 else close + 1
            else:
                depth, end = 0, i + 1
                while end < len(text):
                    depth += {"(": 1, ")": -1}.get(text[end], 0)
                    end += 1
                    if depth == 0:
                        break
            key = f"cmd{len(script.reasons)}"
            shown = " ".join(text[i:end].split())
            script.reasons[key] = f"the output of a command ({shown[:60]})"
            out.append(f"{_MARK}{key}{_MARK}")
            i = end
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _substitute(
    token: str,
    line: int,
    values: dict[str, tuple[str, int]],
    script: Script,
) -> list[Word]:
    positional = [a for _, a in script.positional]
    if token in ("$@", "${@}", "$*", "${*}"):
        if script.args_unknown is not None:
            script.reasons["$@"] = script.args_unknown
            return [_word(f"{_MARK}$@{_MARK}", line, script)]
        # "$@": one word per argument left (none when the script was given none)
        return [Word(a, line, arg=n) for n, a in script.positional]
    sliced = _SLICE.fullmatch(token)
    if sliced:  # "${@:3}": the arguments from the third on
        if script.args_unknown is not None:
            script.reasons["$@"] = script.args_unknown
            return [_word(f"{_MARK}$@{_MARK}", line, script)]
        skip = max(0, int(sliced.group(1)) - 1)
        return [Word(a, line, arg=n) for n, a in script.positional[skip:]]

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        default = m.group(2)
        if script.args_unknown is not None and (name.isdigit() or name in ("@", "*")):
            script.reasons[f"${name}"] = script.args_unknown
            return f"{_MARK}${name}{_MARK}"
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
        shown = f"${name}"
        script.reasons.setdefault(shown, f"{shown}, which the script never sets")
        return f"{_MARK}{shown}{_MARK}"

    text = _VAR.sub(one, token)
    # An unquoted expansion alone splits into words (DISTRIBUTED_ARGS="--nproc_per_node 8 ...").
    pieces = text.split() if _VAR.fullmatch(token) and text.strip() else [text]
    return [_word(p, line, script) for p in pieces]


def _word(text: str, line: int, script: Script) -> Word:
    if _MARK not in text:
        return Word(text, line)
    parts = text.split(_MARK)
    keys = parts[1::2]
    plain = "".join(
        part if i % 2 == 0 else (part if part.startswith("$") else "$(...)")
        for i, part in enumerate(parts)
    )
    why = "; ".join(dict.fromkeys(script.reasons.get(k, k) for k in keys))
    return Word(plain, line, why, text)


def _finish(script: Script, words: list[Word], values: dict[str, tuple[str, int]]) -> None:
    if len(words) > 1 and words[0].text == "for" and _NAME.match(words[1].text):
        name, key = words[1].text, f"loop:{words[1].text}"
        script.reasons[key] = f"${name}, a loop variable (line {words[0].line})"
        values[name] = (f"{_MARK}{key}{_MARK}", words[0].line)
    while words and words[0].text in KEYWORDS:
        if words[0].text in OPENERS:
            script.depth += 1
        elif words[0].text in CLOSERS:
            script.depth = max(0, script.depth - 1)
        words = words[1:]
    for w in words[1:]:  # `... ; done`, `esac` after a command on the same line
        if w.text in CLOSERS:
            script.depth = max(0, script.depth - 1)
    if not words:
        return
    if words[0].text == "shift" and not script.depth:  # the script's own arguments, shifted
        count = words[1].text if len(words) > 1 else "1"
        unknown = words[1].unknown if len(words) > 1 else None
        if unknown and "OPTIND" in unknown and script.optind is not None:
            count = str(script.optind)  # shift $((OPTIND-1)) after getopts
        if count.isdigit():
            script.positional = script.positional[int(count) :]
        else:
            script.args_unknown = (
                f"the script's arguments after shift {count} (line {words[0].line})"
            )
        return
    if words[0].text in ("export", "local", "declare", "readonly"):
        for w in words[1:]:
            _assign(w, values, script.depth)
        return
    env: dict[str, str] = {}
    while words and _assignment(words[0].text):
        name, _, value = words[0].text.partition("=")
        env[name] = value
        if len(words) == 1:
            _assign(words[0], values, script.depth)
        words = words[1:]
    if words:
        script.commands.append(Command(words, words[0].line, env))


def _assignment(text: str) -> bool:
    name, sep, _ = text.partition("=")
    return bool(sep) and bool(_NAME.match(name))


def _assign(word: Word, values: dict[str, tuple[str, int]], depth: int) -> None:
    """Bind ``VAR=value``; inside a block whose body may not run (Qwen's ``while``/``case``
    over ``$1``), an unknown value keeps what the script set before the block."""
    if _assignment(word.text):
        name, _, value = word.raw.partition("=")
        if word.unknown is None or not depth:
            values[name] = (value, word.line)  # an unknown one keeps its marker
