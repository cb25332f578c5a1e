"""Generate ``cfgcheck/sources/keys/torchtune.json`` from torchtune's own source, with ``ast``.

torchtune is never imported: the source is read from a git directory (the ``fetch`` mirror of
pytorch/torchtune) at a commit, and parsed. What it writes:

- ``builders``: every model builder of ``torchtune/models/*/_model_builders.py`` (and the
  ``partial`` / alias variants: ``qlora_*``, ``llama3_3_70b = llama3_1_70b``) -> the keyword
  arguments its component builder (``_component_builders.py``) finally receives, with the
  component's own defaults filled in: vocab_size, num_layers, num_heads, num_kv_heads,
  embed_dim, intermediate_dim, max_seq_len, rope_base, norm_eps, tie_word_embeddings, head_dim,
  q_proj_bias, sliding_window_size, capping values, ... plus the family, the component, whether
  it is a LoRA builder, and its own signature (what ``config.instantiate`` may pass it).
- ``components``: the signature of every public function and class of the packages a recipe
  config names with ``_component_`` (tokenizers, datasets, losses, checkpointers, collates,
  schedulers, metric loggers): parameter names, required ones, defaults, and ``**kwargs``.
- ``registry``: ``torchtune/_recipe_registry.py``: each recipe's ``supports_distributed`` and
  the config files shipped for it.
- ``recipes``: per recipe (``recipes/*.py``), the top-level config keys its code reads
  (``cfg.key``, ``cfg.get("key")``, ``cfg["key"]``), and which of them it reads without a
  default (``cfg.key``: OmegaConf raises ``ConfigAttributeError: Missing key`` when absent),
  and the ``model`` keys its ``_setup_model`` reads the same way (``cfg_model.lora_rank``).

Per release: the same tables at each tag of ``--tags`` (v0.5.0, v0.6.0, v0.6.1: the releases
on PyPI), written to ``keys/torchtune_versions.json`` as what each has that differs from
``--commit`` (names it lacks, entries that differ), with each tag's commit and ``version.txt``.

Usage::

    python scripts/gen_torchtune_builders.py --git-dir /work/.mirror/pytorch+torchtune/repo \
        [--commit HEAD] [--out cfgcheck/sources/keys/torchtune.json] [--tags v0.5.0,...]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KEYS = Path(__file__).resolve().parent.parent / "cfgcheck" / "sources" / "keys"
OUT = KEYS / "torchtune.json"
VERSIONS_OUT = KEYS / "torchtune_versions.json"
# The releases people pin (PyPI: 0.6.1 is the newest), kept as differences from --commit (main).
TAGS = ("v0.5.0", "v0.6.0", "v0.6.1")
# Packages whose public names a recipe config names with _component_.
COMPONENT_PACKAGES = (
    "torchtune/models/",
    "torchtune/datasets/",
    "torchtune/data/",
    "torchtune/modules/",
    "torchtune/training/",
    "torchtune/rlhf/",
    "torchtune/dev/",
)
UNRESOLVED = "<unresolved>"


class Source:
    def __init__(self, git_dir: str, commit: str) -> None:
        self.git_dir = git_dir
        self.commit = subprocess.run(
            ["git", "--git-dir", git_dir, "rev-parse", commit],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        listing = subprocess.run(
            ["git", "--git-dir", git_dir, "ls-tree", "-r", "--name-only", self.commit],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        self.listing = set(listing.splitlines())
        self._read: dict[str, str] = {}
        self.files = [f for f in listing.splitlines() if f.endswith(".py")]

    def read(self, path: str) -> str:
        if path not in self._read:
            self._read[path] = self._show(path)
        return self._read[path]

    def _show(self, path: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", self.git_dir, "show", f"{self.commit}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout


def module_of(path: str) -> str:
    mod = path.removesuffix(".py").replace("/", ".")
    return mod.removesuffix(".__init__")


@dataclass
class Module:
    name: str
    tree: ast.Module
    defs: dict[str, ast.FunctionDef | ast.ClassDef] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)  # name = other / partial(...)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target
    constants: dict[str, Any] = field(default_factory=dict)


def parse_module(name: str, text: str, is_package: bool) -> Module:
    tree = ast.parse(text)
    mod = Module(name, tree)
    package = name if is_package else name.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            mod.defs[node.name] = node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if not isinstance(target, ast.Name):
                continue
            if isinstance(node.value, ast.Name | ast.Call | ast.Attribute):
                mod.aliases[target.id] = node.value
            with contextlib.suppress(ValueError, SyntaxError, TypeError):
                mod.constants[target.id] = ast.literal_eval(node.value)
        elif isinstance(node, ast.ImportFrom) and (node.module is not None or node.level):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                mod.imports[alias.asname or alias.name] = f"{base}.{alias.name}"
    return mod


class Index:
    def __init__(self, src: Source) -> None:
        self.modules: dict[str, Module] = {}
        for path in src.files:
            if path.startswith("torchtune/"):
                try:
                    name, text = module_of(path), src.read(path)
                    self.modules[name] = parse_module(name, text, path.endswith("__init__.py"))
                except SyntaxError:
                    continue

    def resolve(self, dotted: str, depth: int = 0) -> tuple[Module, str] | None:
        """The module and local name that define ``dotted`` (following re-exports)."""
        if depth > 12:
            return None
        mod_name, _, name = dotted.rpartition(".")
        mod = self.modules.get(mod_name)
        if mod is None:
            return None
        if name in mod.defs or name in mod.aliases:
            return mod, name
        if name in mod.imports:
            return self.resolve(mod.imports[name], depth + 1)
        return None

    def lookup(self, mod: Module, name: str) -> tuple[Module, str] | None:
        if name in mod.defs or name in mod.aliases:
            return mod, name
        if name in mod.imports:
            return self.resolve(mod.imports[name])
        return None


def literal(node: ast.expr | None, env: dict[str, Any], mod: Module | None = None) -> Any:
    if node is None:
        return None
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if mod is not None and node.id in mod.constants:
            return mod.constants[node.id]
        return UNRESOLVED
    if isinstance(node, ast.Attribute):
        return UNRESOLVED
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return UNRESOLVED


def signature(node: ast.FunctionDef | ast.ClassDef, mod: Module) -> dict[str, Any] | None:
    """Parameters, required ones, literal defaults and **kwargs of a function or a class's
    ``__init__`` (None: a class without its own ``__init__``: not checked)."""
    func: ast.FunctionDef | None
    if isinstance(node, ast.ClassDef):
        func = next(
            (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
            None,
        )
        if func is None:
            return None
    else:
        func = node
    a = func.args
    positional = [*a.posonlyargs, *a.args]
    if isinstance(node, ast.ClassDef) and positional:
        positional = positional[1:]  # self
    defaults: dict[str, Any] = {}
    required: list[str] = []
    first_default = len(positional) - len(a.defaults)
    for i, arg in enumerate(positional):
        if i >= first_default:
            defaults[arg.arg] = literal(a.defaults[i - first_default], {}, mod)
        else:
            required.append(arg.arg)
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        if default is None:
            required.append(arg.arg)
        else:
            defaults[arg.arg] = literal(default, {}, mod)
    return {
        "kind": "class" if isinstance(node, ast.ClassDef) else "function",
        "params": [x.arg for x in positional + a.kwonlyargs],
        "required": required,
        "kwonly": [x.arg for x in a.kwonlyargs],
        "defaults": defaults,
        "var_kwargs": a.kwarg is not None,
        "var_args": a.vararg is not None,
    }


def _return_call(func: ast.FunctionDef) -> ast.Call | None:
    returns = [n for n in func.body if isinstance(n, ast.Return)]
    if len(returns) == 1 and isinstance(returns[0].value, ast.Call):
        return returns[0].value
    return None


def _callee(call: ast.Call) -> str | None:
    return call.func.id if isinstance(call.func, ast.Name) else None


def _bind(
    func: ast.FunctionDef, mod: Module, call_args: list[Any], call_kwargs: dict[str, Any]
) -> dict[str, Any]:
    sig = signature(func, mod) or {"params": [], "defaults": {}}
    env = dict(sig["defaults"])
    for name, value in zip(sig["params"], call_args, strict=False):
        env[name] = value
    env.update(call_kwargs)
    return env


def evaluate(
    index: Index, mod: Module, name: str, kwargs: dict[str, Any], depth: int = 0
) -> dict[str, Any] | None:
    """Follow ``name(**kwargs)`` down to the component builder that builds the decoder; its
    bound arguments (defaults filled) and its name."""
    if depth > 8:
        return None
    found = index.lookup(mod, name)
    if found is None:
        return None
    mod, name = found
    if name in mod.aliases:
        node = mod.aliases[name]
        if isinstance(node, ast.Name):
            return evaluate(index, mod, node.id, kwargs, depth + 1)
        if (
            isinstance(node, ast.Call)
            and _callee(node) == "partial"
            and node.args
            and isinstance(node.args[0], ast.Name)
        ):
            bound = {k.arg: literal(k.value, {}, mod) for k in node.keywords if k.arg}
            return evaluate(index, mod, node.args[0].id, {**bound, **kwargs}, depth + 1)
        return None
    func = mod.defs[name]
    if not isinstance(func, ast.FunctionDef):
        return None
    env = _bind(func, mod, [], kwargs)
    call = _return_call(func)
    callee = _callee(call) if call is not None else None
    if call is not None and callee is not None and index.lookup(mod, callee) is not None:
        inner = index.lookup(mod, callee)
        assert inner is not None
        inner_mod, inner_name = inner
        inner_node = inner_mod.defs.get(inner_name)
        if isinstance(inner_node, ast.FunctionDef) and inner_node.name[0].islower():
            args = [literal(a, env, mod) for a in call.args]
            kws = {k.arg: literal(k.value, env, mod) for k in call.keywords if k.arg}
            inner_env = _bind(inner_node, inner_mod, args, kws)
            deeper = evaluate(index, inner_mod, inner_name, inner_env, depth + 1)
            if deeper is not None:
                return deeper
    return {"component": f"{mod.name}.{name}", "args": env}


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in values.items()
        if isinstance(v, int | float | bool | str | type(None)) and v != UNRESOLVED
    }


def builders(index: Index) -> dict[str, Any]:
    """Model builders -> their decoder shape (``shape`` None: not a text decoder, such as the
    vision and mixture-of-experts builders); public component builders (``llama2``, named
    with every shape argument in the config) -> their defaults."""
    out: dict[str, Any] = {}
    for mod_name, mod in sorted(index.modules.items()):
        if not mod_name.startswith("torchtune.models."):
            continue
        family = mod_name.split(".")[2]
        package = f"torchtune.models.{family}"
        if mod_name.endswith("._component_builders"):
            exported = index.modules.get(package)
            for name, node in mod.defs.items():
                if name.startswith("_") or not isinstance(node, ast.FunctionDef):
                    continue
                sig = signature(node, mod)
                if sig is None or not {"num_layers", "embed_dim"} <= set(sig["params"]):
                    continue
                public = exported is not None and name in exported.imports
                out[f"{package if public else mod_name}.{name}"] = {
                    "family": family,
                    "component": f"{mod_name}.{name}",
                    "component_builder": True,
                    "lora": "lora_attn_modules" in sig["params"],
                    "shape": _plain(sig["defaults"]),
                    "signature": sig,
                }
            continue
        if not mod_name.endswith("._model_builders"):
            continue
        for name in [*mod.defs, *mod.aliases]:
            if name.startswith("_") or "tokenizer" in name or "transform" in name:
                continue
            node = mod.defs.get(name)
            if node is not None and not isinstance(node, ast.FunctionDef):
                continue
            own = _own_signature(index, mod, name)
            result = evaluate(index, mod, name, {})
            args = _plain(result["args"]) if result is not None else {}
            decoder = "num_layers" in args and "embed_dim" in args
            out[f"{package}.{name}"] = {
                "family": family,
                "component": result["component"] if result is not None else None,
                "lora": "lora_attn_modules" in (own or {}).get("params", []),
                "shape": args if decoder else None,
                "signature": own,
            }
    return out


def _own_signature(index: Index, mod: Module, name: str) -> dict[str, Any] | None:
    """The builder's own signature (a partial's is its target's, with its bound defaults)."""
    if name in mod.defs:
        return signature(mod.defs[name], mod)
    node = mod.aliases.get(name)
    if isinstance(node, ast.Name):
        found = index.lookup(mod, node.id)
        return _own_signature(index, *found) if found else None
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
        found = index.lookup(mod, node.args[0].id)
        sig = _own_signature(index, *found) if found else None
        if sig is not None:
            bound = {k.arg: literal(k.value, {}, mod) for k in node.keywords if k.arg}
            sig = {**sig, "defaults": {**sig["defaults"], **bound}}
            sig["required"] = [r for r in sig["required"] if r not in bound]
        return sig
    return None


def components(index: Index) -> dict[str, Any]:
    """Public names of the component packages, by every dotted path that reaches them."""
    out: dict[str, Any] = {}
    for mod_name, mod in sorted(index.modules.items()):
        path = mod_name.replace(".", "/") + "/"
        if not any(path.startswith(p) for p in COMPONENT_PACKAGES) or "/_" in path:
            continue  # configs name public paths (torchtune.datasets.alpaca_dataset)
        names = set(mod.defs) | set(mod.imports) | set(mod.aliases)
        for name in sorted(names):
            if name.startswith("_") or name.isupper():
                continue
            found = index.lookup(mod, name)
            if found is None:
                # imported from outside torchtune (torchao's quantizers): it exists, its
                # signature is not torchtune's to check
                if name in mod.imports and not mod.imports[name].startswith("torchtune."):
                    out[f"{mod_name}.{name}"] = {"kind": "external", "from": mod.imports[name]}
                continue
            target_mod, target = found
            node = target_mod.defs.get(target)
            sig = _own_signature(index, target_mod, target) if node is None else None
            if node is not None:
                sig = signature(node, target_mod)
            # a class without its own __init__, an alias of an expression: exists, unchecked
            out[f"{mod_name}.{name}"] = sig if sig is not None else {"kind": "opaque"}
    return out


def _cfg_keys(tree: ast.AST, owner: str) -> tuple[set[str], set[str]]:
    """(keys read, keys always read without a default) on ``owner`` (``cfg``, ``self._cfg``):
    a ``cfg.key`` read under an ``if`` / ``try`` / conditional expression is not required
    (``cfg.dataset_val`` only when validation runs), nor one also read with ``cfg.get``."""

    def is_owner(node: ast.expr) -> bool:
        return ast.unparse(node) == owner

    read: set[str] = set()
    strict: set[str] = set()
    optional: set[str] = set()

    def visit(node: ast.AST, conditional: bool) -> None:
        if isinstance(node, ast.Attribute) and is_owner(node.value):
            if node.attr not in ("get", "pop", "keys", "items", "values"):
                read.add(node.attr)
                (optional if conditional else strict).add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and is_owner(node.func.value)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            read.add(node.args[0].value)
            optional.add(node.args[0].value)
        elif (
            isinstance(node, ast.Subscript)
            and is_owner(node.value)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            read.add(node.slice.value)
            (optional if conditional else strict).add(node.slice.value)
        if isinstance(node, ast.If | ast.IfExp | ast.Try | ast.BoolOp):
            for child in ast.iter_child_nodes(node):
                # an if's test always runs; its branches may not
                test = getattr(node, "test", None)
                visit(child, conditional or child is not test)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, conditional)

    visit(tree, False)
    return read, strict - optional


def recipes(src: Source, index: Index) -> dict[str, Any]:
    # CheckpointClient(cfg) reads the checkpoint keys of every recipe that builds one.
    client_read: set[str] = set()
    client_path = "torchtune/training/checkpointing/_checkpoint_client.py"
    if client_path in src.files:
        client_read, _ = _cfg_keys(ast.parse(src.read(client_path)), "self._cfg")
    # Module-level string constants (PROFILER_KEY = "profiler") used as cfg.get(NAME).
    constants = {
        k: v
        for mod in index.modules.values()
        for k, v in mod.constants.items()
        if isinstance(v, str) and k.isupper()
    }
    out: dict[str, Any] = {}
    for path in src.files:
        if not path.startswith("recipes/") or path.count("/") > 2 or "__init__" in path:
            continue
        text = src.read(path)
        tree = ast.parse(text)
        read, strict = _cfg_keys(tree, "cfg")
        local = parse_module(module_of(path), text, False).constants
        names = {**constants, **{k: v for k, v in local.items() if isinstance(v, str)}}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and ast.unparse(node.func.value) == "cfg"
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in names
            ):
                read.add(names[node.args[0].id])
        if "CheckpointClient(cfg)" in text:
            read |= client_read
        if not read:
            continue
        name = path.removeprefix("recipes/").removesuffix(".py")
        # _setup_model(cfg_model=cfg.model) reads these model keys (cfg_model.lora_rank).
        _, model_strict = _cfg_keys(tree, "cfg_model")
        out[name] = {
            "keys": sorted(read),
            "required": sorted(strict),
            "model_required": sorted(model_strict),
        }
    return out


def registry(src: Source) -> dict[str, Any]:
    """torchtune/_recipe_registry.py: each recipe's name, whether ``tune run`` may launch it
    with torchrun (``supports_distributed``), and the config files it ships with."""
    path = "torchtune/_recipe_registry.py"
    if path not in src.files:
        return {}
    out: dict[str, Any] = {}
    for node in ast.walk(ast.parse(src.read(path))):
        if not (isinstance(node, ast.Call) and _callee(node) == "Recipe"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        name = literal(kw.get("name"), {})
        configs = [
            literal(k.value, {})
            for c in ast.walk(kw["configs"])
            if isinstance(c, ast.Call) and _callee(c) == "Config"
            for k in c.keywords
            if k.arg == "file_path"
        ]
        out[str(name)] = {
            "supports_distributed": literal(kw.get("supports_distributed"), {}),
            "configs": configs,
        }
    return out


def generate(git_dir: str, commit: str) -> dict[str, Any]:
    src = Source(git_dir, commit)
    index = Index(src)
    version = src.read("version.txt").strip() if "version.txt" in src.listing else None
    return {
        "source": f"pytorch/torchtune at {src.commit}",
        "version": version,
        "generated_by": "scripts/gen_torchtune_builders.py (ast; torchtune is never imported)",
        "builders": builders(index),
        "components": components(index),
        "recipes": recipes(src, index),
        "registry": registry(src),
        "checks": checks(src),
        # torchtune's packages (folders with __init__.py): what import_module says of a
        # missing name under each (config._utils._get_component_from_path)
        "packages": {
            module_of(f): True
            for f in src.files
            if f.startswith("torchtune/") and f.endswith("/__init__.py")
        },
    }


SECTIONS = ("builders", "components", "recipes", "registry", "checks", "packages")
# The refusals cfgcheck's torchtune rules quote (cfgcheck/sources/torchtune_rules.py): each
# fragment -> the files of this version whose code says it (none: the version lacks the check).
CHECKS = (
    "fp16 precision is not supported in this recipe",
    "enable_activation_offloading should only be True when enable_activation_checkpointing",
    "left_pad_sequence collator is only for inference",
    "does not support distributed training",
    "PackedDataset requires a max_seq_len to be set on the tokenizer",
    "Must pass one or more of",
    "apply_lora_to_output is currently not supporting in llama3.2 1b and 3b",
    "Unknown target module",
    "of input tensor should be smaller than max_seq_len",
    "must be one of",
    "Error loading",
)


def checks(src: Source) -> dict[str, list[str]]:
    texts = {
        f: src.read(f)
        for f in src.files
        if f.startswith("torchtune/") or (f.startswith("recipes/") and f.count("/") == 1)
    }
    out: dict[str, list[str]] = {}
    for fragment in CHECKS:
        words = fragment.split()
        out[fragment] = sorted(
            f for f, text in texts.items() if fragment in text or _split_fstring(words, text)
        )
    return out


def _split_fstring(words: list[str], text: str) -> bool:
    """A message written over several string literals ("seq_len ({x}) of input tensor "
    "should be smaller than ..."): every word in order within a few hundred characters."""
    start = text.find(words[0])
    while start != -1:
        at = start
        for word in words[1:]:
            at = text.find(word, at)
            if at == -1 or at - start > 300:
                break
        else:
            return True
        start = text.find(words[0], start + 1)
    return False


def diff(newest: dict[str, Any], older: dict[str, Any], tag: str) -> dict[str, Any]:
    """What release ``tag`` has that differs from the newest data: per section, the names it
    lacks (``removed``) and its own entries where they differ or are its alone (``changed``);
    :func:`cfgcheck.sources.torchtune_data.data` applies it back onto the newest."""
    out: dict[str, Any] = {"tag": tag, "source": older["source"], "version": older["version"]}
    for section in SECTIONS:
        new, old = newest[section], older[section]
        out.setdefault("removed", {})[section] = sorted(set(new) - set(old))
        out.setdefault("changed", {})[section] = {
            k: v for k, v in sorted(old.items()) if new.get(k) != v
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git-dir", default="/work/.mirror/pytorch+torchtune/repo")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--tags",
        default=",".join(TAGS),
        help="releases written to --versions-out as differences from --commit ('' for none)",
    )
    parser.add_argument("--versions-out", type=Path, default=VERSIONS_OUT)
    args = parser.parse_args()
    data = generate(args.git_dir, args.commit)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", "utf-8")
    print(
        f"{args.out}: {len(data['builders'])} builders, {len(data['components'])} components, "
        f"{len(data['recipes'])} recipes from {data['source']} (version.txt {data['version']})"
    )
    tags = [t for t in args.tags.split(",") if t]
    if not tags:
        return
    releases = {}
    for tag in tags:
        older = generate(args.git_dir, tag)
        releases[str(older["version"])] = diff(data, older, tag)
        removed = sum(len(v) for v in releases[str(older["version"])]["removed"].values())
        changed = sum(len(v) for v in releases[str(older["version"])]["changed"].values())
        print(f"  {tag} ({older['source']}): {removed} names absent, {changed} entries differ")
    table = {
        "newest": {"source": data["source"], "version": data["version"]},
        "generated_by": data["generated_by"],
        "releases": releases,
    }
    args.versions_out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"{args.versions_out}: {', '.join(releases)}")


if __name__ == "__main__":
    main()
