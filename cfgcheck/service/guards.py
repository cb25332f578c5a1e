"""Checks on a parsed request body before any validation work: size of the tree, JSON-only
types, string keys, and no interpolation at all.

A submitted config is data: every string holding ``${`` is refused by a plain substring test
(linear, microseconds), before anything hands it to OmegaConf's grammar parser, which costs
about 20 µs a character and recurses on nested interpolations. Only the server's own conf/
files may interpolate (screened for resolver calls after composition).
"""

from __future__ import annotations

from typing import Any

from cfgcheck.service.errors import RequestError

_SCALARS = (str, int, float, bool, type(None))
# Keys of one mapping. Unknown keys past 20 are one finding anyway (cfgcheck.validate), but a
# body of 19,000 of them still cost 0.15 s of CPU to validate, and four clients sending it in
# a loop held every worker: refused here, in microseconds, before validation.
MAX_KEYS_PER_MAPPING = 1_000


def check_tree(tree: Any, max_depth: int, max_nodes: int) -> None:
    """Raise :class:`RequestError` (422) naming the first offending path.

    Iterative, so a deeply nested or self-referencing YAML document (anchors and aliases)
    stops at ``max_depth`` / ``max_nodes`` instead of recursing or expanding without bound.
    """
    stack: list[tuple[str, Any, int]] = [("<root>", tree, 1)]
    nodes = 0
    while stack:
        path, value, depth = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise RequestError(422, f"the config has more than {max_nodes} values; not accepted")
        if depth > max_depth:
            raise RequestError(
                422, f"the config nests deeper than {max_depth} levels (at {path}); not accepted"
            )
        if isinstance(value, dict):
            if len(value) > MAX_KEYS_PER_MAPPING:
                raise RequestError(
                    422,
                    f"{path} has {len(value):,} keys; no config mapping has more than "
                    f"{MAX_KEYS_PER_MAPPING:,} (every schema section has under 100 fields); "
                    "not accepted",
                )
            for key, child in value.items():
                if not isinstance(key, str):
                    raise RequestError(
                        422, f"keys must be strings; got {key!r} ({type(key).__name__}) in {path}"
                    )
                stack.append((key if path == "<root>" else f"{path}.{key}", child, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", child, depth + 1) for i, child in enumerate(value))
        elif not isinstance(value, _SCALARS):
            raise RequestError(
                422,
                f"{path} is a {type(value).__name__}; only JSON values (mappings, lists, "
                f"strings, numbers, booleans, null) are accepted; quote it to send a string",
            )
        elif isinstance(value, str) and "${" in value:
            raise RequestError(422, interpolation_refused(path))


def interpolation_refused(path: str) -> str:
    return (
        f"OmegaConf resolver interpolations are not accepted, nor any other ${{...}} (at "
        f"{path}): the service resolves nothing in a submitted config; send resolved values"
    )


def resolver_refused(paths: list[str]) -> str:
    return (
        f"OmegaConf resolver interpolations are not accepted (at {', '.join(paths)}): the "
        f"service never resolves ${{oc.env:...}} or any other resolver; send resolved values"
    )
