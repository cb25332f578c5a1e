"""Generate cfgcheck/sources/python/unsloth_names.txt from Unsloth's model mapper.

Unsloth's loader resolves a 4-bit or renamed repository (``unsloth/Llama-3.2-3B-Instruct-
bnb-4bit``) to its float original through ``__INT_TO_FLOAT_MAPPER`` in
unsloth/models/mapper.py; each line written here is ``name<TAB>alias<TAB>alias...`` of one
entry, read with ``ast`` (nothing imported). Usage::

    python scripts/unsloth_names.py /path/to/unsloth/models/mapper.py COMMIT > \
        cfgcheck/sources/python/unsloth_names.txt
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _aliases(value: object) -> tuple[str, ...]:
    """A mapper value: a name, a tuple of names, or {"8": (...), "16": (...)} by precision."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, dict):
        return tuple(a for sub in value.values() for a in _aliases(sub))
    if isinstance(value, tuple | list):
        return tuple(a for sub in value for a in _aliases(sub))
    return ()


def entries(source: str) -> list[tuple[str, tuple[str, ...]]]:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__INT_TO_FLOAT_MAPPER" for t in node.targets
        ):
            mapping = ast.literal_eval(node.value)
            return [(key, _aliases(value)) for key, value in mapping.items()]
    raise SystemExit("no __INT_TO_FLOAT_MAPPER in the file")


def main() -> None:
    path, commit = sys.argv[1], sys.argv[2]
    print("# Unsloth model names and the repositories they load (unsloth/models/mapper.py")
    print(f"# __INT_TO_FLOAT_MAPPER), unslothai/unsloth at {commit}; scripts/unsloth_names.py.")
    for key, aliases in entries(Path(path).read_text("utf-8")):
        print("\t".join([key, *aliases]))


if __name__ == "__main__":
    main()
