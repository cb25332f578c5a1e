"""The memory breakdown as one stacked bar, server-rendered SVG (what ``cfgcheck memory --png``
draws, :mod:`cfgcheck.memory.plot`): one segment per component, the estimate's stated margin
hatched after them, and the GPU's capacity as a line. Colours come from the stylesheet
(classes ``seg-0`` ... ``seg-9``), so the page's CSP needs no inline style."""

from __future__ import annotations

from cfgcheck.memory.estimate import GIB, MemoryEstimate
from cfgcheck.service.web.render import Markup, escape, join, tag, void

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
        parts.append(Markup(f'<line class="capacity" x1="{x}" x2="{x}" y1="4" y2="{HEIGHT - 4}"></line>'))
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
