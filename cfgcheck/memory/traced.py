"""The shapes of an architecture cfgcheck has no hand-written layout for, read off the real
transformers model built from its ``config.json`` on the meta device (no weights, no download,
never ``trust_remote_code``).

The shapes layer of :mod:`cfgcheck.memory`: it imports nothing of cfgcheck but the schema and
:mod:`cfgcheck.quiet`, and torch / transformers only when a trace is asked for. A trace holds,
per module path of ``model.named_modules()``: its kind (what PEFT's LoRA can wrap: ``nn.Linear``
and transformers' ``Conv1D`` are linears, ``nn.Embedding`` embeddings; PEFT refuses everything
else, ``peft/tuners/lora/model.py`` ``_create_new_module``), the linears' in/out features and
bias, the parameters it owns, and the mixture-of-experts facts: transformers 5 stores the routed
experts of every MoE family as fused 3D parameters of one ``*Experts`` module
(``models/mixtral/modeling_mixtral.py`` ``MixtralExperts``: ``gate_up_proj`` of ``(num_experts,
2 * intermediate, hidden)`` and ``down_proj``; the same in qwen2_moe, qwen3_moe, deepseek_v2/v3,
gpt_oss, olmoe, llama4), and each token runs ``top_k`` of them (the router's ``top_k``,
``config.num_experts_per_tok``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from cfgcheck.quiet import quiet_imports

# Module kinds: what PEFT's LoRA can wrap ("linear", "embedding") and what it refuses.
LINEAR, EMBEDDING, NORM, OTHER = "linear", "embedding", "norm", "other"
# config.json keys that describe files, not the shape (and quantization_config, which
# from_config would hand to a quantizer; the stored format is read separately).
_NOT_SHAPE = ("quantization_config", "auto_map", "transformers_version")


# PEFT (peft/utils/transformers_weight_conversion.py, 0.21: _MOE_TARGET_MODULE_MAPPING and
# _MOE_FUSED_TARGETS): for a model whose transformers conversion pattern is mixtral or qwen2_moe
# (transformers.conversion_mapping._MODEL_TO_CONVERSION_PATTERN, PEFT adding mixtral itself),
# get_peft_model turns these transformers-4 names in target_modules into target_parameters on
# the fused experts (LoRA on a 3D parameter, lora.ParamWrapper: rank r per expert, doubled on
# the fused gate_up_proj) and on the router's weight; naming one of a fused pair raises
# "Cannot convert PEFT target(s) ... because they are fused into gate_up_proj".
PEFT_MOE_NAMES: dict[str, dict[str, str]] = {
    "mixtral": {
        "gate": "gate.weight",
        "w1": "gate_up_proj",
        "w3": "gate_up_proj",
        "w2": "down_proj",
    },
    "qwen2_moe": {
        "gate": "gate.weight",
        "gate_proj": "gate_up_proj",
        "up_proj": "gate_up_proj",
        "down_proj": "down_proj",
    },
}
PEFT_MOE_FUSED: dict[str, tuple[str, ...]] = {
    "mixtral": ("w1", "w3"),
    "qwen2_moe": ("gate_proj", "up_proj"),
}


class TraceError(ValueError):
    """The architecture cannot be built by the installed transformers. One-line message."""


@dataclass(frozen=True)
class TracedLinear:
    in_features: int
    out_features: int
    bias: bool


@dataclass(frozen=True)
class Experts:
    """The routed experts of one MoE layer: a fused ``*Experts`` module."""

    path: str  # e.g. model.layers.3.mlp.experts
    n_expert: int
    top_k: int
    params: int  # all experts of this layer
    width: int  # one expert's intermediate size

    @property
    def active(self) -> int:
        return self.params // self.n_expert * self.top_k


@dataclass(frozen=True)
class Trace:
    """What the meta-device model says about an architecture."""

    model_type: str
    cls: str  # the class transformers built, e.g. MixtralForCausalLM
    total: int  # sum(p.numel() for p in model.parameters()) (tied weights once)
    tree: Mapping[str, str]  # module path -> kind (root excluded)
    linears: Mapping[str, TracedLinear]  # path -> shape, lm_head included
    params: Mapping[str, int]  # path -> parameters the module itself owns
    layers: str  # the decoder layers' ModuleList path, e.g. model.layers
    n_layer: int
    rows: int  # input embedding rows
    hidden: int
    tied: bool
    lm_head: str | None  # path of the output embedding
    experts: tuple[Experts, ...] = ()
    peft_moe: str | None = None  # the PEFT_MOE_NAMES table PEFT converts targets with
    supports_sdpa: bool = True  # the class's _supports_sdpa (modeling_utils.py checks it)
    # the MLP activation the built config holds (its text config's activation_function,
    # hidden_act or hidden_activation, the config class's default where config.json has none)
    activation: str | None = None
    # full name -> shape of every parameter, as PEFT's target_parameters matches them
    # (``f"{module_name}.{param_name}"`` over named_modules / named_parameters(recurse=False))
    param_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def expert_params(self) -> int:
        return sum(e.params for e in self.experts)

    @property
    def active(self) -> int:
        """Parameters one token runs through: the total less the routed experts it skips."""
        return self.total - sum(e.params - e.active for e in self.experts)

    def layer_of(self, path: str) -> int | None:
        prefix = self.layers + "."
        if not path.startswith(prefix):
            return None
        head = path[len(prefix) :].split(".", 1)[0]
        return int(head) if head.isdigit() else None

    def owned(self, kind: str, layer: int | None = None, everywhere: bool = False) -> int:
        """Parameters of the modules of ``kind`` (in decoder layer ``layer``, or outside the
        layers, or ``everywhere``)."""
        return sum(
            n
            for p, n in self.params.items()
            if self.tree.get(p) == kind and (everywhere or self.layer_of(p) == layer)
        )


def text_config(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's keys of a composite config (Gemma 3's ``text_config``)."""
    nested = data.get("text_config")
    return nested if isinstance(nested, Mapping) else data


def trace_key(data: Mapping[str, Any]) -> str:
    """What a trace of a config.json mapping depends on in it: its shape keys, as JSON."""
    clean = {k: v for k, v in data.items() if k not in _NOT_SHAPE}
    try:
        return json.dumps(clean, sort_keys=True, default=str)
    except (TypeError, ValueError) as e:
        raise TraceError(f"the config cannot be serialized: {e}") from e


def trace(data: Mapping[str, Any]) -> Trace:
    """The meta-device trace of a config.json mapping, cached by its content: in this process,
    and across processes by :mod:`cfgcheck.memory.trace_cache` (shipped traces of the presets,
    then the on-disk cache), so a traced architecture imports neither torch nor transformers."""
    return _trace(trace_key(data))


@lru_cache(maxsize=32)
def _trace(key: str) -> Trace:
    from cfgcheck.memory import trace_cache

    kept = trace_cache.load(key)
    tr = None if kept is None else from_json(kept)
    if tr is None:
        tr = build(key)
        trace_cache.store(key, to_json(tr))
    return tr


def to_json(tr: Trace) -> dict[str, Any]:
    """A trace as JSON data (:func:`from_json` gives it back, equal and in the same order)."""
    return {
        **{f: getattr(tr, f) for f in _SCALARS},
        "tree": dict(tr.tree),
        "linears": {p: [x.in_features, x.out_features, x.bias] for p, x in tr.linears.items()},
        "params": dict(tr.params),
        "experts": [[e.path, e.n_expert, e.top_k, e.params, e.width] for e in tr.experts],
        "param_shapes": {p: list(s) for p, s in tr.param_shapes.items()},
    }


_SCALARS = {  # field -> its types in JSON
    "model_type": (str,),
    "cls": (str,),
    "total": (int,),
    "layers": (str,),
    "n_layer": (int,),
    "rows": (int,),
    "hidden": (int,),
    "tied": (bool,),
    "lm_head": (str, type(None)),
    "peft_moe": (str, type(None)),
    "supports_sdpa": (bool,),
    "activation": (str, type(None)),
}


def _ints(values: Any, n: int | None = None) -> bool:
    ok = isinstance(values, list) and (n is None or len(values) == n)
    return ok and all(type(v) is int for v in values)


def from_json(data: Mapping[str, Any]) -> Trace | None:
    """The trace :func:`to_json` wrote, or None when ``data`` is not one (a corrupt entry)."""
    try:
        if set(data) != {*_SCALARS, "tree", "linears", "params", "experts", "param_shapes"}:
            return None
        tree, linears, params = data["tree"], data["linears"], data["params"]
        experts, shapes = data["experts"], data["param_shapes"]
        ok = all(type(data[f]) in types for f, types in _SCALARS.items())
        ok = ok and all(isinstance(v, str) for v in tree.values())
        ok = ok and all(_ints(x[:2], 2) and type(x[2]) is bool for x in linears.values())
        ok = ok and all(type(v) is int for v in params.values())
        ok = ok and all(isinstance(e[0], str) and _ints(e[1:], 4) for e in experts)
        ok = ok and all(_ints(s) for s in shapes.values())
        if not ok:
            return None
        return Trace(
            **{f: data[f] for f in _SCALARS},
            tree=dict(tree),
            linears={p: TracedLinear(x[0], x[1], x[2]) for p, x in linears.items()},
            params=dict(params),
            experts=tuple(Experts(e[0], *e[1:]) for e in experts),
            param_shapes={p: tuple(s) for p, s in shapes.items()},
        )
    except (AttributeError, TypeError, IndexError, KeyError):  # a list where a dict was...
        return None


def build(key: str) -> Trace:
    """The trace of :func:`trace_key`'s ``key``, read off the model built on the meta device
    (torch and transformers imported; no cache)."""
    data = json.loads(key)
    model_type = data.get("model_type")
    try:
        import torch
        import transformers
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError as e:
        raise TraceError(
            f"model_type {model_type!r} is read by building it with transformers on the meta "
            f"device: install cfgcheck[transformers] (torch and transformers)"
        ) from e
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise TraceError(
            f"model_type {model_type!r} is not an architecture the installed transformers ships "
            f"(cfgcheck never runs a repository's own code, trust_remote_code)"
        )
    try:
        config: Any = CONFIG_MAPPING[model_type].from_dict(data)
        if _bad_id(config, "pad_token_id"):  # a pad id past a config's own vocabulary
            config.pad_token_id = None
        _bounded(config, model_type)
        with torch.device("meta"), quiet_imports():
            model: Any = _auto_class(transformers, data).from_config(config)
    except TraceError:
        raise
    except Exception as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise TraceError(f"transformers cannot build model_type {model_type!r}: {reason}") from e
    return _read(model, config, model_type)


# Bounds on what a config may ask the meta build for (the build's time grows with the modules:
# layers, and experts where they are separate modules); published models stay far below.
MAX_LAYERS = 1024
MAX_EXPERTS = 4096
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def _bounded(config: Any, model_type: str) -> None:
    """Refuse a config whose meta build would be unbounded work (an untrusted config.json)."""
    subs = [config, config.get_text_config()]
    subs += [getattr(config, name, None) for name in getattr(config, "sub_configs", {}) or {}]
    for sub in subs:
        layers = getattr(sub, "num_hidden_layers", None)
        if isinstance(layers, int) and not 0 <= layers <= MAX_LAYERS:
            raise TraceError(f"{model_type}: num_hidden_layers={layers} is beyond {MAX_LAYERS}")
        for key in _EXPERT_KEYS:
            n = getattr(sub, key, None)
            if isinstance(n, int) and not 0 <= n <= MAX_EXPERTS:
                raise TraceError(f"{model_type}: {key}={n} is beyond {MAX_EXPERTS}")


def _auto_class(transformers: Any, data: Mapping[str, Any]) -> Any:
    """The Auto class of the checkpoint's head (its ``architectures``): a classification
    checkpoint is built with its score layer, anything else as a causal LM."""
    names = data.get("architectures")
    name = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else ""
    for suffix in ("ForSequenceClassification", "ForTokenClassification"):
        if name.endswith(suffix):
            return getattr(transformers, f"AutoModel{suffix}")
    return transformers.AutoModelForCausalLM


def _bad_id(config: Any, name: str) -> bool:
    value = getattr(config, name, None)
    rows = getattr(config.get_text_config(), "vocab_size", None)
    return isinstance(value, int) and isinstance(rows, int) and not 0 <= value < rows


def _kind(module: Any) -> str:
    import torch

    name = type(module).__name__
    if isinstance(module, torch.nn.Linear) or name == "Conv1D":
        return LINEAR
    if isinstance(module, torch.nn.Embedding):
        return EMBEDDING
    if "Norm" in name:
        return NORM
    return OTHER


def _read(model: Any, config: Any, model_type: str) -> Trace:
    import torch

    text = config.get_text_config()
    tree: dict[str, str] = {}
    linears: dict[str, TracedLinear] = {}
    params: dict[str, int] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    layers, n_layer = "", 0
    for path, module in model.named_modules():
        if not path:
            continue
        kind = _kind(module)
        tree[path] = kind
        owned = sum(p.numel() for p in module.parameters(recurse=False))
        for name, p in module.named_parameters(recurse=False):
            shapes[f"{path}.{name}"] = tuple(int(x) for x in p.shape)
        if owned:
            params[path] = owned
        if kind == LINEAR:
            w = module.weight
            out_f, in_f = (w.shape[1], w.shape[0]) if type(module).__name__ == "Conv1D" else w.shape
            linears[path] = TracedLinear(int(in_f), int(out_f), module.bias is not None)
        # the decoder layers: the longest ModuleList (a vision tower's is shorter or apart)
        longer = isinstance(module, torch.nn.ModuleList) and len(module) > n_layer
        if longer and len(module) == getattr(text, "num_hidden_layers", len(module)):
            layers, n_layer = path, len(module)
    embed = model.get_input_embeddings()
    head = model.get_output_embeddings()
    head_path = next((p for p, mod in model.named_modules() if mod is head), None)
    tied = head is not None and head.weight is embed.weight
    top_k = getattr(text, "num_experts_per_tok", None) or getattr(text, "experts_per_token", None)
    experts = []
    for path, module in model.named_modules():
        n = getattr(module, "num_experts", None)
        fused = [p for p in module.parameters(recurse=False) if p.dim() == 3]
        if not (isinstance(n, int) and fused and type(module).__name__.endswith("Experts")):
            continue
        k = _top_k(model, path) or top_k
        if not isinstance(k, int):
            raise TraceError(f"{model_type}: no experts-per-token in the config for {path}")
        down = dict(module.named_parameters(recurse=False)).get("down_proj", fused[-1])
        hidden = int(model.get_input_embeddings().embedding_dim)
        width = next((int(s) for s in down.shape[1:] if s != hidden), hidden)
        experts.append(Experts(path, n, k, params[path], width))
    total = int(sum(p.numel() for p in model.parameters()))
    try:
        from transformers.conversion_mapping import _MODEL_TO_CONVERSION_PATTERN as patterns
    except ImportError:  # pragma: no cover - transformers < 5 has no conversions
        patterns = {}
    peft_moe = "mixtral" if model_type == "mixtral" else patterns.get(model_type)
    return Trace(
        model_type=model_type,
        cls=type(model).__name__,
        total=total,
        tree=tree,
        linears=linears,
        params=params,
        layers=layers,
        n_layer=n_layer,
        rows=int(embed.num_embeddings),
        hidden=int(embed.embedding_dim),
        tied=tied,
        lm_head=head_path,
        experts=tuple(experts),
        peft_moe=peft_moe if peft_moe in PEFT_MOE_NAMES and experts else None,
        supports_sdpa=bool(getattr(type(model), "_supports_sdpa", True)),
        activation=_activation(config),
        param_shapes=shapes,
    )


def _activation(config: Any) -> str | None:
    """The MLP activation of the built config's language model (its class default included)."""
    text = config.get_text_config()
    for key in ("activation_function", "hidden_act", "hidden_activation"):
        value = getattr(text, key, None)
        if isinstance(value, str):
            return value
    return None


def _top_k(model: Any, experts_path: str) -> int | None:
    """The router's ``top_k`` next to the experts (``mlp.gate`` / ``mlp.router``), or the MoE
    block's own."""
    parent = experts_path.rsplit(".", 1)[0]
    block = model.get_submodule(parent)
    for child in (block, *block.children()):
        k = getattr(child, "top_k", None)
        if isinstance(k, int) and k > 0:
            return k
    return None
