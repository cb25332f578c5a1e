"""The page: the form, then the verdict (findings as ``cfgcheck check`` gives them, each on
its line of the pasted file), the memory panel and a shareable link; all text escaped by
:mod:`cfgcheck.service.web.render`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cfgcheck.findings import CheckResult, Finding, Location
from cfgcheck.memory import devices
from cfgcheck.memory.estimate import GIB
from cfgcheck.service.web import form as forms
from cfgcheck.service.web.bar import stacked_bar
from cfgcheck.service.web.memory import Panel
from cfgcheck.service.web.render import Markup, escape, fill, join, tag, void


@dataclass(frozen=True)
class Outcome:
    """What one check produced: the verdict and its memory panel, or why it was refused."""

    result: CheckResult | None = None
    panel: Panel | None = None
    status: int = 200
    detail: str = ""


@dataclass(frozen=True)
class Presets:
    """The server's own config-group options (read once, from its config directory)."""

    groups: dict[str, tuple[str, ...]]


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def _options(choices: Sequence[tuple[str, str]], chosen: str) -> Markup:
    return join(tag("option", label, value=value, selected=value == chosen) for value, label in choices)


def _select(name: str, label: str, choices: Sequence[tuple[str, str]], chosen: str) -> Markup:
    return join(
        [
            Markup('<div class="row">'),
            tag("label", label, for_=name),
            Markup(f'<select id="{escape(name)}" name="{escape(name)}">'),
            _options(choices, chosen),
            Markup("</select></div>"),
        ]
    )


def _input(name: str, label: str, value: str, **attrs: object) -> Markup:
    field = void("input", id=name, name=name, value=value, **attrs)
    return join([Markup('<div class="row">'), tag("label", label, for_=name), field, Markup("</div>")])


def render_form(form: forms.PageForm, presets: Presets) -> Markup:
    default = [("", "(as the config has it)")]
    groups = join(
        _select(g, f"{g.capitalize()} preset", default + [(o, o) for o in presets.groups.get(g, ())], getattr(form, g))
        for g in forms.GROUPS
    )
    labels = {
        "finetuning": "Method",
        "precision": "Precision",
        "optimizer": "Optimizer",
        "strategy": "Sharding strategy",
        "checkpointing": "Gradient checkpointing",
    }
    knobs = [
        _select(name, labels[name], default + [(c, c) for c in choices], getattr(form, name))
        for name, (_, choices) in forms.CHOICES.items()
    ]
    numbers = {
        "micro_batch_size": "Micro batch size",
        "max_seq_length": "Sequence length",
        "lora_rank": "LoRA rank",
        "devices": "GPUs per node",
    }
    knobs += [
        _input(name, numbers[name], getattr(form, name), type="number", min=low, max=high, inputmode="numeric")
        for name, (_, low, high) in forms.NUMBERS.items()
    ]
    knobs.append(
        _input("lora_targets", "LoRA targets (comma-separated)", form.lora_targets, placeholder="q_proj, v_proj")
    )
    gpus = [("", "(as the config has it)")] + [
        (g.name, f"{g.name} ({g.memory_gib:.0f} GiB)") for g in devices.GPUS
    ]
    return fill(
        "form.html",
        paste_checked=Markup(" checked" if form.mode == "paste" else ""),
        preset_checked=Markup(" checked" if form.mode == "preset" else ""),
        formats=_options(list(forms.FORMATS.items()), form.format),
        filename=form.filename,
        config=form.config,
        groups=groups,
        knobs=join(knobs),
        gpus=_options(gpus, form.gpu),
        overrides=form.overrides,
    )


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
            + [join([_location(loc, shown), Markup(": "), tag("code", path), Markup(" set here<br>")], "") for path, loc in located]
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
        fixes=join([Markup('<ul class="fixes" aria-label="Fixes">'), *fixes, Markup("</ul>")]) if fixes else Markup(""),
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
    items = [
        tag(
            "li",
            tag("code", line or " "),
            id=f"L{n}",
            class_=f"hl hl-{marks[n]}" if n in marks else None,
        )
        for n, line in enumerate(text.split("\n"), start=1)
    ]
    return join(
        [
            Markup('<section class="file" aria-labelledby="file-title">'),
            tag("h2", shown, id="file-title"),
            Markup('<ol class="listing">'),
            join(items, ""),
            Markup("</ol></section>"),
        ]
    )


def render_memory(p: Panel) -> Markup:
    est = p.estimate
    comps = [
        join(
            [
                Markup("<tr>"),
                tag("th", c.label, scope="row"),
                tag("td", f"{c.gib:.2f}"),
                tag("td", f"{c.bytes / est.total_bytes:.1%}" if est.total_bytes else "0%"),
                tag("td", c.note),
                Markup("</tr>"),
            ],
            "",
        )
        for c in est.components
    ]
    rows = []
    for r in p.rows:
        chosen = r.name == p.gpu
        pick = tag(
            "button",
            r.name,
            type="submit",
            form="check",
            name="pick",
            value=r.name,
            class_="pick",
            aria_pressed="true" if chosen else "false",
            title=f"what makes the run fit on {r.name}",
        )
        verdict_cls = r.verdict.replace(" ", "-")
        rows.append(
            join(
                [
                    Markup(f'<tr class="{escape(verdict_cls)}{" chosen" if chosen else ""}" data-gpu="{escape(r.name)}">'),
                    Markup('<th scope="row">'),
                    pick,
                    tag("small", f" {r.note}") if r.note else Markup(""),
                    Markup("</th>"),
                    tag("td", f"{r.capacity / GIB:.1f} GiB"),
                    tag("td", f"{r.total / GIB:.2f} GiB"),
                    tag("td", r.verdict, class_="verdict"),
                    Markup("</tr>"),
                ],
                "",
            )
        )
    if p.gpu is None:
        chosen_text = tag("p", f"GPU: none ({p.where}); pick one in the table below.", class_="chosen")
    else:
        share = est.total_bytes / p.capacity if p.capacity else 0.0
        chosen_text = tag(
            "p",
            f"On {p.gpu} ({(p.capacity or 0) / GIB:.1f} GiB, {p.where}): {est.total_gib:.2f} GiB is "
            f"{share:.0%}, {p.verdict}.",
            class_=f"chosen verdict-{(p.verdict or '').replace(' ', '-')}",
            id="verdict",
        )
    return fill(
        "memory.html",
        peak=f"{est.total_gib:.2f}",
        world=f" (over {est.world_size} GPUs)" if est.world_size > 1 else "",
        phase=est.phase,
        margin=f"{est.margin:.0%}",
        upper=f"{est.upper_bytes / GIB:.2f}",
        calibration=""
        if not est.uncalibrated
        else " Not calibrated on measured runs: " + ", ".join(est.uncalibrated) + ".",
        chosen=chosen_text,
        bar=stacked_bar(est, p.capacity, p.gpu),
        components=join(comps),
        fixes=_memory_fixes(p),
        rows=join(rows),
    )


def _memory_fixes(p: Panel) -> Markup:
    if p.gpu is None or p.verdict == "fits":
        return Markup("")
    title = tag("h3", f"What makes it fit on {p.gpu}", id="fixes-title")
    if not p.fixes:
        return join(
            [
                title,
                tag(
                    "p",
                    "No single change or pair of changes fits: a GPU with more memory, more GPUs "
                    "or a smaller model.",
                ),
            ]
        )
    items = [
        fill(
            "fix.html",
            id=f"memfix-{i}",
            text=" ".join(f.overrides),
            summary=f"{f.summary}: saves {f.saved / GIB:.1f} GiB (-> {f.total / GIB:.2f} GiB per GPU, fits)",
        )
        for i, f in enumerate(p.fixes)
    ]
    return join([title, Markup('<ul class="fixes memfixes" aria-labelledby="fixes-title">'), *items, Markup("</ul>")])


def render_results(form: forms.PageForm, outcome: Outcome | None) -> Markup:
    parts: list[Markup] = []
    if form.problems:
        parts.append(
            join(
                [Markup('<div class="problems" role="alert"><p>Some inputs were left out:</p><ul>')]
                + [tag("li", p) for p in form.problems]
                + [Markup("</ul></div>")]
            )
        )
    if outcome is None:
        return join(parts)
    if outcome.result is None:
        parts.append(tag("p", f"Refused ({outcome.status}): {outcome.detail}", class_="refused", role="alert"))
        return join(parts)
    from cfgcheck.report.text import summary

    result = outcome.result
    pasted = form.mode == "paste"
    shown = forms.shown_filename(form) if pasted else None
    parts.append(tag("h2", summary(result), class_="summary ok" if result.ok else "summary bad", id="summary"))
    if result.findings:
        parts.append(
            join(
                [Markup('<ol class="findings">')]
                + [render_finding(f, i, shown) for i, f in enumerate(result.findings)]
                + [Markup("</ol>")]
            )
        )
    share = form.query()
    if len(share) + 2 <= forms.MAX_SHARE_CHARS:
        parts.append(
            join(
                [
                    Markup('<p class="share">'),
                    tag("a", "Link to these inputs", href=f"/?{share}", id="share"),
                    Markup(' <button type="button" class="copy" data-copy-link="share" hidden>Copy link</button>'),
                    tag("small", " (the inputs are in the link; nothing is stored)"),
                    Markup("</p>"),
                ],
                "",
            )
        )
    else:
        parts.append(
            tag("p", "These inputs are too long to share as a link; share the file instead.", class_="share")
        )
    if outcome.panel is not None:
        parts.append(render_memory(outcome.panel))
    if shown is not None and form.config:
        parts.append(render_listing(form.config, highlighted_lines(result, shown), shown))
    return join(parts)


def render_page(form: forms.PageForm, outcome: Outcome | None, presets: Presets) -> str:
    from cfgcheck import __version__

    return fill(
        "page.html",
        title="cfgcheck: check a training config" if outcome is None else "cfgcheck: result",
        form=render_form(form, presets),
        results=render_results(form, outcome),
        version=__version__,
    )
