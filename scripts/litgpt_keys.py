"""Generate LitGPT's key lists and named model configs from a Lightning-AI/litgpt git dir.

    python scripts/litgpt_keys.py /path/to/litgpt.git

writes, under cfgcheck/sources/keys/:

- ``litgpt.txt``: the keys of the newest commit (HEAD): the ``setup()`` parameters of
  ``litgpt/finetune/*.py`` and ``litgpt/pretrain.py`` and the fields of ``TrainArgs`` /
  ``EvalArgs`` / ``LogArgs`` (``litgpt/args.py``) under ``train.`` / ``eval.`` / ``log.``;
- ``litgpt_versions.json``: for every release tag (``v*``), the keys it had that HEAD lacks
  (``train.learning_rate``, ``train.beta1`` of v0.3.x before ``optimizer:``);
- ``litgpt_configs.json``: ``Config.from_name``'s table (``litgpt/config.py`` ``configs``),
  each entry the fields cfgcheck reads (:data:`cfgcheck.models.litgpt.LITGPT_DEFAULTS`),
  so that ``litgpt pretrain``'s ``model_name`` resolves without LitGPT installed.

Everything is read with ``ast`` except ``litgpt/config.py``, whose table is built by loops:
that one upstream file is executed alone (it imports only ``yaml`` and ``typing_extensions``,
see its ``find_multiple`` note) at generation time, never when cfgcheck validates.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "cfgcheck" / "sources" / "keys"
COMMANDS = ("litgpt/pretrain.py",)
ARGS = {"TrainArgs": "train", "EvalArgs": "eval", "LogArgs": "log"}


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", gitdir, *args], check=True, capture_output=True, text=True
    ).stdout


def setup_params(source: str) -> list[str]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "setup":
            args = node.args
            return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return []


def dataclass_fields(source: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in ARGS:
            out[ARGS[node.name]] = [
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
    return out


def keys_at(gitdir: str, rev: str) -> set[str]:
    files = git(gitdir, "ls-tree", "--name-only", f"{rev}:litgpt/finetune").split()
    paths = [f"litgpt/finetune/{f}" for f in files if f.endswith(".py") and f != "__init__.py"]
    keys: set[str] = set()
    for path in (*paths, *COMMANDS):
        keys |= set(setup_params(git(gitdir, "show", f"{rev}:{path}")))
    for prefix, fields in dataclass_fields(git(gitdir, "show", f"{rev}:litgpt/args.py")).items():
        keys |= {f"{prefix}.{f}" for f in fields}
    return keys


def named_configs(gitdir: str, rev: str) -> dict[str, dict[str, Any]]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cfgcheck.models.litgpt import LITGPT_DEFAULTS

    module = types.ModuleType("litgpt_config")
    sys.modules[module.__name__] = module
    code = compile(git(gitdir, "show", f"{rev}:litgpt/config.py"), "litgpt/config.py", "exec")
    exec(code, module.__dict__)
    namespace = module.__dict__
    wanted = (*LITGPT_DEFAULTS, "padded_vocab_size", "hf_config")
    table: dict[str, dict[str, Any]] = {}
    for raw in namespace["configs"]:
        entry = {k: raw[k] for k in wanted if k in raw}
        entry["name"] = raw["name"]
        table[raw["name"]] = entry
    return table


def version_key(tag: str) -> tuple[int, ...]:
    return tuple(
        int(p) if p.isdigit() else -1 for p in tag.lstrip("v").replace("dev", ".").split(".")
    )


def main(gitdir: str) -> None:
    head = git(gitdir, "rev-parse", "HEAD").strip()
    current = keys_at(gitdir, "HEAD")
    tags = sorted(
        (t for t in git(gitdir, "tag").split() if t.startswith("v") and "dev" not in t),
        key=version_key,
    )
    older: dict[str, list[str]] = {}
    for tag in tags:
        try:
            keys = keys_at(gitdir, tag)
        except subprocess.CalledProcessError:
            continue  # a tag without litgpt/finetune (before the package layout)
        for key in sorted(keys - current):
            older.setdefault(key, []).append(tag.lstrip("v"))
    header = (
        "# Keys LitGPT's finetune (lora, full, adapter, adapter_v2) and pretrain commands read:\n"
        "# the setup() parameters of litgpt/finetune/*.py and litgpt/pretrain.py, and the fields "
        "of\n# TrainArgs / EvalArgs / LogArgs (litgpt/args.py) under train. / eval. / log.\n"
        f"# Lightning-AI/litgpt at {head} (scripts/litgpt_keys.py).\n"
    )
    parents = {k.split(".")[0] for k in current if "." in k}
    (OUT / "litgpt.txt").write_text(header + "".join(f"{k}\n" for k in sorted(current | parents)))
    versions = {"commit": head, "tags": [t.lstrip("v") for t in tags], "older_keys": older}
    (OUT / "litgpt_versions.json").write_text(json.dumps(versions, indent=1, sort_keys=True) + "\n")
    configs = {"commit": head, "configs": named_configs(gitdir, "HEAD")}
    (OUT / "litgpt_configs.json").write_text(json.dumps(configs, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
