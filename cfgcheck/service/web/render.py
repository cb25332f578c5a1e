"""A tiny escaping template renderer: :class:`string.Template` files of this package whose every
value is HTML-escaped unless it is :class:`Markup` (a fragment this renderer produced).

A value a request sent (a config's text, a message quoting one of its values) can only reach
the page through :func:`fill` or :func:`escape`, so ``<script>`` in a config is shown as text.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from functools import cache
from importlib import resources
from string import Template


class Markup(str):
    """HTML that is safe to insert as it is: built by :func:`fill`, :func:`escape` or
    :func:`join` from escaped values (never construct one from request data)."""

    __slots__ = ()


def escape(value: object) -> Markup:
    """``value`` as text in HTML (``& < > " '`` escaped); :class:`Markup` is kept."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(str(value), quote=True))


def join(parts: Iterable[object], sep: str = "\n") -> Markup:
    """The parts, each escaped unless it is :class:`Markup`, joined by ``sep`` (a constant)."""
    return Markup(sep.join(escape(p) for p in parts))


@cache
def template(name: str) -> Template:
    """A template file of ``cfgcheck/service/web/templates/`` (package data)."""
    text = resources.files("cfgcheck.service.web").joinpath("templates", name).read_text("utf-8")
    return Template(text)


def fill(name: str, **values: object) -> Markup:
    """Template ``name`` with ``values`` escaped (every placeholder must be given)."""
    return Markup(template(name).substitute({k: escape(v) for k, v in values.items()}))


def tag(name: str, text: object = "", /, **attrs: object) -> Markup:
    """``<name attr="...">text</name>``, attributes and text escaped; ``True`` writes a bare
    attribute, ``None``/``False`` leaves it out; a trailing ``_`` is dropped (``class_``) and
    ``_`` is written ``-`` (``data_line``, ``aria_label``)."""
    return Markup(f"{void(name, **attrs)}{escape(text)}</{name}>")


def void(name: str, /, **attrs: object) -> Markup:
    """An element without content (``<input ...>``), attributes as :func:`tag` writes them."""
    parts = [name]
    for key, value in attrs.items():
        key = key.rstrip("_").replace("_", "-")
        if value is True:
            parts.append(key)
        elif value is not None and value is not False:
            parts.append(f'{key}="{escape(value)}"')
    return Markup(f"<{' '.join(parts)}>")
