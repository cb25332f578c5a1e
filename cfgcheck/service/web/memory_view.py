"""The memory panel: the per-GPU breakdown as one stacked bar, server-rendered SVG (what
``cfgcheck memory --png`` draws, :mod:`cfgcheck.memory.plot`): one segment per component, the
estimate's stated margin dashed after them, the GPU's capacity as a line (colours from the
stylesheet, classes ``seg-0`` ... ``seg-9``, so the CSP needs no inline style); then the
components' table, the fixes for the chosen GPU and the verdict on every known GPU."""

from __future__ import annotations

from cfgcheck.memory.estimate import GIB, MemoryEstimate
from cfgcheck.service.web.memory import Panel
from cfgcheck.service.web.render import Markup, escape, fill, join, tag, void

WIDTH = 1000
HEIGHT = 56
BAR_Y = 14
BAR_H = 28


def _x(n: float, scale: float) -> str:
    return f"{n / scale * WIDTH:.2f}"


def stacked_bar(est: MemoryEstimate, capacity: int | None, gpu: str | None) -> Markup:
    """The bar; each segment carries ``data-key`` and ``data-bytes`` (its exact size), the
    SVG ``data-total-bytes`` (the per-GPU peak), so a test can add them up."""
    scale = max(est.upper_bytes, capacity or 0, 1) * 1.04
    parts: list[Markup] = []
    left = 0
    for i, c in enumerate(est.components):
        if c.bytes <= 0:
            continue
        parts.append(
            join(
                [
                    Markup(
                        f'<rect class="seg seg-{i % 10}" x="{_x(left, scale)}" y="{BAR_Y}" '
                        f'width="{_x(c.bytes, scale)}" height="{BAR_H}" '
                    ),
                    Markup(f'data-key="{escape(c.key)}" data-bytes="{c.bytes}">'),
                    tag("title", f"{c.label}: {c.gib:.2f} GiB"),
                    Markup("</rect>"),
                ],
                "",
            )
        )
        left += c.bytes
    margin = est.upper_bytes - left
    if margin > 0:
        parts.append(
            void(
                "rect",
                class_="margin",
                x=_x(left, scale),
                y=BAR_Y,
                width=_x(margin, scale),
                height=BAR_H,
            )
        )
        parts.append(Markup("</rect>"))
    if capacity is not None:
        x = _x(capacity, scale)
        parts.append(
            Markup(f'<line class="capacity" x1="{x}" x2="{x}" y1="4" y2="{HEIGHT - 4}"></line>')
        )
    label = f"estimated peak {est.total_bytes / GIB:.2f} GiB per GPU"
    if capacity is not None:
        label += f" against {gpu or 'the GPU'}'s {capacity / GIB:.1f} GiB"
    return join(
        [
            Markup(
                f'<svg class="bar" id="bar" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
                f'preserveAspectRatio="none" data-total-bytes="{est.total_bytes}" '
                f'aria-labelledby="bar-title">'
            ),
            tag("title", label, id="bar-title"),
            *parts,
            Markup("</svg>"),
            _legend(est),
        ]
    )


def _legend(est: MemoryEstimate) -> Markup:
    items = [
        join(
            [
                Markup(f'<li><span class="swatch seg-{i % 10}" aria-hidden="true"></span>'),
                tag("span", f"{c.label} {c.gib:.2f} GiB"),
                Markup("</li>"),
            ],
            "",
        )
        for i, c in enumerate(est.components)
        if c.bytes > 0
    ]
    return join([Markup('<ul class="legend" aria-hidden="true">'), *items, Markup("</ul>")], "")


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
                    Markup(
                        f'<tr class="{escape(verdict_cls)}{" chosen" if chosen else ""}" '
                        f'data-gpu="{escape(r.name)}">'
                    ),
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
        chosen_text = tag(
            "p", f"GPU: none ({p.where}); pick one in the table below.", class_="chosen"
        )
    else:
        share = est.total_bytes / p.capacity if p.capacity else 0.0
        chosen_text = tag(
            "p",
            f"On {p.gpu} ({(p.capacity or 0) / GIB:.1f} GiB, {p.where}): "
            f"{est.total_gib:.2f} GiB is {share:.0%}, {p.verdict}.",
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
        calibration=(
            ""
            if not est.uncalibrated
            else " Not calibrated on measured runs: " + ", ".join(est.uncalibrated) + "."
        )
        + (
            f" Host (CPU) memory for the offload: {est.host_bytes / GIB:.2f} GiB per process, "
            f"{est.host_node_bytes / GIB:.2f} GiB per node."
            if est.host
            else ""
        ),
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
            summary=f"{f.summary}: saves {f.saved / GIB:.1f} GiB "
            f"(-> {f.total / GIB:.2f} GiB per GPU, fits)",
        )
        for i, f in enumerate(p.fixes)
    ]
    return join(
        [
            title,
            Markup('<ul class="fixes memfixes" aria-labelledby="fixes-title">'),
            *items,
            Markup("</ul>"),
        ]
    )
