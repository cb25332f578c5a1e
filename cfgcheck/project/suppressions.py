"""Inline suppressions: ``max_len: 4096  # cfgcheck: ignore[seq-len-over-block-size]``.

A finding is silenced when one of its located values (see :mod:`cfgcheck.locations`) sits on a
line that carries a suppression naming its rule (several ids: ``ignore[a, b]``). A suppression
of a file that takes part in the composition but silences nothing, names a rule id nothing
emits, or is not of the form ``ignore[...]`` is reported as an ``unused-suppression`` warning at
its line (as ruff's ``RUF100`` reports an unused ``noqa``), with a did-you-mean for a misspelled
id.

A tree without any ``# cfgcheck:`` comment costs nothing more: the composition cache notes the
files with such a comment while it reads every file for its key (without the cache, they are
read once more here). Only a tree with suppressions pays for the source map that says which
files a composition uses.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cfgcheck.findings import CheckResult, Finding, Location, sort_findings

RULE = "unused-suppression"
_COMMENT = re.compile(r"#\s*cfgcheck\s*:\s*(?P<body>.*?)\s*$")
_IGNORE = re.compile(r"^ignore\[(?P<ids>[^\]]*)\]$")


@dataclass(frozen=True)
class Suppression:
    location: Location  # the file as the source map shows it, and the line
    text: str  # the comment as written
    ids: tuple[str, ...]  # empty: malformed


def marked_files(config_dir: str | Path) -> list[Path]:
    """The YAML files under ``config_dir`` that hold a ``# cfgcheck:`` comment."""
    from cfgcheck.compose_cache import SUPPRESSION_MARK
    from cfgcheck.compose_cache import marked_files as noted
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.safeio import read_bytes

    directory = Path(config_dir)
    try:
        seen = noted(directory.resolve())
    except (OSError, RuntimeError):
        seen = None
    if seen is not None:
        return seen
    out: list[Path] = []
    try:
        files = sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml"))
    except OSError:
        return []
    for path in files:
        try:
            if SUPPRESSION_MARK.search(read_bytes(path)):
                out.append(path)
        except (ConfigLoadError, OSError):
            continue  # the composition reports an unreadable file
    return out


def parse(path: Path, shown: str) -> list[Suppression]:
    from cfgcheck.safeio import read_text

    found: list[Suppression] = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        match = _COMMENT.search(line)
        if match is None:
            continue
        body = match.group("body")
        ids_match = _IGNORE.match(body)
        ids = (
            tuple(i.strip() for i in ids_match.group("ids").split(",") if i.strip())
            if ids_match
            else ()
        )
        found.append(Suppression(Location(shown, number), f"# cfgcheck: {body}", ids))
    return found


def apply_suppressions(
    result: CheckResult,
    config_dir: str | Path,
    config_name: str,
    overrides: Sequence[str] = (),
) -> CheckResult:
    """``result`` with suppressed findings dropped and ``unused-suppression`` warnings added
    (its findings must already carry their locations)."""
    marked = marked_files(config_dir)
    if not marked:
        return result
    from cfgcheck.compose import compose_errors
    from cfgcheck.locations import display_path, source_map

    try:
        smap = source_map(config_dir, config_name, overrides)
    except compose_errors(OSError, ValueError):
        return result
    composed = {loc.file for loc in smap.entries.values()}
    keys = {(loc.file, loc.line): path for path, loc in smap.entries.items()}
    suppressions = [
        s
        for path in marked
        if (shown := display_path(path.resolve())) in composed
        for s in parse(path, shown)
    ]
    if not suppressions:
        return result
    by_line: dict[tuple[str, int | None], list[Suppression]] = {}
    for s in suppressions:
        by_line.setdefault((s.location.file, s.location.line), []).append(s)
    used: set[tuple[Location, str]] = set()
    kept: list[Finding] = []
    for f in result.findings:
        silenced = False
        for loc in f.locations.values():
            if loc is None:
                continue
            for s in by_line.get((loc.file, loc.line), []):
                if f.rule in s.ids:
                    used.add((s.location, f.rule))
                    silenced = True
        if not silenced:
            kept.append(f)
    kept += _unused(suppressions, used, keys)
    return dataclasses.replace(result, findings=sort_findings(kept))


def _unused(
    suppressions: Sequence[Suppression],
    used: set[tuple[Location, str]],
    keys: dict[tuple[str, int | None], str],
) -> list[Finding]:
    from cfgcheck.project.settings import known_rule_ids

    known = known_rule_ids()
    out: list[Finding] = []
    for s in suppressions:
        path = keys.get((s.location.file, s.location.line), str(s.location))
        where = {path: s.location}
        if not s.ids:
            out.append(
                Finding(
                    RULE,
                    "warning",
                    (path,),
                    f"{s.text!r} is not a suppression cfgcheck reads: it silences nothing",
                    "write `# cfgcheck: ignore[rule-id]` (several: `ignore[a, b]`); "
                    "`cfgcheck rules` lists the ids",
                    locations=where,
                )
            )
            continue
        for rule_id in s.ids:
            if (s.location, rule_id) in used:
                continue
            if rule_id not in known:
                close = difflib.get_close_matches(rule_id, known, n=1)
                hint = (
                    f"did you mean ignore[{close[0]}]?"
                    if close
                    else "`cfgcheck rules` lists the rule ids"
                )
                message = f"suppression of unknown rule id {rule_id!r}: it silences nothing"
            else:
                message = (
                    f"unused suppression ignore[{rule_id}]: no {rule_id} finding has a value "
                    f"on this line"
                )
                hint = f"remove ignore[{rule_id}] from the comment"
            out.append(Finding(RULE, "warning", (path,), message, hint, locations=where))
    return out
