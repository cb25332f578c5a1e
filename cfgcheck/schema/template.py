"""Checking ``data.template`` (a ``str.format`` string over a record's fields) before it renders.

A format spec sets how wide a field is padded and how many digits it shows:
``{instruction:>30000000}`` renders every record as a 30-million-character text that the
tokenizer then takes whole (gigabytes, then an abort). A template a training run uses spells
its fields plainly (``'{instruction}\\n{input}\\n{output}'``), so padding, precision and
nested fields are bounded here, and so is attribute access (``{x.__class__}`` reads Python
internals, never a record's field). Here in the schema layer, which ``cfgcheck check``
imports, so that the check needs nothing of :mod:`cfgcheck.data` (the dataset scan), which
the fast path never imports; the renderer (:mod:`cfgcheck.data.records`) applies it too.
"""

from __future__ import annotations

import functools
import re
import string

MAX_WIDTH = 1000  # characters a field may be padded to, digits a precision may show
MAX_FIELDS = 1000  # replacement fields in one template
_NUMBER = re.compile(r"\d+")


@functools.lru_cache(maxsize=64)  # a pure function of the string: once per data section seen
def template_problem(template: str) -> str | None:
    """Why ``template`` may not render a record, or ``None``. Read with Python's own parser
    of format strings (:class:`string.Formatter`), without rendering anything."""
    try:
        fields = [
            (name, spec)
            for _, name, spec, _ in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as e:
        return f"is not a valid format string ({e})"
    if len(fields) > MAX_FIELDS:
        return f"has more than {MAX_FIELDS} fields"
    for name, spec in fields:
        shown = "{" + name + (":" + spec if spec else "") + "}"
        if len(shown) > 60:
            shown = shown[:57] + "..."
        if not name:
            return f"has a positional field {shown}; name a record field, e.g. {{text}}"
        if re.search(r"\.\s*_|\[\s*_", name):
            return f"field {shown} reads a private attribute; name a record field"
        if spec and ("{" in spec or "}" in spec):
            return f"field {shown} takes its format from another field; write it out"
        if spec and any(int(n) > MAX_WIDTH for n in _NUMBER.findall(spec)):
            return (
                f"field {shown} pads or rounds to more than {MAX_WIDTH} characters; "
                f"a record's text is rendered, not padded"
            )
    return None
