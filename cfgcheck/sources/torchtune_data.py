"""What torchtune itself defines, read from ``keys/torchtune.json`` (written from torchtune's
source by ``scripts/gen_torchtune_builders.py``, never by importing torchtune): model builder ->
shape, component signatures, the keys each recipe reads, the recipe registry. Plus the two
things ``tune run`` does to a config before a recipe sees it: the launch line (recipe,
``--nproc_per_node``) and OmegaConf's ``${...}`` interpolation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Location
from cfgcheck.sources import torchtune_versions as tv
from cfgcheck.sources.base import NativeConfig

# torchtune family -> the Hugging Face model_type whose module layout cfgcheck uses for it.
# torchtune builds q/k/v/output and gate/up/down as separate linears in every family
# (phi3's component builder too: torchtune/models/phi3/_component_builders.py), so Phi-3/4
# take Llama's layout rather than transformers' fused qkv_proj / gate_up_proj.
ARCHITECTURE = {
    "llama2": "llama",
    "llama3": "llama",
    "llama3_1": "llama",
    "llama3_2": "llama",
    "llama3_3": "llama",
    "smol": "llama",
    "phi3": "llama",
    "phi4": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen2_5": "qwen2",
    "qwen3": "qwen3",
    "gemma": "gemma",
    "gemma2": "gemma2",
}
# Gemma's component builders tie the output to the embedding (TiedLinear) and use a
# tanh-GELU gated MLP (torchtune/models/gemma/_component_builders.py gemma_mlp).
GEMMA = ("gemma", "gemma2")
QWEN2 = "torchtune.models.qwen2."


def data(version: str | None = None) -> dict[str, Any]:
    """The tables of ``version`` (None: the newest; see :mod:`torchtune_versions`)."""
    return tv.tables(version)


def source(version: str | None = None) -> str:
    return str(data(version)["source"])


def builder(path: str, version: str | None = None) -> dict[str, Any] | None:
    entry = data(version)["builders"].get(path)
    return entry if isinstance(entry, dict) else None


def component(path: str, version: str | None = None) -> dict[str, Any] | None:
    """The signature of a torchtune component (a builder's own, or a public function/class)."""
    entry = builder(path, version)
    if entry is not None:
        sig = entry.get("signature")
        return sig if isinstance(sig, dict) else None
    sig = data(version)["components"].get(path)
    return sig if isinstance(sig, dict) else None


def recipe_keys(recipe: str, version: str | None = None) -> dict[str, list[str]] | None:
    entry = data(version)["recipes"].get(recipe)
    return entry if isinstance(entry, dict) else None


@cache
def all_recipe_keys() -> frozenset[str]:
    """The keys any recipe of any version reads (what holds in one version only is judged by
    :func:`torchtune_rules.version_key_rules`)."""
    return frozenset(
        k
        for version in tv.versions()
        for entry in data(version)["recipes"].values()
        for k in entry["keys"]
    )


def supports_distributed(recipe: str, version: str | None = None) -> bool:
    entry = data(version)["registry"].get(recipe)
    return bool(entry and entry.get("supports_distributed")) or "distributed" in recipe


def recipe_of_config(file: str, version: str | None = None) -> str | None:
    """The recipe the registry ships ``file`` with (``llama3_2/1B_lora.yaml``)."""
    norm = file.replace("\\", "/")
    for name, entry in data(version)["registry"].items():
        for config in entry.get("configs", []):
            if norm.endswith("/" + config) or norm == config:
                return str(name)
    return None


def version_of(native: NativeConfig) -> str:
    """The version whose tables ``native`` is read with."""
    return tv.resolve(native).table


def scale_hidden_dim_for_mlp(dim: int, multiple_of: int = 256) -> int:
    """torchtune/models/llama2/_model_utils.py scale_hidden_dim_for_mlp: the MLP width of a
    builder that passes no intermediate_dim."""
    hidden = 4 * int(2 * dim / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


SHAPE_ARGS = ("vocab_size", "num_layers", "num_heads", "embed_dim", "max_seq_len")


def decoder(entry: dict[str, Any]) -> bool:
    """A text decoder cfgcheck models: a family it knows, with a shape."""
    return entry.get("shape") is not None and entry.get("family") in ARCHITECTURE


def model_shape(
    path: str, entry: dict[str, Any], kwargs: dict[str, Any], version: str | None = None
) -> dict[str, Any] | str:
    """cfgcheck's ``model`` section for builder ``path``: its shape, with the config's
    arguments that change it (``tie_word_embeddings``; every shape argument of a component
    builder such as ``torchtune.models.llama2.llama2``). A string: what is missing."""
    params = set((entry.get("signature") or {}).get("params", []))
    shape = {**entry["shape"], **{k: v for k, v in kwargs.items() if k in params}}
    missing = [k for k in SHAPE_ARGS if not isinstance(shape.get(k), int)]
    if missing:
        return f"the config does not give it {', '.join(missing)} as whole numbers"
    family = str(entry["family"])
    embed, heads = int(shape["embed_dim"]), int(shape["num_heads"])
    head_dim = shape.get("head_dim") or embed // heads
    model: dict[str, Any] = {
        "name": path.rsplit(".", 1)[-1],
        "source": f"{path} ({source(version)})",
        "architecture": ARCHITECTURE.get(family),
        "block_size": int(shape["max_seq_len"]),
        "padded_vocab_size": int(shape["vocab_size"]),
        "n_layer": int(shape["num_layers"]),
        "n_embd": embed,
        "n_head": heads,
        "n_query_groups": int(shape.get("num_kv_heads") or heads),
        "head_size": int(head_dim),
        "intermediate_size": int(shape.get("intermediate_dim") or scale_hidden_dim_for_mlp(embed)),
        "mlp": "geglu" if family in GEMMA else "swiglu",
        "norm": "rmsnorm",
        # before q_proj_bias was an argument, qwen2's component builder (Qwen2 and 2.5) set
        # bias=True on q/k/v itself (pytorch/torchtune v0.6.1 torchtune/models/qwen2/
        # _component_builders.py:93-95)
        "attn_bias": bool(shape.get("q_proj_bias", str(entry.get("component")).startswith(QWEN2))),
        "tie_embeddings": family in GEMMA or bool(shape.get("tie_word_embeddings", False)),
        "norm_qk": bool(shape.get("q_norm", False)),
    }
    if family == "gemma2":
        # gemma2/_component_builders.py: sliding window on even layers, post-attention and
        # post-MLP norms (sa_scale / mlp_scale), tanh soft-capping of scores and logits
        model.update(
            sliding_window_size=shape.get("sliding_window_size"),
            sliding_window_pattern=2,
            post_attention_norm=True,
            post_mlp_norm=True,
            attention_logit_softcapping=shape.get("hidden_capping_value"),
            final_logit_softcapping=shape.get("final_capping_value"),
        )
    return model


# --- the launch line ------------------------------------------------------------------------

_TUNE_RUN = re.compile(r"tune\s+run\s+(?P<args>[^\n]*)")
_OPTION = re.compile(r"--(?P<name>nproc[_-]per[_-]node|nnodes)[ =](?P<value>\S+)")


@dataclass(frozen=True)
class Launch:
    recipe: str | None
    nproc_per_node: int
    nnodes: int
    where: Location | None  # what said so: the `tune run` comment line, the argument, None
    nproc_known: bool = False  # the file or the command gives --nproc_per_node


def _int(value: Any, what: str) -> int:
    try:
        number = int(str(value))
    except ValueError as e:
        raise ConfigLoadError(f"{what}={value!r}: expected a whole number") from e
    if number < 1:
        raise ConfigLoadError(f"{what}={value!r}: expected a whole number of at least 1")
    return number


@dataclass(frozen=True)
class _RunLine:
    line: int
    recipe: str | None
    config: str | None
    options: dict[str, str]


def _run_lines(text: str) -> list[_RunLine]:
    """The ``tune run ...`` commands of the file's comments."""
    found = []
    for number, line in enumerate(text.splitlines()[:200], 1):
        match = _TUNE_RUN.search(line) if line.lstrip().startswith("#") else None
        if match is None:
            continue
        args = match.group("args")
        options = {
            m.group("name").replace("-", "_"): m.group("value") for m in _OPTION.finditer(args)
        }
        words = _OPTION.sub(" ", args).split()
        config = words[words.index("--config") + 1] if "--config" in words[:-1] else None
        names = [
            w
            for i, w in enumerate(words)
            if not w.startswith("-")
            and re.fullmatch(r"[\w/.]+", w)
            and (i == 0 or words[i - 1] != "--config")
        ]
        found.append(_RunLine(number, names[0] if names else None, config, options))
    return found


def _this_file(run: _RunLine, file: str) -> bool:
    """The command's ``--config`` names this file (``llama3_2/1B_lora`` for
    ``.../1B_lora.yaml``, or a copy flattened to ``llama3_2_1B_lora.yaml``)."""
    if not run.config:
        return False
    stem = re.sub(r"\.ya?ml$", "", file.replace("\\", "/").rsplit("/", 1)[-1])
    config = re.sub(r"\.ya?ml$", "", run.config)
    base = config.rsplit("/", 1)[-1]
    return stem in (base, config.replace("/", "_")) or stem.endswith("_" + base)


def launch(native: NativeConfig) -> Launch:
    """The recipe and process counts: the command line (``options``: ``recipe``,
    ``nproc_per_node``), else the file's ``tune run ...`` comment (torchtune's configs document
    their command there; with several, the one whose ``--config`` is this file, else the one
    running the recipe of the opening "Config for ... in X.py" line, else the first), else the
    recipe torchtune's registry ships the file with."""
    # what the command line states (--recipe / FILE RECIPE, --nproc-per-node)
    given = {k: v for k, v in native.options.items() if k in ("recipe", "nproc_per_node")}
    recipe = given.get("recipe")
    nproc, nnodes = given.get("nproc_per_node"), None
    where: Location | None = (
        Location(
            "<" + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in given.items()) + ">", None
        )
        if given
        else None
    )
    runs = _run_lines(native.text)
    declared = _config_for(native.text)
    run = (
        next((r for r in runs if _this_file(r, native.file)), None)
        or next((r for r in runs if declared and r.recipe == declared), None)
        or (runs[0] if runs else None)
    )
    if run is not None:
        recipe = recipe or run.recipe
        where = where or Location(native.file, run.line)
        nproc = nproc if nproc is not None else run.options.get("nproc_per_node")
        nnodes = nnodes if nnodes is not None else run.options.get("nnodes")
    if recipe is None:
        recipe = recipe_of_config(native.file, version_of(native)) or declared
    return Launch(
        str(recipe).removesuffix(".py") if recipe else None,
        _int(nproc, "--nproc-per-node") if nproc is not None else 1,
        _int(nnodes, "--nnodes") if nnodes is not None else 1,
        where,
        nproc is not None,
    )


_CONFIG_FOR = re.compile(r"^#\s*Config for .*? in (?:recipes/)?(?P<recipe>[\w/]+)\.py")


def _config_for(text: str) -> str | None:
    """torchtune's configs open with "# Config for ... in full_finetune_distributed.py"."""
    for line in text.splitlines()[:3]:
        match = _CONFIG_FOR.match(line.strip())
        if match:
            return match.group("recipe")
    return None


# --- ${...} interpolation ---------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\{([^{}$\\]*)\}")
_PLAIN_REF = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")
# A resolver call (${oc.env:HOME}, ${eval:'...'}): the whole value is kept as written.
_RESOLVER = re.compile(r"\$\{\s*[A-Za-z_][\w.]*\s*:")
MAX_RESOLVED_CHARS = 100_000
# OmegaConf's grammar parser costs about 20 us a character: only this much interpolating text
# reaches it, each ${...} a plain key reference (screened by _screen, linear).
MAX_INTERPOLATING_CHARS = 50_000


def interpolate(native: NativeConfig) -> None:
    """Resolve ``${key}`` as OmegaConf does when a recipe reads the config ``tune run`` built
    (torchtune/config/_parse.py ``OmegaConf.load``), bounded: a value may not grow past
    ``MAX_RESOLVED_CHARS``, a cycle or a missing key is one line (exit 2). Resolver calls
    (``${oc.env:HOME}``) are never evaluated: they stay as written."""
    texts = {k: v for k, v in _strings(native.data) if "${" in v}
    if not texts:
        return
    _screen(native, texts)
    sizes: dict[str, int] = {}

    def size(key: str, seen: tuple[str, ...]) -> int:
        if key in sizes:
            return sizes[key]
        if key in seen:
            raise ConfigLoadError(
                f"{_at(native, key)}{key}: the interpolation cycles ({' -> '.join((*seen, key))})"
            )
        value = texts.get(key)
        if value is None or _RESOLVER.search(value):
            return 16 if value is None else len(value)  # a plain value, or kept as written
        total = len(value)
        for ref in _INTERPOLATION.findall(value):
            if ":" in ref:
                continue
            if isinstance(native.get(ref), dict | list):
                # a copy of a whole section per reference can grow without bound
                raise ConfigLoadError(
                    f"{_at(native, key)}{key}: ${{{ref}}} names a section; only values are "
                    "interpolated"
                )
            total += size(ref, (*seen, key))
            if total > MAX_RESOLVED_CHARS:
                raise ConfigLoadError(
                    f"{_at(native, key)}{key}: its interpolations expand past "
                    f"{MAX_RESOLVED_CHARS:,} characters"
                )
        sizes[key] = total
        return total

    for key in texts:
        size(key, ())
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

    escaped = _escape_resolvers(native.data)
    try:
        resolved = OmegaConf.to_container(OmegaConf.create(escaped), resolve=True)
    except InterpolationKeyError as e:
        missing = re.search(r"key '([^']*)'", str(e))
        name = missing.group(1) if missing else "?"
        # the key whose own text names it (OmegaConf reports the first key that led there)
        key = next(
            (k for k, v in texts.items() if "${" + name + "}" in v),
            str(getattr(e, "full_key", "") or ""),
        )
        raise ConfigLoadError(
            f"{_at(native, key)}{key}: ${{{name}}} names a key the config does not have "
            f"(OmegaConf raises \"InterpolationKeyError: Interpolation key '{name}' not found\" "
            "when the recipe reads it)"
        ) from e
    except (OmegaConfBaseException, RecursionError, ValueError) as e:
        text = " ".join(str(e).split()[:40])
        raise ConfigLoadError(f"{native.file}: cannot resolve an interpolation: {text}") from e
    if isinstance(resolved, dict):
        native.data = {str(k): v for k, v in resolved.items()}


def _strings(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every (dotted key, string) of nested mappings and lists (list items as key.0)."""
    if isinstance(value, dict):
        return [
            pair
            for k, v in value.items()
            for pair in _strings(v, f"{prefix}.{k}" if prefix else str(k))
        ]
    if isinstance(value, list):
        return [pair for i, v in enumerate(value) for pair in _strings(v, f"{prefix}.{i}")]
    return [(prefix, value)] if isinstance(value, str) else []


def _screen(native: NativeConfig, texts: dict[str, str]) -> None:
    """Only plain ``${a.b}`` references (and resolver calls, kept as text) reach OmegaConf: a
    nested or escaped interpolation, or too much interpolating text, is one line."""
    total = 0
    for key, value in texts.items():
        total += len(value)
        if total > MAX_INTERPOLATING_CHARS:
            raise ConfigLoadError(
                f"{_at(native, key)}more than {MAX_INTERPOLATING_CHARS:,} characters of "
                "values with ${...} interpolations"
            )
        rest = _INTERPOLATION.sub("", value)
        refs = _INTERPOLATION.findall(value)
        plain = "${" not in rest and all(_PLAIN_REF.fullmatch(r) for r in refs)
        if "\\$" in value or not (plain or _RESOLVER.search(value)):
            raise ConfigLoadError(
                f"{_at(native, key)}{key}: {value[:80]!r}: only plain ${{key.path}} "
                "interpolations are resolved (no nested, escaped or relative ones)"
            )


def _escape_resolvers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _escape_resolvers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_resolvers(v) for v in value]
    if isinstance(value, str) and _RESOLVER.search(value):
        return value.replace("${", "\\${")  # never evaluated: the value stays as written
    return value


def _at(native: NativeConfig, key: str) -> str:
    where = native.loc(key) if key else None
    return f"{where}: " if where else f"{native.file}: "
