"""LoRA targets against the architecture's real module names.

PEFT (``peft/tuners/tuners_utils.py``, ``BaseTuner.inject_adapter`` and
``check_target_module_exists``) matches each entry of a ``target_modules`` list against every
module path of the model: equal, or ending with ``"." + entry``. When no entry matches any
module it raises ``ValueError: Target modules {...} not found in the base model. Please check
the target modules and try again.``; when some entries match and others do not, it adapts the
matched ones and says nothing (fewer adapters train than the config asks for). An entry that
matches a module LoRA cannot wrap (a norm, an attention block) raises ``ValueError: Target
module ... is not supported`` (``peft/tuners/lora/model.py``, ``_create_new_module``). The
string ``"all-linear"`` (``peft/utils/constants.py``, ``INCLUDE_LINEAR_LAYERS_SHORTHAND``)
expands to every ``nn.Linear`` / ``Conv1D`` except the output layer
(``_maybe_include_all_linear_layers``); cfgcheck spells it ``targets: [all-linear]``, and a
training script passes it to PEFT as the string (inside a list, PEFT takes it for a module
name).

With ``trainer.framework=litgpt`` the targets are LitGPT's switches (``litgpt/lora.py``:
``lora_query``, ``lora_key``, ``lora_value``, ``lora_projection``, ``lora_mlp``, ``lora_head``),
spelled ``query`` or ``lora_query``, or any module name cfgcheck maps onto one.
"""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.memory.modules import (
    EMBEDDING,
    LINEAR,
    LITGPT_SWITCHES,
    architecture_of,
    block_linears,
    lora_names,
    matches,
    module_tree,
    roles_of,
    suffix_index,
    traced,
)
from cfgcheck.memory.params import is_all_linear, matched_parameters
from cfgcheck.memory.traced import PEFT_MOE_FUSED, PEFT_MOE_NAMES
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.run import RunConfig

PATHS = ("trainer.lora.targets", "model.architecture")
NOT_FOUND = (
    "PEFT's get_peft_model raises \"ValueError: Target modules {targets} not found in the base "
    'model. Please check the target modules and try again."'
)


def _override(targets: list[str]) -> str:
    return f"trainer.lora.targets=[{','.join(targets)}]"


def _replacement(m: ModelConfig, name: str, framework: str) -> list[str]:
    """This architecture's names for what ``name`` stands for elsewhere (``[]``: none)."""
    roles = set(roles_of(name))
    if framework == "litgpt":
        return [s for s, covered in LITGPT_SWITCHES.items() if roles & set(covered)]
    out = [x.name for x in block_linears(m) if roles & set(x.roles)]
    tree = module_tree(m.model_copy(update={"n_layer": 1})) or {}
    for path, kind in tree.items():
        last = path.rsplit(".", 1)[-1]
        if kind == EMBEDDING and "embed_tokens" in roles and last in ("embed_tokens", "wte"):
            out.append(last)
    if "lm_head" in roles:
        out.append("lm_head")
    return list(dict.fromkeys(out))


def _fixed(
    m: ModelConfig, targets: list[str], framework: str, bad: dict[str, list[str]]
) -> list[str]:
    """The target list with each bad entry replaced by its counterparts; never empty."""
    out: list[str] = []
    for t in targets:
        out += bad.get(t, [t])
    out = list(dict.fromkeys(out))
    if out:
        return out
    # Nothing maps: the query and value projections, PEFT's and LitGPT's usual default.
    return _replacement(m, "q_proj", framework) + _replacement(m, "v_proj", framework)


def _valid_list(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(names)


def _some(names: list[str], limit: int = 8) -> str:
    """At most ``limit`` names, and how many more (a hostile list stays a readable line)."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _litgpt(m: ModelConfig, targets: list[str]) -> Iterator[Problem]:
    unknown = [t for t in targets if not roles_of(t, "litgpt") and t.lower() != "all-linear"]
    if not unknown:
        return
    fixed = _fixed(m, targets, "litgpt", {t: [] for t in unknown})
    yield Problem(
        "error",
        ("trainer.lora.targets", "trainer.framework"),
        f"trainer.lora.targets [{_some(unknown)}] name no LitGPT LoRA switch: LitGPT adapts the "
        f"projections its Config switches on (lora_query, lora_key, lora_value, "
        f"lora_projection, lora_mlp, lora_head in litgpt/lora.py), and has no switch for these",
        f"use LitGPT's switches ({_valid_list(list(LITGPT_SWITCHES))}), e.g. {_override(fixed)}",
        fixes=(Fix((_override(fixed),), f"adapt {', '.join(fixed)}"),),
    )


def _unsupported_fix(m: ModelConfig, tree: dict[str, str], t: str) -> list[str]:
    """For an entry naming containers (``mlp``, ``self_attn``): the linears inside them."""
    inside = [
        p.rsplit(".", 1)[-1]
        for hit in (p for p in tree if matches(p, t))
        for p, kind in tree.items()
        if kind == LINEAR and p.startswith(hit + ".")
    ]
    return list(dict.fromkeys(inside))


@rule("lora-target-unknown", requires=("model", "trainer"))
def lora_target_unknown(cfg: RunConfig) -> Iterator[Problem]:
    """LoRA targets must name modules the model has (PEFT raises when none does, and silently
    adapts fewer modules when some do not)."""
    m, t = cfg.model, cfg.trainer
    targets = list(t.lora.targets)
    if t.finetuning == "full" or not targets or t.framework == "torchtune":
        return
    if t.framework == "litgpt":
        yield from _litgpt(m, targets)
        return
    if is_all_linear(targets):
        return
    tr = traced(m)
    if tr is not None and tr.peft_moe is not None:  # names PEFT converts to expert parameters
        targets = [x for x in targets if x not in PEFT_MOE_NAMES[tr.peft_moe]]
        if not targets:
            return
    # An entry without a digit matches the same modules in every layer: one layer's tree
    # answers for it (bounded work however deep the model or long the list).
    tree = module_tree(m.model_copy(update={"n_layer": 1}))
    if tree is None:
        return  # an architecture cfgcheck cannot name modules for: nothing to check against
    full = module_tree(m) if any(c.isdigit() for x in targets for c in x) else tree
    assert full is not None  # same architecture as ``tree``
    arch = architecture_of(m)
    valid = lora_names(m)
    targets = list(dict.fromkeys(targets))

    short, deep = suffix_index(tree), suffix_index(full) if full is not tree else None

    def hits(x: str) -> list[str]:
        index = deep if deep is not None and any(c.isdigit() for c in x) else short
        return index.get(x, [])

    found = {x: hits(x) for x in targets}
    unsupported = {
        x: refused
        for x, paths in found.items()
        if (refused := [p for p in paths if full[p] not in (LINEAR, EMBEDDING)])
    }
    unmatched = [x for x in targets if not found[x]]
    where = f"{m.name} (architecture {arch})"
    names = f"the LoRA-able modules of {where}: {_valid_list(valid)}, or [all-linear]"
    shorthand = (
        " (all-linear works only as the whole list: inside a list PEFT takes it for a module name)"
        if any(x.lower() == "all-linear" for x in unmatched)
        else ""
    )
    if unsupported:
        bad = {x: _unsupported_fix(m, full, x) for x in unsupported}
        fixed = _fixed(m, targets, "hf", bad | {x: _replacement(m, x, "hf") for x in unmatched})
        first = next(iter(unsupported.values()))[0]
        yield Problem(
            "error",
            PATHS,
            f"trainer.lora.targets [{_some(list(unsupported))}] match modules LoRA cannot wrap in "
            f'{where} (e.g. {first}): PEFT raises "ValueError: Target module ... is not '
            f"supported. Currently, only the following modules are supported: "
            f'`torch.nn.Linear`, `torch.nn.Embedding`, ..."',
            f"target linear modules: {names}; e.g. {_override(fixed)}",
            fixes=(Fix((_override(fixed),), f"adapt {', '.join(fixed)}"),),
        )
        return
    if not unmatched:
        return
    fixed = _fixed(m, targets, "hf", {x: _replacement(m, x, "hf") for x in unmatched})
    if shorthand:
        fixed = ["all-linear"]
    fix = Fix((_override(fixed),), f"adapt {', '.join(fixed)}")
    if len(unmatched) == len(targets):
        yield Problem(
            "error",
            PATHS,
            f"no module of {where} is named {_some(unmatched)}: "
            + NOT_FOUND.replace("{targets}", "{" + _some([repr(x) for x in sorted(targets)]) + "}"),
            f"use {names}{shorthand}; e.g. {_override(fixed)}",
            fixes=(fix,),
        )
    else:
        yield Problem(
            "warning",
            PATHS,
            f"no module of {where} is named {_some(unmatched)}: PEFT adapts only "
            f"{_some([x for x in targets if x not in unmatched])} and silently trains no "
            f"adapter for the rest",
            f"use {names}{shorthand}; e.g. {_override(fixed)}",
            fixes=(fix,),
        )


_MLP_ROLES = frozenset({"gate_proj", "up_proj", "down_proj"})


@rule("lora-target-experts", requires=("model", "trainer"))
def lora_target_experts(cfg: RunConfig) -> Iterator[Problem]:
    """LoRA targets on a mixture-of-experts model whose routed experts are fused parameters.

    transformers 5 stores each layer's experts as 3D ``nn.Parameter`` tensors of one
    ``*Experts`` module (``MixtralExperts.gate_up_proj`` / ``down_proj``,
    models/mixtral/modeling_mixtral.py), not ``nn.Linear``. For the families whose checkpoint
    conversion is Mixtral's or Qwen2-MoE's, PEFT converts the transformers-4 names (``w1``,
    ``w3``, ``w2``, ``gate``; ``gate_proj``, ``up_proj``, ``down_proj``, ``gate``) into LoRA on
    those parameters (:data:`cfgcheck.memory.traced.PEFT_MOE_NAMES`); such an adapter
    (``lora.ParamWrapper``) refuses ``lora_dropout != 0`` and one name of a fused pair alone.
    For the others (gpt-oss, Llama 4, Qwen2-MoE itself) ``target_modules`` never reaches the
    experts: only the attention and shared-expert linears train."""
    m, t = cfg.model, cfg.trainer
    if t.finetuning == "full" or t.framework != "hf" or not t.lora.targets:
        return
    tr = traced(m)
    if tr is None or not tr.experts:
        return
    targets = list(t.lora.targets)
    e = tr.experts[0]
    inner = e.path[len(f"{tr.layers}.") :].split(".", 1)[-1]
    if tr.peft_moe is not None:
        names = PEFT_MOE_NAMES[tr.peft_moe]
        hit = set(names) if is_all_linear(targets) else {x for x in targets if x in names}
        pair = PEFT_MOE_FUSED[tr.peft_moe]
        if 0 < len(hit & set(pair)) < len(pair):
            have = sorted(hit & set(pair))
            need = sorted(set(pair) - hit)
            fixed = list(dict.fromkeys([*targets, *need]))
            yield Problem(
                "error",
                ("trainer.lora.targets",),
                f"trainer.lora.targets names {', '.join(have)} without {', '.join(need)}: on "
                f"{m.name} PEFT converts them to LoRA on the fused {inner}.gate_up_proj and raises "
                f'"ValueError: Cannot convert PEFT target(s) {", ".join(have)} without also '
                f'targeting {", ".join(need)} because they are fused into gate_up_proj."',
                f"target both halves, e.g. {_override(fixed)}",
                fixes=(Fix((_override(fixed),), f"adapt {', '.join(fixed)}"),),
            )
        if hit and t.lora.dropout > 0:
            yield Problem(
                "error",
                ("trainer.lora.dropout", "trainer.lora.targets"),
                f"trainer.lora.dropout={t.lora.dropout} with expert/router targets "
                f"({', '.join(sorted(hit))}) on {m.name}: PEFT adapts those parameters with "
                f'lora.ParamWrapper, which raises "ValueError: lora.ParamWrapper does not work '
                f'with lora_dropout != 0."',
                "set trainer.lora.dropout=0, or target only the attention projections",
                fixes=(Fix(("trainer.lora.dropout=0",), "no LoRA dropout"),),
            )
        return
    mlp = is_all_linear(targets) or any(set(roles_of(x)) & _MLP_ROLES for x in targets)
    if not mlp or any(
        len(s) == 3 for s in matched_parameters(tr, t.lora.target_parameters).values()
    ):
        return
    yield Problem(
        "warning",
        PATHS,
        f"the routed experts of {m.name} ({e.n_expert} per layer, {inner}) are fused 3D "
        f"parameters in transformers, not nn.Linear, and PEFT converts no target name to them "
        f"for {tr.model_type}: trainer.lora.targets trains only the attention (and any "
        f"shared-expert or dense MLP) linears",
        f"to adapt the experts set trainer.lora.target_parameters (PEFT's target_parameters, "
        f"e.g. [{inner}.gate_up_proj,{inner}.down_proj]), or accept attention-only LoRA",
    )
