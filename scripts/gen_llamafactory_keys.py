"""Generate cfgcheck/sources/keys/llamafactory.txt and llamafactory.defaults.txt from
LLaMA-Factory's source, without importing it.

``llamafactory-cli train FILE`` parses the YAML with ``HfArgumentParser(_TRAIN_ARGS)``
(``src/llamafactory/hparams/parser.py``: ModelArguments, DataArguments, TrainingArguments,
FinetuningArguments, GeneratingArguments) and ``parse_dict(args, allow_extra_keys=False)``
(unless ALLOW_EXTRA_ARGS is set): a key that is no ``init`` field of one of those dataclasses
is refused. The dataclasses are read here with :mod:`ast` from ``src/llamafactory/hparams/*.py``
(their base classes followed through the module, enum defaults resolved from
``src/llamafactory/extras/constants.py``); LLaMA-Factory's TrainingArguments derives from
transformers' ``Seq2SeqTrainingArguments``, read with ast from transformers wheels in the
range LLaMA-Factory's ``pyproject.toml`` allows (the key set changes between releases: the
installed 5.24 has no ``warmup_ratio``, which LLaMA-Factory's examples use; 5.x has no
``fsdp_transformer_layer_cls_to_wrap``, which one of them uses with 4.x).

Usage (a git dir, e.g. from ``git clone --bare``, and the commit to read)::

    pip download transformers==4.57.6 transformers==5.8.0 --no-deps -d wheels/
    python scripts/gen_llamafactory_keys.py --git-dir /path/LLaMA-Factory.git --commit <sha> \\
        --transformers-wheel wheels/transformers-4.57.6-py3-none-any.whl \\
        --transformers-wheel wheels/transformers-5.8.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

HPARAMS = "src/llamafactory/hparams"
CONSTANTS = "src/llamafactory/extras/constants.py"
TEMPLATE = "src/llamafactory/data/template.py"
MODULES = ("model_args", "data_args", "training_args", "finetuning_args", "generating_args")
# parser.py _TRAIN_ARGS, in order
TRAIN_ARGS = (
    "ModelArguments",
    "DataArguments",
    "TrainingArguments",
    "FinetuningArguments",
    "GeneratingArguments",
)
# training_args.py: BaseTrainingArguments = Seq2SeqTrainingArguments (without USE_MCA)
EXTERNAL = {"BaseTrainingArguments", "Seq2SeqTrainingArguments"}
HF = "transformers:"  # prefix of the wheel's classes (LLaMA-Factory has a TrainingArguments too)
OUT = Path(__file__).resolve().parents[1] / "cfgcheck" / "sources" / "keys"
NO_DEFAULT = object()


@dataclasses.dataclass
class Field:
    name: str
    default: Any  # NO_DEFAULT when not a literal
    choices: list[Any] | None
    init: bool
    owner: str
    only: list[str] | None = None  # the transformers versions that have it, when not all


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
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members: dict[str, Any] = {}
            for item in node.body:
                if (
                    isinstance(item, ast.Assign)
                    and len(item.targets) == 1
                    and isinstance(item.targets[0], ast.Name)
                ):
                    try:
                        members[item.targets[0].id] = ast.literal_eval(item.value)
                    except ValueError:
                        continue
            if members:
                out[node.name] = members
    return out


def literal(node: ast.expr, known: dict[str, dict[str, Any]]) -> Any:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in known
    ):
        return known[node.value.id].get(node.attr, NO_DEFAULT)
    try:
        return ast.literal_eval(node)
    except ValueError:
        # 768 * 768 and the like
        if isinstance(node, ast.BinOp):
            left, right = literal(node.left, known), literal(node.right, known)
            if isinstance(left, int) and isinstance(right, int) and isinstance(node.op, ast.Mult):
                return left * right
        return NO_DEFAULT


def choices(annotation: ast.expr | None, known: dict[str, dict[str, Any]]) -> list[Any] | None:
    """``Literal[...]`` (optionally ``| None``) or an enum class: its values."""
    if annotation is None:
        return None
    if isinstance(annotation, ast.BinOp):  # X | None
        return choices(annotation.left, known)
    if isinstance(annotation, ast.Name) and annotation.id in known:
        return list(known[annotation.id].values())
    if (
        isinstance(annotation, ast.Subscript)
        and isinstance(annotation.value, ast.Name)
        and annotation.value.id == "Literal"
    ):
        inner = annotation.slice
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        return [ast.literal_eval(i) for i in items]
    return None


def class_fields(
    node: ast.ClassDef, known: dict[str, dict[str, Any]]
) -> tuple[list[str], list[Field]]:
    bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
    out: list[Field] = []
    for item in node.body:
        if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
            continue
        default: Any = NO_DEFAULT
        init = True
        value = item.value
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "field"
        ):
            for kw in value.keywords:
                if kw.arg == "default":
                    default = literal(kw.value, known)
                elif kw.arg == "init":
                    init = bool(ast.literal_eval(kw.value))
        elif value is not None:
            default = literal(value, known)
        out.append(Field(item.target.id, default, choices(item.annotation, known), init, node.name))
    return bases, out


def wheel_classes(wheel: Path, known: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """TrainingArguments and Seq2SeqTrainingArguments read with ast from a transformers wheel
    (``pip download transformers==X --no-deps``): the version LLaMA-Factory pins, not
    whichever is installed here."""
    classes: dict[str, tuple[list[str], list[Field]]] = {}
    with zipfile.ZipFile(wheel) as z:
        for module in ("training_args", "training_args_seq2seq"):
            tree = ast.parse(z.read(f"transformers/{module}.py").decode("utf-8"))
            for node in tree.body:
                if isinstance(node, ast.ClassDef) and node.name in (
                    "TrainingArguments",
                    "Seq2SeqTrainingArguments",
                ):
                    bases, own = class_fields(node, known)
                    for f in own:
                        f.owner = f"transformers {wheel_version(wheel)} {node.name}"
                    classes[HF + node.name] = ([HF + b for b in bases], own)
    return classes


def collect(git_dir: str, commit: str, wheels: list[Path]) -> dict[str, Field]:
    """The keys under each transformers wheel, merged (newest first); a key that only some
    of the wheels have is marked with their versions."""
    ordered = sorted(wheels, key=lambda w: _version_key(wheel_version(w)), reverse=True)
    per_wheel = {wheel_version(w): _collect(git_dir, commit, w) for w in ordered}
    keys: dict[str, Field] = {}
    for version_keys in per_wheel.values():
        for name, f in version_keys.items():
            keys.setdefault(name, f)
    for name, f in keys.items():
        having = [v for v, version_keys in per_wheel.items() if name in version_keys]
        if len(having) < len(per_wheel):
            f.only = sorted(having, key=_version_key)
    return keys


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _collect(git_dir: str, commit: str, wheel: Path) -> dict[str, Field]:
    known = enums(ast.parse(show(git_dir, commit, CONSTANTS)))
    classes: dict[str, tuple[list[str], list[Field]]] = dict(wheel_classes(wheel, known))
    for module in MODULES:
        tree = ast.parse(show(git_dir, commit, f"{HPARAMS}/{module}.py"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = class_fields(node, known)

    def mro_fields(name: str) -> list[Field]:
        """Fields in dataclass order: bases right to left, then the class's own."""
        if name in EXTERNAL:
            name = HF + "Seq2SeqTrainingArguments"
        bases, own = classes[name]
        merged: dict[str, Field] = {}
        for base in reversed(bases):
            for f in mro_fields(base):
                merged[f.name] = f
        for f in own:
            merged[f.name] = f
        return list(merged.values())

    keys: dict[str, Field] = {}
    for name in TRAIN_ARGS:
        for f in mro_fields(name):
            if f.init:
                keys.setdefault(f.name, f)

    return keys


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def render(keys: dict[str, Field], commit: str, wheels: list[Path]) -> tuple[str, str]:
    versions = sorted((wheel_version(w) for w in wheels), key=_version_key)
    head = (
        "# Keys `llamafactory-cli train FILE` accepts: the init fields of the dataclasses its\n"
        "# HfArgumentParser parses (src/llamafactory/hparams/parser.py _TRAIN_ARGS:\n"
        "# ModelArguments, DataArguments, TrainingArguments, FinetuningArguments,\n"
        "# GeneratingArguments, with their bases in hparams/*.py), TrainingArguments deriving\n"
        "# from transformers' Seq2SeqTrainingArguments (read from the transformers wheels\n"
        f"# {', '.join(versions)}: the newest 4.x and 5.x LLaMA-Factory's pyproject.toml allows).\n"
        f"# hiyouga/LLaMA-Factory at {commit} (extracted with ast by\n"
        "# scripts/gen_llamafactory_keys.py; do not edit by hand).\n"
    )
    names = "".join(f"{k}\n" for k in sorted(keys))
    lines = []
    for k in sorted(keys):
        f = keys[k]
        if f.default is NO_DEFAULT:
            continue
        line = f"{k} = {json.dumps(f.default)}"
        if f.choices:
            line += f"  choices {json.dumps(f.choices)}"
        if f.only:
            line += f"  only {json.dumps(f.only)}"
        lines.append(line + f"  # {f.owner}\n")
    defaults_head = (
        "# Defaults of the keys below (`key = JSON`; `choices [...]` for Literal and enum\n"
        "# fields; `only [...]` for a field only some transformers releases have).\n" + head
    )
    return head + names, defaults_head + "".join(lines)


def templates(git_dir: str, commit: str) -> list[str]:
    """The names ``register_template(name=...)`` registers (src/llamafactory/data/template.py):
    the values ``template`` takes (get_template_and_fix_tokenizer raises "Template X does not
    exist." for any other)."""
    tree = ast.parse(show(git_dir, commit, TEMPLATE))
    names = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "register_template"
        ):
            for kw in node.keywords:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    names.append(str(kw.value.value))
    return sorted(set(names))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument(
        "--transformers-wheel",
        type=Path,
        action="append",
        required=True,
        help="a transformers wheel in the range LLaMA-Factory pins (pip download "
        "transformers==5.8.0 --no-deps); give the newest 4.x and 5.x",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", f"--git-dir={args.git_dir}", "rev-parse", args.commit],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    keys_text, defaults_text = render(
        collect(args.git_dir, commit, args.transformers_wheel), commit, args.transformers_wheel
    )
    (args.out / "llamafactory.txt").write_text(keys_text, encoding="utf-8")
    (args.out / "llamafactory.defaults.txt").write_text(defaults_text, encoding="utf-8")
    names = templates(args.git_dir, commit)
    (args.out / "llamafactory.templates.txt").write_text(
        "# The chat templates LLaMA-Factory registers (register_template(name=...) in\n"
        f"# src/llamafactory/data/template.py), hiyouga/LLaMA-Factory at {commit}\n"
        "# (extracted with ast by scripts/gen_llamafactory_keys.py; do not edit by hand).\n"
        + "".join(f"{n}\n" for n in names),
        encoding="utf-8",
    )
    print(f"{len(keys_text.splitlines())} lines written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
