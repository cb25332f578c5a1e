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
from cfgcheck.sources.launcher.clm import packing_function
from cfgcheck.sources.pydataclass import (
    NO_DEFAULT,
    ClassInfo,
    classes_in,
    parser_dataclasses_in,
)

HF_ARGS = ("TrainingArguments", "Seq2SeqTrainingArguments")
# deepspeed.add_config_arguments(parser) adds these options (deepspeedai/DeepSpeed
# deepspeed/__init__.py _add_core_arguments, at 0a1fbe1d): name -> (type, default).
DEEPSPEED_ARGUMENTS: dict[str, tuple[str, Any]] = {
    "deepspeed": ("flag", False),
    "deepspeed_config": ("str", None),
    "deepscale": ("flag", False),
    "deepscale_config": ("str", None),
}
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
    pad_token_set: str | None = None  # where the code gives the tokenizer a pad token
    rope_scaling: Location | None = None  # where the code sets config.rope_scaling
    applies_lora: Location | None = None  # where the code calls get_peft_model
    packs: Location | None = None  # where run_clm's group_texts cuts block_size rows (clm.py)


@lru_cache(maxsize=2)
def _installed(seq2seq: bool = False) -> tuple[dict[str, Field], str]:
    """The installed transformers' TrainingArguments fields (with ``seq2seq``, those
    Seq2SeqTrainingArguments adds, from ``training_args_seq2seq.py``), and its version."""
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
    except Exception:  # metadata missing: the version is only named
        version = ""
    where = f"transformers {version} TrainingArguments".replace("  ", " ")
    out = {
        name: Field(name, info.types.get(name, ""), default, where)
        for name, default in info.fields.items()
    }
    if seq2seq:
        text = (root / "training_args_seq2seq.py").read_text(encoding="utf-8")
        extra = classes_in(ast.parse(text))["Seq2SeqTrainingArguments"]
        where = where.replace("TrainingArguments", "Seq2SeqTrainingArguments")
        for name, default in extra.fields.items():
            out[name] = Field(name, extra.types.get(name, ""), default, where)
    return out, version


@lru_cache(maxsize=1)
def release_tables() -> dict[str, Any]:
    """TrainingArguments per transformers release (``training_args_versions.json``, generated
    by ``scripts/training_args_versions.py`` from each release's training_args.py)."""
    import json
    from importlib import resources

    text = resources.files("cfgcheck.sources.launcher").joinpath("training_args_versions.json")
    tables: dict[str, Any] = json.loads(text.read_text("utf-8"))["versions"]
    return tables


def _release(version: str) -> str:
    """The tabled release ``version`` names: itself, else the newest with its major.minor."""
    tables = release_tables()
    if version in tables:
        return version
    same = [v for v in tables if v.split(".")[:2] == version.split(".")[:2]]
    if not same:
        raise ConfigLoadError(
            f"--transformers-version {version}: no TrainingArguments table for it (tabled: "
            f"{', '.join(tables)}; scripts/training_args_versions.py adds releases)"
        )
    return same[-1]


@lru_cache(maxsize=16)
def training_arguments(
    version: str | None = None, seq2seq: bool = False
) -> tuple[dict[str, Field], str]:
    """TrainingArguments' fields (with ``seq2seq``, Seq2SeqTrainingArguments') and the
    release they are from: the installed transformers', or release ``version``'s from the
    generated tables (types, defaults as written there)."""
    installed, installed_version = _installed(seq2seq)
    if not version or version == installed_version:
        return installed, installed_version
    release = _release(version)
    out: dict[str, Field] = {}
    for key, cls in (("fields", "TrainingArguments"), ("seq2seq", "Seq2SeqTrainingArguments")):
        if key == "seq2seq" and not seq2seq:
            continue
        where = f"transformers {release} {cls}"
        for name, spec in release_tables()[release][key].items():
            default = spec["default"] if spec["literal"] else NO_DEFAULT
            out[name] = Field(name, spec["type"], default, where)
    return out, release


@lru_cache(maxsize=16)
def trl_config(name: str) -> dict[str, ClassInfo]:
    """TRL's ``name`` (``SFTConfig``, ``DPOConfig``...) and the TRL classes it derives from
    (``_BaseConfig``, trl/trainer/base_config.py), read from the installed trl's
    ``trl/trainer/*.py`` as text (never imported); empty when trl is not installed or has no
    such class. peft's examples/sft/train.py hands ``SFTConfig`` to HfArgumentParser."""
    from cfgcheck import safeio

    spec = importlib.util.find_spec("trl")
    roots = list(spec.submodule_search_locations or []) if spec else []
    if not roots:
        return {}
    files = sorted(Path(roots[0]).glob("trainer/*.py"))
    out: dict[str, ClassInfo] = {}
    todo = [name]
    while todo:
        wanted = todo.pop()
        if wanted in out or wanted in HF_ARGS:
            continue
        for path in files:
            try:
                text = safeio.read_text(path)
            except ConfigLoadError:
                continue
            if f"class {wanted}(" not in text:
                continue
            found = classes_in(ast.parse(text))
            if wanted in found:
                out[wanted] = found[wanted]
                todo.extend(found[wanted].bases)
                break
    return out


def release_checks(version: str) -> frozenset[str]:
    """The ``TrainingArguments.__post_init__`` refusals cfgcheck models that release
    ``version`` makes (the tables' ``checks``); a release not tabled makes all of them."""
    table = release_tables().get(version)
    if table is None:
        return frozenset({"fp16_and_bf16"})
    return frozenset(table["checks"])


def refused_since(name: str, version: str) -> str:
    """When the tabled releases stop declaring ``name``: "refused since 4.51.3 (4.46.3
    declares it)", or "" when every tabled release up to ``version`` lacks it."""
    last_with = ""
    for release, table in release_tables().items():
        if name in table["fields"]:
            last_with = release
        elif last_with:
            return f"refused since transformers {release} ({last_with} declares it)"
    return ""


def _dataclass_fields(
    names: list[str], found: dict[str, ClassInfo], file: str, origin: dict[str, str]
) -> tuple[dict[str, Field], set[str]]:
    """Fields of the classes ``names`` (bases in the file followed); which of transformers'
    TrainingArguments classes (whose fields transformers adds) they are or derive from."""
    out: dict[str, Field] = {}
    hf: set[str] = set()

    def add(name: str, depth: int) -> None:
        if name in HF_ARGS and name not in found:
            hf.add(name)
            return
        info = found.get(name)
        if info is None or depth > 8:
            return
        for base in info.bases:
            add(base, depth + 1)
        for key, default in info.fields.items():
            where = f"{origin.get(name, file)}:{info.lines.get(key, 0)} {name}.{key}"
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
    for call in program.find("deepspeed.add_config_arguments"):
        where = f"{call.location} deepspeed.add_config_arguments"
        for name, (type_name, value) in DEEPSPEED_ARGUMENTS.items():
            out.setdefault(name, Field(name, type_name, value, where))
    return out


def read_entry(
    path: Path,
    shown: str,
    root: Path,
    boundary: Path | None = None,
    transformers_version: str | None = None,
) -> Entry:
    """Read the entry point at ``path`` (see the module); follows an entry point that only
    imports another module of the project and calls it. The project's modules it imports are
    looked for in ``root`` and the folders above it (a package installed from the repository,
    DeepSpeed-Chat's ``dschat``), never outside ``boundary`` when one is given."""
    code = read_code(path, shown)
    program = read_program(code)
    tree = ast.Module(body=[s for u in code.units for s in u.tree.body], type_ignores=[])
    names = parser_dataclasses_in(tree)
    if names is None and not program.find("add_argument"):
        target = _delegate(tree, root)
        if target is not None and target != path:
            return read_entry(target, _shown(target, root), root, boundary, transformers_version)
    entry = Entry(shown, code, program, "")
    if names is not None:
        entry.parser = "HfArgumentParser"
        origin: dict[str, str] = {}  # class -> the module it is declared in, when imported
        found = {**_imported_classes(tree, root, names, origin), **classes_in(tree)}
        for name in names:
            if name not in found and name not in HF_ARGS:
                found.update(trl_config(name))
        fields, hf = _dataclass_fields(names, found, shown, origin)
        hf |= {n for n in names if n in HF_ARGS}
        if hf:
            seq2seq = "Seq2SeqTrainingArguments" in hf
            ta, entry.transformers_version = training_arguments(transformers_version, seq2seq)
            entry.fields = {**ta, **fields}
        else:
            entry.fields = fields
    elif program.find("add_argument"):
        entry.parser = "argparse"
        entry.fields = _argparse_fields(program, shown)
    _data_path(entry)
    entry.packs = packing_function(entry)
    if entry.pad_token_set is None:
        entry.pad_token_set = _pad_token_in(code)
    if entry.pad_token_set is None or entry.tokenize is None:
        _imported_data_path(entry, tree, root, boundary)
    return entry


def _own_collator(code: CodeFile, text: str) -> str | None:
    """ "padded" when ``text`` names (or was assigned an instance of) a collator class the file
    defines whose ``__call__`` pads: ``torch.nn.utils.rnn.pad_sequence`` or ``tokenizer.pad``
    (stanford_alpaca and LLaVA train.py ``DataCollatorForSupervisedDataset``)."""
    trees = [u.tree for u in code.units]
    name = text.split("(")[0]
    for tree in trees:
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and ast.unparse(node.targets[0]) == name
                and isinstance(node.value, ast.Call)
            ):
                name = ast.unparse(node.value.func)
    known = collator_kind(name)
    if known is not None:
        return known
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == name.split(".")[-1]:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call):
                        callee = ast.unparse(inner.func)
                        if callee.endswith(("pad_sequence", "tokenizer.pad")):
                            return "padded"
    return None


def _gives_pad_token(node: ast.AST) -> bool:
    if isinstance(node, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == "pad_token" for k in node.keys)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and any(k.arg == "pad_token" for k in node.keywords)
    )


MAX_MODULES = 8  # the project modules read for the data path, in import order


def project_modules(tree: ast.Module, root: Path, boundary: Path | None) -> list[Path]:
    """The files of the project modules ``tree`` imports (``from dschat.utils.utils import
    ...``): under ``root`` or up to three folders above it, inside ``boundary``."""
    base_root = root.resolve()
    bases = [base_root, *list(base_root.parents)[:3]]
    out: list[Path] = []
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module and not node.level):
            continue
        for base in bases:
            if boundary is not None and not inside(base, boundary):
                continue
            stem = base.joinpath(*node.module.split("."))
            found = next(
                (c for c in (stem.with_suffix(".py"), stem / "__init__.py") if c.is_file()), None
            )
            if found is not None and (boundary is None or inside(found, boundary)):
                if found not in out:
                    out.append(found)
                break
        if len(out) >= MAX_MODULES:
            break
    return out


def _imported_data_path(entry: Entry, tree: ast.Module, root: Path, boundary: Path | None) -> None:
    """The pad token and the tokenizer call, when the entry point leaves them to the project
    modules it imports (DeepSpeed-Chat's ``load_hf_tokenizer``, ``create_prompt_dataset``)."""
    for path in project_modules(tree, root, boundary):
        try:
            code = read_code(path, _shown(path, root))
        except ConfigLoadError:
            continue
        if entry.pad_token_set is None:
            entry.pad_token_set = _pad_token_in(code)
        if entry.tokenize is None:
            program = read_program(code)
            for call in program.calls:
                if (
                    is_tokenizer_call(call)
                    and not call.written.endswith("from_pretrained")
                    and call.kwargs.get("padding") is not None
                ):
                    entry.tokenize = call
                    break


def _pad_token_in(code: CodeFile) -> str | None:
    """Where ``code`` gives a tokenizer a pad token: ``tokenizer.pad_token = ...`` or
    ``tokenizer.add_special_tokens({"pad_token": ...})``."""
    for unit in code.units:
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    named = (
                        isinstance(target, ast.Attribute)
                        and target.attr in ("pad_token", "pad_token_id")
                    ) or (  # special_tokens_dict["pad_token"] = ... (stanford_alpaca train.py)
                        isinstance(target, ast.Subscript)
                        and isinstance(target.slice, ast.Constant)
                        and target.slice.value == "pad_token"
                    )
                    if named:
                        return f"{ast.unparse(target)} = ... at {code.file}:{node.lineno}"
            if _gives_pad_token(node):
                # tokenizer.add_special_tokens({"pad_token": ...}), or a helper handed
                # dict(pad_token=...)
                return f"a pad_token special token at {code.file}:{getattr(node, 'lineno', 0)}"
    return None


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


def _imported_classes(
    tree: ast.Module, root: Path, names: list[str], origin: dict[str, str]
) -> dict[str, ClassInfo]:
    """The argument dataclasses an entry point imports from the project's own modules
    (FastChat's train_lora.py takes ModelArguments from fastchat/train/train.py; ChatGLM's
    ptuning/main.py from arguments.py); ``origin`` gets the file each is declared in."""
    from cfgcheck import safeio

    out: dict[str, ClassInfo] = {}
    for node in tree.body:
        if not (isinstance(node, ast.ImportFrom) and node.module and not node.level):
            continue
        wanted = {a.name for a in node.names} & set(names)
        if not wanted:
            continue
        path = root.joinpath(*node.module.split(".")).with_suffix(".py")
        if not (path.is_file() and inside(path, root)):
            continue
        try:
            module = ast.parse(safeio.read_text(path))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        found = classes_in(module)
        for name in wanted:
            if name in found:
                out[name] = found[name]
                origin[name] = _shown(path, root)
                for base in found[name].bases:  # a base declared next to it
                    if base in found and base not in out:
                        out[base] = found[base]
                        origin[base] = _shown(path, root)
    return out


def inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def _calls_by_function(code: CodeFile) -> dict[str, set[str]]:
    """function or method name -> the names it calls (the last part of each callee), read
    from the syntax tree: every branch, early returns included."""
    out: dict[str, set[str]] = {}
    for unit in code.units:
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                called = out.setdefault(node.name, set())
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call):
                        func = inner.func
                        if isinstance(func, ast.Name):
                            called.add(func.id)
                        elif isinstance(func, ast.Attribute):
                            called.add(func.attr)
    return out


def _per_sample(code: CodeFile) -> set[str]:
    """The functions a dataset's ``__getitem__`` reaches: each runs once per sample."""
    graph = _calls_by_function(code)
    reached: set[str] = set()
    todo = ["__getitem__"] if "__getitem__" in graph else []
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        todo.extend(n for n in graph.get(name, ()) if n in graph)
    return reached


def _data_path(entry: Entry) -> None:
    program = entry.program
    per_sample = _per_sample(entry.code)
    for call in program.calls:
        if not is_tokenizer_call(call) or call.written.endswith("from_pretrained"):
            continue
        if call.kwargs.get("padding") is None and call.kwargs.get("return_tensors") is None:
            continue  # a length count (len(tokenizer(turn).input_ids)), not the sample's tensor
        if entry.tokenize is None:
            entry.tokenize = call
        if call.function and call.function.split(".")[-1] in per_sample:
            entry.tokenize = call
            entry.per_sample = "a dataset's __getitem__ tokenizes one sample per call"
            break
    for target, _value, where in program.attributes:
        if target.endswith((".pad_token", ".pad_token_id")) and entry.pad_token_set is None:
            entry.pad_token_set = f"{target} = ... at {where}"
        if target.endswith(".rope_scaling") and entry.rope_scaling is None:
            entry.rope_scaling = where
    peft = program.find("get_peft_model")
    if peft:
        entry.applies_lora = peft[0].location
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
            kind = kind or _own_collator(entry.code, ast.unparse(arg.node))
            entry.collator = (kind or ast.unparse(arg.node), arg.location)
