"""Generate the keys each Axolotl plugin declares, from an axolotl-ai-cloud/axolotl git dir.

    python scripts/axolotl_plugin_keys.py /path/to/axolotl.git

writes ``cfgcheck/sources/keys/axolotl_plugins.json``: for every integration package
``src/axolotl/integrations/<name>/``, the fields (and ``Field(alias=...)`` names) of the
pydantic models of its ``args.py``, with their bases in the same file. Axolotl merges a
plugin's args model into the config schema only when ``plugins:`` lists the plugin
(``src/axolotl/integrations/base.py`` PluginManager.get_input_args,
``src/axolotl/utils/config/__init__.py`` validate_config / merge_input_args). Read with
``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "cfgcheck" / "sources" / "keys"
ROOT = "src/axolotl/integrations"


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", gitdir, *args], check=True, capture_output=True, text=True
    ).stdout


def _alias(value: ast.expr | None) -> str | None:
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg in ("alias", "validation_alias") and isinstance(kw.value, ast.Constant):
                return str(kw.value.value)
    return None


def fields(source: str) -> list[str]:
    classes = {n.name: n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}
    keys: set[str] = set()
    for node in classes.values():
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                if stmt.target.id.startswith("_") or stmt.target.id == "model_config":
                    continue
                keys.add(stmt.target.id)
                alias = _alias(stmt.value)
                if alias:
                    keys.add(alias)
    return sorted(keys)


def main(gitdir: str) -> None:
    head = git(gitdir, "rev-parse", "HEAD").strip()
    names = git(gitdir, "ls-tree", "--name-only", f"HEAD:{ROOT}").split()
    plugins: dict[str, list[str]] = {}
    for name in names:
        try:
            source = git(gitdir, "show", f"HEAD:{ROOT}/{name}/args.py")
        except subprocess.CalledProcessError:
            continue  # no args model: the plugin declares no keys
        keys = fields(source)
        if keys:
            plugins[name] = keys
    table = {"commit": head, "plugins": plugins}
    (OUT / "axolotl_plugins.json").write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
