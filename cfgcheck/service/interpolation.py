"""Finding OmegaConf resolver calls (``${oc.env:...}``, ``${any.custom:...}``) in strings.

The service never lets a resolver run on input it did not write: a resolver can read the
server's environment (``oc.env``), decode and build values (``oc.decode``, ``oc.create``) or
run whatever a plugin registered. Plain node references (``${name}``) only read the config
itself and are harmless.
"""

from __future__ import annotations

from typing import Any

# Bounds on what reaches OmegaConf's grammar parser (about 20 µs a character, recursive).
MAX_PARSED_CHARS = 2_000
MAX_INTERPOLATIONS = 16


def uses_resolver(text: str) -> bool:
    """True if OmegaConf would call a resolver to resolve ``text``.

    A string OmegaConf cannot parse as an interpolation but that contains ``${`` counts as a
    resolver call too: refusing is the safe answer for text no one can resolve.
    """
    if "${" not in text:
        return False
    from omegaconf import grammar_parser
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar.gen.OmegaConfGrammarParser import OmegaConfGrammarParser

    if len(text) > MAX_PARSED_CHARS or text.count("${") > MAX_INTERPOLATIONS:
        return True  # not parsed: the grammar parser is slow and recursive on such text
    try:
        tree = grammar_parser.parse(text)
    except (GrammarParseError, RecursionError):
        return True
    return _has_resolver(tree, OmegaConfGrammarParser.InterpolationResolverContext)


def _has_resolver(node: Any, resolver_type: type) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, resolver_type):
            return True
        stack.extend(getattr(current, "children", None) or ())
    return False


def resolver_paths(tree: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every string in a plain tree (dicts/lists) that calls a resolver."""
    found: list[str] = []
    stack: list[tuple[str, Any]] = [(prefix, tree)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if uses_resolver(value):
                found.append(path or "<root>")
        elif isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
    return sorted(found)
