"""Generate cfgcheck/sources/keys/llamafactory_v1.json from LLaMA-Factory's v1 source, without
importing it.

``USE_V1=1 llamafactory-cli sft FILE`` (src/llamafactory/cli.py ``main``: ``is_env_enabled
("USE_V1")`` picks ``src/llamafactory/v1/launcher.py``) parses the YAML with
``HfArgumentParser([ModelArguments, DataArguments, TrainingArguments, SampleArguments])``
(``v1/config/arg_parser.py get_args``: ``parse_dict(args, allow_extra_keys=False)`` unless
ALLOW_EXTRA_KEYS): a key that is no field of one of them is refused. Some fields are plugin
configs (``PluginConfig``: a dict with a ``name``); the plugins ``dist_config``, ``peft_config``
and ``quant_config`` parse theirs strictly into a dataclass per plugin name
(``BasePlugin.parse_params``, v1/utils/plugin.py: "Unknown params for ..."), read here too;
the other plugin configs are free-form.

Each field is written with its default (a literal, or null when it is not one) and the
file:line that declares it.

Usage (a git dir, e.g. from ``git clone --bare``, and the commit to read)::

    python scripts/gen_llamafactory_v1_keys.py --git-dir /path/LLaMA-Factory.git --commit <sha>
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path
from typing import Any

V1 = "src/llamafactory/v1"
# arg_parser.py get_args: HfArgumentParser([...]), in order
ARGS = (
    (f"{V1}/config/model_args.py", "ModelArguments"),
    (f"{V1}/config/data_args.py", "DataArguments"),
    (f"{V1}/config/training_args.py", "TrainingArguments"),
    (f"{V1}/config/sample_args.py", "SampleArguments"),
)
ENUMS = (f"{V1}/config/arg_utils.py", f"{V1}/utils/types.py")
# the plugin configs parsed strictly, and the dataclass of each plugin name
PLUGINS = {
    "dist_config": f"{V1}/plugins/trainer_plugins/distributed/interface.py",
    "peft_config": f"{V1}/plugins/model_plugins/peft.py",
    "quant_config": f"{V1}/plugins/model_plugins/quantization.py",
}
# FSDPTurbo's expert-parallel adapter: the model types it has a spec for (prepare_model_ep
# raises "No FSDPTurbo EP spec is registered for model_type=..." for any other)
FSDPTURBO = f"{V1}/plugins/trainer_plugins/distributed/fsdpturbo.py"
OUT = Path(__file__).resolve().parents[1] / "cfgcheck" / "sources" / "keys"


def show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def enums(tree: ast.Module) -> dict[str, dict[str, Any]]:
    """``class X(StrEnum): NAME = "value"`` -> {X: {NAME: value}}."""
    out: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            members = {}
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                    try:
                        members[item.targets[0].id] = ast.literal_eval(item.value)
                    except ValueError:
                        continue
            if members:
                out[node.name] = members
    return out


def literal(node: ast.expr | None, known: dict[str, dict[str, Any]]) -> Any:
    if node is None:
        return None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return known.get(node.value.id, {}).get(node.attr)
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None  # os.path.join(...), field(default_factory=list): not a literal


def fields(tree: ast.Module, cls: str, known: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The annotated fields of dataclass ``cls``: name -> {default, line}."""
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    out: dict[str, Any] = {}
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        value = item.value
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
            kw = {k.arg: k.value for k in value.keywords}
            factory = kw.get("default_factory")
            default = literal(kw.get("default"), known) if "default" in kw else None
            if isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
                default = [] if factory.id == "list" else {}
        else:
            default = literal(value, known)
        out[item.target.id] = {"default": default, "line": item.lineno}
    return out


def plugin_params(tree: ast.Module, known: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``@dataclass class XParams: name: Literal["a", "b"] = "a"`` -> {a: fields, b: fields}."""
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Params"):
            params = fields(tree, node.name, known)
            name = next(
                (
                    i.annotation
                    for i in node.body
                    if isinstance(i, ast.AnnAssign) and getattr(i.target, "id", "") == "name"
                ),
                None,
            )
            if not (isinstance(name, ast.Subscript) and getattr(name.value, "id", "") == "Literal"):
                continue
            names = name.slice.elts if isinstance(name.slice, ast.Tuple) else [name.slice]
            for n in names:
                out[ast.literal_eval(n)] = {"class": node.name, "fields": params}
    return out


def registered_model_types(tree: ast.Module) -> dict[str, int]:
    """``@FSDPTurboEPModelSpec.register("qwen3_moe", ...)`` -> {"qwen3_moe": line}."""
    out: dict[str, int] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "register"
                and getattr(deco.func.value, "id", "") == "FSDPTurboEPModelSpec"
                and deco.args
            ):
                out[ast.literal_eval(deco.args[0])] = deco.lineno
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git-dir", required=True)
    ap.add_argument("--commit", required=True)
    a = ap.parse_args()
    known: dict[str, dict[str, Any]] = {}
    for path in ENUMS:
        known |= enums(ast.parse(show(a.git_dir, a.commit, path)))
    keys: dict[str, Any] = {}
    for path, cls in ARGS:
        for name, f in fields(ast.parse(show(a.git_dir, a.commit, path)), cls, known).items():
            keys[name] = {"default": f["default"], "where": f"{path}:{f['line']} {cls}"}
    plugins: dict[str, Any] = {}
    for key, path in PLUGINS.items():
        found = plugin_params(ast.parse(show(a.git_dir, a.commit, path)), known)
        plugins[key] = {
            name: {
                "where": f"{path} {p['class']}",
                "fields": {
                    f: {"default": v["default"], "line": v["line"]} for f, v in p["fields"].items()
                },
            }
            for name, p in found.items()
        }
    types = registered_model_types(ast.parse(show(a.git_dir, a.commit, FSDPTURBO)))
    out = {
        "source": "hiyouga/LLaMA-Factory",
        "commit": a.commit,
        "generated_by": "scripts/gen_llamafactory_v1_keys.py",
        "keys": keys,
        "plugins": plugins,
        "fsdpturbo_model_types": {t: f"{FSDPTURBO}:{line}" for t, line in types.items()},
    }
    (OUT / "llamafactory_v1.json").write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")
    print(
        f"{len(keys)} keys, plugins: " + ", ".join(f"{k} {sorted(v)}" for k, v in plugins.items())
    )


if __name__ == "__main__":
    main()
