"""Generate cfgcheck/sources/keys/trl_versions.json: the keys (and literal defaults) that each
TRL trainer's command line reads, per TRL version, from TRL's own sources; the fields of
transformers' TrainingArguments per transformers version; the `accelerate launch` options
that the `trl` CLI forwards; and the fields that the alignment-handbook and open-r1 recipe
scripts add.

Nothing is typed by hand: every class is read with ast (cfgcheck/sources/pydataclass.py)
from a git tag of huggingface/trl, from the installed trl package, or from a transformers
`training_args.py`. Run it again after a TRL release:

    python scripts/trl_keys.py \\
        --trl-git /work/.mirror/huggingface+trl/repo \\
        --installed-trl \\
        --transformers 4.52.3=/tmp/tf-4.52.3/transformers/training_args.py \\
        --transformers 4.57.1=/tmp/tf-4.57.1/transformers/training_args.py \\
        --installed-transformers \\
        --recipe open-r1=/work/.mirror/huggingface+open-r1/repo \\
        --recipe alignment-handbook=/work/.mirror/huggingface+alignment-handbook/repo@HEAD,95dc472

(`pip download --no-deps transformers==X` and unzip `transformers/training_args.py` for the
older transformers; `fetch github:huggingface/trl` etc. for the git mirrors.)

A trainer is what one `trl <name>` script parses (`TrlParser((ScriptArguments, XConfig,
ModelConfig, ...))` in trl/scripts/<name>.py), or, for a trainer without a CLI script (ORPO,
CPO, PPO, ...), the composition TRL's examples use: (ScriptArguments, XConfig, ModelConfig).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cfgcheck.sources.pydataclass import (  # noqa: E402
    NO_DEFAULT,
    ClassInfo,
    classes,
    parser_dataclasses,
)

OUT = ROOT / "cfgcheck" / "sources" / "keys" / "trl_versions.json"
# The last release of each minor line people pin (and every 1.x minor in the mirror).
TAGS = (
    "v0.12.2",
    "v0.13.0",
    "v0.14.0",
    "v0.15.2",
    "v0.16.1",
    "v0.17.0",
    "v0.18.2",
    "v0.19.1",
    "v0.20.0",
    "v0.21.0",
    "v0.22.2",
    "v0.23.1",
    "v0.24.0",
    "v0.25.1",
    "v0.26.2",
    "v0.27.2",
    "v0.28.0",
    "v0.29.1",
    "v1.0.0",
    "v1.1.0",
    "v1.2.0",
    "v1.3.0",
    "v1.4.0",
    "v1.5.1",
    "v1.6.0",
    "v1.7.1",
    "v1.8.0",
    "v1.9.0",
)
NOT_TRAINERS = {"utils", "env", "vllm_serve", "chat", "__init__", "_hf_argparser"}
TA = "TrainingArguments"


def _jsonable(value: Any) -> Any:
    return None if value == NO_DEFAULT else value


class Tree:
    """A TRL source tree: a git tag of the mirror, or the installed package."""

    def __init__(self, files: dict[str, Callable[[], str]], source: str) -> None:
        self.files = files
        self.source = source

    @classmethod
    def git(cls, git_dir: str, tag: str) -> Tree:
        names = subprocess.run(
            ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", tag, "trl/"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        commit = subprocess.run(
            ["git", f"--git-dir={git_dir}", "rev-list", "-n1", tag],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

        def reader(name: str) -> Callable[[], str]:
            return lambda: (
                subprocess.run(
                    ["git", f"--git-dir={git_dir}", "show", f"{tag}:{name}"],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
            )

        return cls(
            {n: reader(n) for n in names if n.endswith(".py")},
            f"huggingface/trl {tag} ({commit})",
        )

    @classmethod
    def installed(cls) -> tuple[Tree, str]:
        import importlib.metadata

        import trl

        root = Path(trl.__file__).parent
        files = {
            "trl/" + str(p.relative_to(root)): (lambda p=p: p.read_text("utf-8"))
            for p in root.rglob("*.py")
        }
        version = importlib.metadata.version("trl")
        return cls(files, f"trl {version} (installed package)"), version


def _priority(path: str) -> int:
    if path == "trl/scripts/utils.py":
        return 0
    if path.startswith("trl/trainer/"):
        return 1
    if path == "trl/utils.py":
        return 2
    if path.startswith("trl/experimental/"):
        return 4
    if path.startswith("trl/scripts/"):
        return 9  # another script's own classes (vllm_serve's ScriptArguments)
    return 3


def _wanted(path: str) -> bool:
    return (
        path.startswith(("trl/trainer/", "trl/scripts/", "trl/experimental/"))
        or path == "trl/utils.py"
        or path.startswith("trl/extras/")
    ) and "/tests/" not in path


def trl_version(tree: Tree) -> dict[str, Any]:
    modules: dict[str, dict[str, ClassInfo]] = {}
    for path, read in sorted(tree.files.items()):
        if _wanted(path):
            try:
                modules[path] = classes(read(), path)
            except Exception:
                continue
    registry: dict[str, list[tuple[int, str, ClassInfo]]] = {}
    for path, found in modules.items():
        for name, info in found.items():
            registry.setdefault(name, []).append((_priority(path), path, info))

    def resolve(name: str, module: str) -> tuple[str, ClassInfo] | None:
        if name in modules.get(module, {}):
            return module, modules[module][name]
        options = sorted(registry.get(name, []), key=lambda t: (t[0], t[1]))
        return (options[0][1], options[0][2]) if options else None

    def flatten(module: str, info: ClassInfo, seen: frozenset[str]) -> tuple[dict[str, Any], bool]:
        fields: dict[str, Any] = {}
        reaches_ta = False
        for base in info.bases:
            if base == TA:
                reaches_ta = True
                continue
            found = resolve(base, module)
            if found is None or base in seen:
                continue
            sub, ta = flatten(found[0], found[1], seen | {base})
            fields.update(sub)
            reaches_ta |= ta
        fields.update(info.fields)
        return fields, reaches_ta

    out_classes: dict[str, Any] = {}
    trainers: dict[str, Any] = {}

    def add_class(name: str, module: str) -> str | None:
        found = resolve(name, module)
        if found is None:
            return None
        fields, ta = flatten(found[0], found[1], frozenset({name}))
        key = f"{found[0]}:{name}"
        out_classes[key] = {
            "module": found[0],
            "training_arguments": ta,
            "fields": {k: _jsonable(v) for k, v in fields.items()},
        }
        return key

    for path in sorted(modules):
        stem = Path(path).stem
        if path.startswith("trl/scripts/") and path.count("/") == 2 and stem not in NOT_TRAINERS:
            names = parser_dataclasses(tree.files[path](), path)
            if names:
                keys = [add_class(n, path) for n in names]
                trainers[stem] = {
                    "classes": [k for k in keys if k],
                    "cli": True,
                    "script": path,
                }
    for name, options in sorted(registry.items()):
        if (
            not name.endswith("Config")
            or name.startswith("_")
            or name in ("ModelConfig", "DatasetMixtureConfig")
        ):
            continue
        options = sorted(options, key=lambda t: (t[0], t[1]))
        _, path, info = options[0]
        if not (
            path.startswith(("trl/trainer/", "trl/experimental/")) and path.endswith("_config.py")
        ):
            continue
        _, ta = flatten(path, info, frozenset({name}))
        if not ta:
            continue
        trainer = re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", name.removesuffix("Config")).lower()
        if trainer in trainers:
            continue
        keys = [add_class(n, path) for n in ("ScriptArguments", name, "ModelConfig")]
        trainers[trainer] = {"classes": [k for k in keys if k], "cli": False, "script": path}
    return {"source": tree.source, "classes": out_classes, "trainers": trainers}


def training_arguments(path: str, version: str) -> dict[str, Any]:
    found = classes(Path(path).read_text("utf-8"), path)[TA]
    return {
        "source": f"transformers {version} src/transformers/training_args.py",
        "fields": {k: _jsonable(v) for k, v in found.fields.items()},
    }


def launcher() -> dict[str, Any]:
    """`accelerate launch` options: the `trl` CLI hands every config key that no dataclass
    takes to `accelerate launch` (trl/cli/commands/training.py, earlier trl/cli.py)."""
    import importlib.metadata

    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()
    keys = sorted(
        {
            opt.lstrip("-").replace("-", "_")
            for action in parser._actions
            for opt in action.option_strings
            if opt.startswith("--")
        }
        - {"help"}
    )
    return {
        "source": f"accelerate {importlib.metadata.version('accelerate')} "
        "launch_command_parser; accelerate_config: trl/cli/accelerate_config.py",
        "keys": [*keys, "accelerate_config"],
    }


def recipe(name: str, spec: str, version: dict[str, Any], pool: dict[str, Any]) -> dict[str, Any]:
    """A recipe repository's scripts: the fields its dataclasses add to TRL's, merged over the
    revisions given (``GIT_DIR@REV,REV``; HEAD by default): a recipe written for an older
    script (alignment-handbook's ``hub_model_revision``, ``dataset_mixer``) is still known."""
    git_dir, _, revs = spec.partition("@")
    merged: dict[str, Any] | None = None
    for rev in (revs or "HEAD").split(","):
        one = _recipe_at(name, git_dir, rev, version, pool)
        if merged is None:
            merged = one
            continue
        merged["source"] += f"; {one['source']}"
        for trainer, t in one["trainers"].items():
            into = merged["trainers"].setdefault(trainer, t)
            if into is not t:
                into["fields"] = dict(sorted({**t["fields"], **into["fields"]}.items()))
    assert merged is not None
    return merged


def _recipe_at(
    name: str, git_dir: str, rev: str, version: dict[str, Any], pool: dict[str, Any]
) -> dict[str, Any]:
    def show(path: str) -> str:
        return subprocess.run(
            ["git", f"--git-dir={git_dir}", "show", f"{rev}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    commit = subprocess.run(
        ["git", f"--git-dir={git_dir}", "rev-parse", rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    files = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    config_py = next(f for f in files if f.endswith("/configs.py"))
    own = classes(show(config_py), config_py)
    setup = show("setup.py") if "setup.py" in files else ""
    pin = re.search(r'"trl(?:\[[^\]]*\])?([=>]=)([0-9.]+)"', setup)

    def fields_of(cls: str, seen: frozenset[str] = frozenset()) -> dict[str, Any]:
        if cls not in own or cls in seen:
            return {}
        out: dict[str, Any] = {}
        for base in own[cls].bases:
            out.update(fields_of(base, seen | {cls}))
        out.update({k: _jsonable(v) for k, v in own[cls].fields.items()})
        return out

    trainers: dict[str, Any] = {}
    scripts = [
        f
        for f in files
        if f.endswith(".py") and (f.startswith("scripts/") or re.match(r"src/\w+/\w+\.py$", f))
    ]
    for path in scripts:
        names = parser_dataclasses(show(path), path)
        if not names or not any(n in own for n in names):
            continue
        extra: dict[str, Any] = {}
        for n in names:
            extra.update(fields_of(n))
        trainers[Path(path).stem.removeprefix("run_")] = {
            "script": path,
            "classes": names,
            # every field the recipe's own classes declare (some re-declare TRL's)
            "fields": dict(sorted(extra.items())),
        }
    scripts_read = sorted(t["script"] for t in trainers.values())
    return {
        "source": f"huggingface/{name} at {commit} ({config_py}, {', '.join(scripts_read)})",
        "trl": pin.group(2) if pin else None,
        "trl_pin": pin.group(1) if pin else None,
        "trainers": trainers,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trl-git", required=True)
    ap.add_argument("--installed-trl", action="store_true")
    ap.add_argument("--transformers", action="append", default=[], metavar="VERSION=PATH")
    ap.add_argument("--installed-transformers", action="store_true")
    ap.add_argument("--recipe", action="append", default=[], metavar="NAME=GIT_DIR")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    tf: dict[str, Any] = {}
    for spec in args.transformers:
        version, _, path = spec.partition("=")
        tf[version] = training_arguments(path, version)
    if args.installed_transformers:
        import importlib.metadata

        import transformers

        version = importlib.metadata.version("transformers")
        tf[version] = training_arguments(
            str(Path(transformers.__file__).parent / "training_args.py"), version
        )
    versions: dict[str, Any] = {}
    for tag in TAGS:
        versions[tag.lstrip("v")] = trl_version(Tree.git(args.trl_git, tag))
        print(tag, len(versions[tag.lstrip("v")]["trainers"]), file=sys.stderr)
    if args.installed_trl:
        tree, version = Tree.installed()
        versions[version] = trl_version(tree)
    newest = max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))
    # Classes that do not change between versions are stored once, by content.
    pool: dict[str, Any] = {}
    for data in versions.values():
        for key, cls in data["classes"].items():
            text = json.dumps(cls, sort_keys=True)
            digest = hashlib.sha1(text.encode()).hexdigest()[:12]
            pool[digest] = cls
            data["classes"][key] = digest
    recipes = {}
    for spec in args.recipe:
        name, _, where = spec.partition("=")
        recipes[name] = recipe(name, where, versions[newest], pool)
    data = {
        "generated_by": "scripts/trl_keys.py (do not edit by hand)",
        "transformers": tf,
        "launcher": launcher(),
        "trl": versions,
        "classes": pool,
        "recipes": recipes,
    }
    Path(args.out).write_text(
        json.dumps(data, indent=None, sort_keys=True, separators=(",", ":")) + "\n"
    )
    print(f"wrote {args.out} ({Path(args.out).stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
