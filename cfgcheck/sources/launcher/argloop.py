"""A launch script's argument loop, followed over the arguments given after ``--`` (never
run): the shapes published scripts use to read ``-m MODEL`` / ``--model MODEL`` /
``--model=MODEL``.

- ``while [[ "$1" != "" ]]`` / ``while [ $# -gt 0 ]`` / ``while (( $# ))`` around
  ``case $1 in PATTERN) ...;; esac`` (Qwen's ``finetune/*.sh``): the arms assign from ``$1``,
  ``$2`` or ``${1#*=}`` and ``shift`` / ``shift 2``;
- ``for ARG in "$@"`` around ``case $ARG in --model=*) VAR="${ARG#*=}" ;; esac``;
- ``while getopts "m:d:" opt`` around ``case $opt in m) MODEL=$OPTARG ;; esac`` (bash's
  ``getopts``: options until the first word that is not one, or ``--``; a letter followed by
  ``:`` takes the next word, or the rest of its own), and ``shift $((OPTIND-1))`` after it.

An arm may assign (``VAR=...``, ``export VAR=...``), ``shift [N]``, ``break``, ``echo`` /
``printf`` / ``:``; an arm that runs ``exit`` ends the script (no training: one line). Anything
else (a function call, an array append, ``set --``) cannot be followed: every variable the
loop assigns becomes an unknown value naming the loop, never a wrong value.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from cfgcheck.errors import ConfigLoadError

Token = tuple[str, int]  # text, line; "\n" ends a line
MAX_STEPS = 10_000
_PARAM = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9])(##|#|%%|%)([^}]*)\}")
_PLAIN = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*|[0-9#])\}|([A-Za-z_][A-Za-z0-9_]*|[0-9#]))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
IGNORED = frozenset({"echo", "printf", ":", "true"})


class CannotFollow(Exception):
    """The loop has a shape or a command this reader does not follow."""


@dataclass
class Arm:
    patterns: list[str]
    body: list[list[Token]]  # commands


@dataclass
class Loop:
    kind: str  # "while", "for" or "getopts"
    var: str | None  # the for loop's variable, getopts' name
    subject: str  # the case's word, as written ($1, $ARG)
    optstring: str = ""  # getopts' options
    consumed: int = 0  # the words getopts read (OPTIND - 1), once run
    arms: list[Arm] = field(default_factory=list)
    after: list[list[Token]] = field(default_factory=list)  # commands after esac (shift)
    assigned: list[str] = field(default_factory=list)  # every VAR the loop assigns


def _commands(tokens: list[Token]) -> list[list[Token]]:
    out: list[list[Token]] = [[]]
    for tok in tokens:
        if tok[0] in ("\n", ";"):
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


def parse(tokens: list[Token]) -> Loop:
    """The loop of ``tokens`` (from ``while``/``for`` to its ``done``)."""
    words = [t for t in tokens if t[0] != "\n"]
    texts = [t[0] for t in words]
    if "case" not in texts or texts.count("case") != 1 or "esac" not in texts:
        raise CannotFollow("no single case block")
    if texts[:2] == ["while", "getopts"] and len(texts) > 3:
        loop = Loop("getopts", texts[3], "", optstring=texts[2].lstrip(":"))
    elif texts[0] == "for":
        if len(texts) < 4 or texts[2] != "in" or texts[3] not in ("$@", "${@}"):
            raise CannotFollow("a for loop over something else than the arguments")
        loop = Loop("for", texts[1], "")
    elif texts[0] in ("while", "until"):
        head = " ".join(texts[1 : texts.index("do")]) if "do" in texts else ""
        if texts[0] == "until" or not ("$1" in head or "$#" in head):
            raise CannotFollow("a while loop that does not test the arguments")
        loop = Loop("while", None, "")
    else:
        raise CannotFollow("not a loop")
    start = next(i for i, t in enumerate(tokens) if t[0] == "case")
    end = max(i for i, t in enumerate(tokens) if t[0] == "esac")
    if start + 2 >= len(tokens) or tokens[start + 2][0] != "in":
        raise CannotFollow("case without in")
    loop.subject = tokens[start + 1][0]
    i = start + 3
    while i < end:
        while i < end and tokens[i][0] in ("\n", ";;"):
            i += 1
        if i >= end:
            break
        pattern: list[str] = []
        while i < end:
            text = tokens[i][0]
            i += 1
            if text == "\n":
                continue
            if text.endswith(")"):
                if text[:-1]:
                    pattern.append(text[:-1])
                break
            if text != "|" and text != "(":
                pattern.append(text.lstrip("("))
        body: list[Token] = []
        while i < end and tokens[i][0] != ";;":
            body.append(tokens[i])
            i += 1
        loop.arms.append(Arm([p for p in pattern if p], _commands(body)))
    tail = tokens[end + 1 :]
    done = max((k for k, t in enumerate(tail) if t[0] == "done"), default=len(tail))
    loop.after = _commands(tail[:done])
    for command in [c for arm in loop.arms for c in arm.body] + loop.after:
        first = command[0][0] if command[0][0] != "export" or len(command) < 2 else command[1][0]
        name, sep, _ = first.partition("=")
        if sep and _NAME.match(name) and name not in loop.assigned:
            loop.assigned.append(name)
    return loop


def run(
    loop: Loop,
    positional: list[str],
    assign: Callable[[str, str, int], None],
    where: str,
) -> list[str]:
    """Follow ``loop`` over ``positional``; ``assign(name, value, line)`` binds each
    assignment. Returns the arguments left after it (``shift`` consumed the others)."""
    args = list(positional)
    items = list(args) if loop.kind == "for" else []
    options: list[tuple[str, str]] = []
    if loop.kind == "getopts":
        options, loop.consumed = getopts(loop.optstring, args)
    steps = 0
    while True:
        if loop.kind == "getopts":
            if not options:
                return args
            opt, optarg = options.pop(0)
            current = opt
        elif loop.kind == "for":
            if not items:
                return args
            current = items.pop(0)
        else:
            if not args:
                return args
            current = args[0]
        steps += 1
        if steps > MAX_STEPS:
            raise CannotFollow("the loop does not end")
        local = {loop.var: current} if loop.var else {}
        if loop.kind == "getopts":
            local["OPTARG"] = optarg
        subject = _expand(loop.subject, args, local)
        arm = next((a for a in loop.arms if any(_match(subject, p) for p in a.patterns)), None)
        commands = (arm.body if arm else []) + loop.after
        for command in commands:
            outcome = _command(command, args, local, assign, where)
            if outcome == "break":
                return args
            if isinstance(outcome, list):
                args = outcome


def getopts(optstring: str, args: list[str]) -> tuple[list[tuple[str, str]], int]:
    """(option, its argument) pairs as bash's ``getopts OPTSTRING`` yields them over ``args``
    ("?" for a letter it does not know or a missing argument), and how many words it read."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        j = 1
        while j < len(word):
            letter = word[j]
            at = optstring.find(letter) if letter != ":" else -1
            if at < 0:
                out.append(("?", ""))
                j += 1
                continue
            if optstring[at + 1 : at + 2] == ":":
                if j + 1 < len(word):
                    out.append((letter, word[j + 1 :]))
                elif i + 1 < len(args):
                    i += 1
                    out.append((letter, args[i]))
                else:
                    out.append(("?", ""))
                break
            out.append((letter, ""))
            j += 1
        i += 1
    return out, i


def _match(value: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(value, pattern)


def _expand(text: str, args: list[str], local: dict[str, str]) -> str:
    def value(name: str) -> str:
        if name == "#":
            return str(len(args))
        if name.isdigit():
            index = int(name) - 1
            return args[index] if 0 <= index < len(args) else ""
        if name in local:
            return local[name]
        raise CannotFollow(f"${name} in the loop")

    def param(m: re.Match[str]) -> str:
        base, op, pattern = value(m.group(1)), m.group(2), m.group(3)
        cuts = [k for k in range(len(base) + 1)]
        if op.startswith("#"):
            fits = [k for k in cuts if fnmatch.fnmatchcase(base[:k], pattern)]
            k = (max if op == "##" else min)(fits, default=0)
            return base[k:]
        fits = [k for k in cuts if fnmatch.fnmatchcase(base[k:], pattern)]
        k = (min if op == "%%" else max)(fits, default=len(base))
        return base[:k]

    text = _PARAM.sub(param, text)
    return _PLAIN.sub(lambda m: value(m.group(1) or m.group(2)), text)


def _command(
    command: list[Token],
    args: list[str],
    local: dict[str, str],
    assign: Callable[[str, str, int], None],
    where: str,
) -> list[str] | str | None:
    words = [t[0] for t in command]
    line = command[0][1]
    if words[0] == "shift":
        n = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
        if len(words) > 1 and not words[1].isdigit():
            raise CannotFollow("shift by a variable")
        return args[n:]
    if words[0] == "break":
        return "break"
    if words[0] == "exit":
        raise ConfigLoadError(
            f"{where}:{line}: with the script arguments given, the script's argument loop "
            f"exits here (exit {' '.join(words[1:]) or '0'}): it launches no training"
        )
    if words[0] in IGNORED:
        return None
    if words[0] == "export":
        words = words[1:]
    for word in words:
        name, sep, value = word.partition("=")
        if not (sep and _NAME.match(name)):
            raise CannotFollow(f"the command {words[0]}")
        assign(name, _expand(value, args, local), line)
    return None


__all__ = ["CannotFollow", "Loop", "parse", "run"]
