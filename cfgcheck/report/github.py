"""``--format github``: GitHub Actions workflow commands, one annotation per finding.

``::error file=conf/data/alpaca-tiny.yaml,line=2,title=cfgcheck seq-len-over-block-size::...``
(``warning`` and ``notice`` for the other severities). The annotation sits on the first path
whose value was set in a file; other locations are listed in the message.
"""

from __future__ import annotations

from typing import TextIO

from cfgcheck.findings import CheckResult, Finding, Location, Severity
from cfgcheck.report import register
from cfgcheck.report.text import summary

COMMANDS: dict[Severity, str] = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    """Escape a workflow command's message, as GitHub's toolkit does."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow command's property value (``:`` and ``,`` too)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _in_file(location: Location | None) -> bool:
    return location is not None and not location.file.startswith("<")


def annotation(f: Finding) -> str:
    anchor = next((loc for loc in f.locations.values() if _in_file(loc)), None)
    props: list[tuple[str, str]] = []
    if anchor is not None:
        props.append(("file", anchor.file))
        if anchor.line is not None and anchor.cell is None:  # a cell's line is not the file's
            props.append(("line", str(anchor.line)))
    props.append(("title", f"cfgcheck {f.rule}"))
    lines = [f.message]
    lines += [f"{path} set at {loc}" for path, loc in f.locations.items() if loc is not None]
    if f.hint:
        lines.append(f"hint: {f.hint}")
    for fix in f.fixes:  # as the text report: each fix pastes (code edits for a run in code)
        text = "; ".join(str(e) for e in fix.edits) if fix.edits else fix.shell
        lines.append(f"fix: {text} ({fix.summary})")
    head = ",".join(f"{key}={escape_property(value)}" for key, value in props)
    return f"::{COMMANDS[f.severity]} {head}::{escape_data(chr(10).join(lines))}"


@register("github")
def report_github(result: CheckResult, out: TextIO) -> None:
    for f in result.findings:
        out.write(annotation(f) + "\n")
    out.write(summary(result) + "\n")
