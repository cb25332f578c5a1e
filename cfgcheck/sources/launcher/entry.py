"""The entry point a launch script starts, read statically with the shared reader
(:mod:`cfgcheck.sources.code`; never imported, never executed): the argument dataclasses it
hands ``HfArgumentParser`` (or its ``argparse`` options), and its data path (the tokenizer call
and whether it runs per sample, the collator the Trainer gets).

``TrainingArguments`` fields come from the installed transformers' own
``transformers/training_args.py``, read as text (``importlib.util.find_spec`` locates it
without importing transformers).
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Location
from cfgcheck.sources.code import CallSite, CodeFile, Known, Program, read_code, read_program
from cfgcheck.sources.code.datapath import collator_kind, is_tokenizer_call
from cfgcheck.sources.pydataclass import (
    NO_DEFAULT,
    ClassInfo,
    classes_in,
    parser_dataclasses_in,
)

HF_ARGS = ("TrainingArguments", "Seq2SeqTrainingArguments")
MAX_HOPS = 2  # an entry point that only calls another module's main (FastChat's train_mem.py)


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    default: Any
    where: str  # "<file>:<line> <Class>.<field>" or "transformers TrainingArguments"

    @property
    def is_bool(self) -> bool:
        return self.type.replace(" ", "") in ("bool", "bool|None", "Optional[bool]")


@dataclass
class Entry:
    """What the entry point declares and does."""

    file: str
    code: CodeFile
    program: Program
    parser: str  # "HfArgumentParser", "argparse", or "" (reads no arguments cfgcheck sees)
    fields: dict[str, Field] = field(default_factory=dict)
    transformers_version: str = ""
    tokenize: CallSite | None = None
    per_sample: str | None = None  # why samples are tokenized one at a time (None: together)
    collator: tuple[str, Location] | None = None  # ("default" | "padded" | name, where)
    trainer: CallSite | None = None


@lru_cache(maxsize=1)
def training_arguments() -> tuple[dict[str, Field], str]:
    """The installed transformers' TrainingArguments fields, and its version."""
    spec = importlib.util.find_spec("transformers")
    roots = list(spec.submodule_search_locations or []) if spec else []
    if not roots:
        raise ConfigLoadError(
            "reading a launch script needs transformers installed (its TrainingArguments "
            "fields are the flags the Trainer accepts): pip install 'cfgcheck[hf]'"
        )
    root = Path(roots[0])
    source = (root / "training_args.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    found = classes_in(tree)
    info = found["TrainingArguments"]
    version = ""
    try:
        from importlib.metadata import version as dist_version

        version = dist_version("transformers")
    except Exception:  # noqa: BLE001 - metadata missing: the version is only named
        version = ""
    where = f"transformers {version} TrainingArguments".replace("  ", " ")
    return {
        name: Field(name, info.types.get(name, ""), default, where)
        for name, default in info.fields.items()
    }, version


def _dataclass_fields(
    names: list[str], found: dict[str, ClassInfo], file: str
) -> tuple[dict[str, Field], bool]:
    """Fields of the classes ``names`` (bases in the file followed); whether one of them is
    a TrainingArguments (whose fields transformers adds)."""
    out: dict[str, Field] = {}
    hf = False

    def add(name: str, depth: int) -> None:
        nonlocal hf
        if name in HF_ARGS and name not in found:
            hf = True
            return
        info = found.get(name)
        if info is None or depth > 8:
            return
        for base in info.bases:
            add(base, depth + 1)
        for key, default in info.fields.items():
            where = f"{file}:{info.lines.get(key, 0)} {name}.{key}"
            out[key] = Field(key, info.types.get(key, ""), default, where)

    for name in names:
        add(name, 0)
    return out, hf


def _argparse_fields(program: Program, file: str) -> dict[str, Field]:
    out: dict[str, Field] = {}
    for call in program.find("add_argument"):
        flags = [a.value.value for a in call.args if isinstance(a.value, Known)]
        action = call.arg("action")
        kind = call.arg("type")
        default = call.arg("default")
        store = action is not None and isinstance(action.value, Known)
        is_bool = store and str(action.value.value if action else "").startswith("store_")  # type: ignore[union-attr]
        type_name = "flag" if is_bool else (ast.unparse(kind.node) if kind else "str")
        value = default.value.value if default and isinstance(default.value, Known) else NO_DEFAULT
        for flag in flags:
            if isinstance(flag, str) and flag.startswith("--"):
                name = flag[2:]
                where = f"{call.location}"
                out[name] = Field(name, type_name, value, where)
                if "-" in name:
                    out[name.replace("-", "_")] = Field(name, type_name, value, where)
    return out


def read_entry(path: Path, shown: str, root: Path) -> Entry:
    """Read the entry point at ``path`` (see the module); follows an entry point that only
    imports another module of the project and calls it."""
    code = read_code(path, shown)
    program = read_program(code)
    tree = ast.Module(body=[s for u in code.units for s in u.tree.body], type_ignores=[])
    names = parser_dataclasses_in(tree)
    if names is None and not program.find("add_argument"):
        target = _delegate(tree, root)
        if target is not None and target != path:
            return read_entry(target, _shown(target, root), root)
    entry = Entry(shown, code, program, "")
    if names is not None:
        entry.parser = "HfArgumentParser"
        fields, hf = _dataclass_fields(names, classes_in(tree), shown)
        if hf or any(n in HF_ARGS for n in names):
            ta, entry.transformers_version = training_arguments()
            entry.fields = {**ta, **fields}
        else:
            entry.fields = fields
    elif program.find("add_argument"):
        entry.parser = "argparse"
        entry.fields = _argparse_fields(program, shown)
    _data_path(entry)
    return entry


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _delegate(tree: ast.Module, root: Path) -> Path | None:
    """The project module an entry point imports from (``from fastchat.train.train import
    train``), when it lies in ``root``."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            candidate = root.joinpath(*node.module.split(".")).with_suffix(".py")
            if candidate.is_file() and inside(candidate, root):
                return candidate
    return None


def inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _callers(program: Program) -> dict[str, set[str]]:
    """function -> the functions that call it (by the callee's last dotted part)."""
    out: dict[str, set[str]] = {}
    for call in program.calls:
        if call.function:
            out.setdefault(call.name.split(".")[-1].rstrip("()"), set()).add(call.function)
    return out


def _reaches_getitem(function: str | None, callers: dict[str, set[str]]) -> str | None:
    seen: set[str] = set()
    todo = [function] if function else []
    while todo:
        name = todo.pop()
        if name.split(".")[-1] == "__getitem__":
            return name
        if name in seen:
            continue
        seen.add(name)
        todo.extend(callers.get(name, ()))
    return None


def _data_path(entry: Entry) -> None:
    program = entry.program
    callers = _callers(program)
    for call in program.calls:
        if not is_tokenizer_call(call) or call.written.endswith("from_pretrained"):
            continue
        if call.kwargs.get("padding") is None and call.kwargs.get("return_tensors") is None:
            continue  # a length count (len(tokenizer(turn).input_ids)), not the sample's tensor
        if entry.tokenize is None:
            entry.tokenize = call
        getitem = _reaches_getitem(call.function, callers)
        if getitem is not None:
            entry.tokenize = call
            entry.per_sample = "a dataset's __getitem__ tokenizes one sample per call"
            break
    trainers = [c for c in program.find("Trainer") if c.name.split(".")[-1] == "Trainer"]
    trainers += [c for c in program.calls if c.name.endswith("Trainer") and c not in trainers]
    if trainers:
        entry.trainer = trainers[0]
        arg = trainers[0].kwargs.get("data_collator")
        if arg is None:
            entry.collator = ("default", trainers[0].location)
        elif isinstance(arg.value, Known) and arg.value.value is None:
            entry.collator = ("default", arg.location)
        else:
            kind = collator_kind(arg.value) or collator_kind(ast.unparse(arg.node))
            entry.collator = (kind or ast.unparse(arg.node), arg.location)
