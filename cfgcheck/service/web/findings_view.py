"""The findings as ``cfgcheck check`` gives them (severity, rule, where each value was set,
message, hint, each fix as the pasteable fragment the text report prints), and the pasted
file with the lines they point at highlighted."""

from __future__ import annotations

from cfgcheck.findings import CheckResult, Finding, Location
from cfgcheck.service.web.render import Markup, fill, join, tag

MAX_LISTING_LINES = 5000


def _location(loc: Location, shown: str | None) -> Markup:
    """``file:line``, a link to the line of the pasted file when it is that file."""
    if shown is not None and loc.file == shown and loc.line is not None and loc.cell is None:
        return tag("a", str(loc), href=f"#L{loc.line}", class_="loc", data_line=loc.line)
    return tag("span", str(loc), class_="loc")


def render_finding(f: Finding, index: int, shown: str | None) -> Markup:
    located = [(path, loc) for path, loc in f.locations.items() if loc is not None]
    locations = (
        join(
            [Markup('<p class="where">')]
            + [
                join(
                    [
                        _location(loc, shown),
                        Markup(": "),
                        tag("code", path),
                        Markup(" set here<br>"),
                    ],
                    "",
                )
                for path, loc in located
            ]
            + [Markup("</p>")],
            "",
        )
        if located
        else Markup("")
    )
    fixes = [
        fill(
            "fix.html",
            id=f"fix-{index}-{i}",
            text="; ".join(str(e) for e in fix.edits) if fix.edits else fix.shell,
            summary=fix.summary,
        )
        for i, fix in enumerate(f.fixes)
    ]
    return fill(
        "finding.html",
        severity=f.severity,
        anchor=f"finding-{index}",
        rule=f.rule,
        paths=", ".join(f.paths),
        locations=locations,
        message=f.message,
        hint=tag("p", f"hint: {f.hint}", class_="hint") if f.hint else Markup(""),
        fixes=join([Markup('<ul class="fixes" aria-label="Fixes">'), *fixes, Markup("</ul>")])
        if fixes
        else Markup(""),
    )


def highlighted_lines(result: CheckResult, shown: str) -> dict[int, str]:
    """Line of the pasted file -> the worst severity of a finding located on it."""
    order = {"error": 0, "warning": 1, "info": 2}
    lines: dict[int, str] = {}
    for f in result.findings:
        for loc in f.locations.values():
            if loc is not None and loc.file == shown and loc.line is not None and loc.cell is None:
                old = lines.get(loc.line)
                if old is None or order[f.severity] < order[old]:
                    lines[loc.line] = f.severity
    return lines


def render_listing(text: str, marks: dict[int, str], shown: str) -> Markup:
    """The pasted file, numbered, the marked lines highlighted; at most
    :data:`MAX_LISTING_LINES` lines (a file of a million blank lines is no page)."""
    lines = text.split("\n", MAX_LISTING_LINES)
    more = len(lines) > MAX_LISTING_LINES
    items = [
        tag(
            "li",
            tag("code", line or " "),
            id=f"L{n}",
            class_=f"hl hl-{marks[n]}" if n in marks else None,
        )
        for n, line in enumerate(lines[:MAX_LISTING_LINES], start=1)
    ]
    return join(
        [
            Markup('<section class="file" aria-labelledby="file-title">'),
            tag("h2", shown, id="file-title"),
            Markup('<ol class="listing">'),
            join(items, ""),
            Markup("</ol>"),
            tag("p", f"(the listing stops at line {MAX_LISTING_LINES})") if more else Markup(""),
            Markup("</section>"),
        ]
    )
