"""The page: the form, then the verdict (findings as ``cfgcheck check`` gives them, each on
its line of the pasted file), the memory panel and a shareable link; all text escaped by
:mod:`cfgcheck.service.web.render`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cfgcheck.findings import CheckResult
from cfgcheck.memory import devices
from cfgcheck.service.web import form as forms
from cfgcheck.service.web.findings_view import highlighted_lines, render_finding, render_listing
from cfgcheck.service.web.memory import Panel
from cfgcheck.service.web.memory_view import render_memory
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


def _options(choices: Sequence[tuple[str, str]], chosen: str) -> Markup:
    return join(
        tag("option", label, value=value, selected=value == chosen) for value, label in choices
    )


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
    return join(
        [Markup('<div class="row">'), tag("label", label, for_=name), field, Markup("</div>")]
    )


def render_form(form: forms.PageForm, presets: Presets) -> Markup:
    default = [("", "(as the config has it)")]
    groups = join(
        _select(
            g,
            f"{g.capitalize()} preset",
            default + [(o, o) for o in presets.groups.get(g, ())],
            getattr(form, g),
        )
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
        _input(
            name,
            numbers[name],
            getattr(form, name),
            type="number",
            min=low,
            max=high,
            inputmode="numeric",
        )
        for name, (_, low, high) in forms.NUMBERS.items()
    ]
    knobs.append(
        _input(
            "lora_targets",
            "LoRA targets (comma-separated)",
            form.lora_targets,
            placeholder="q_proj, v_proj",
        )
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
        parts.append(
            tag(
                "p", f"Refused ({outcome.status}): {outcome.detail}", class_="refused", role="alert"
            )
        )
        return join(parts)
    from cfgcheck.report.text import summary

    result = outcome.result
    pasted = form.mode == "paste"
    shown = forms.shown_filename(form) if pasted else None
    parts.append(
        tag(
            "h2", summary(result), class_="summary ok" if result.ok else "summary bad", id="summary"
        )
    )
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
                    Markup(
                        ' <button type="button" class="copy" data-copy-link="share" hidden>'
                        "Copy link</button>"
                    ),
                    tag("small", " (the inputs are in the link; nothing is stored)"),
                    Markup("</p>"),
                ],
                "",
            )
        )
    else:
        parts.append(
            tag(
                "p",
                "These inputs are too long to share as a link; share the file instead.",
                class_="share",
            )
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
