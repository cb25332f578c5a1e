"""LoRA on parameters: PEFT's ``LoraConfig(target_parameters=...)`` against the model's real
parameter names (``trainer.lora.target_parameters``).

PEFT 0.21 (``peft/tuners/tuners_utils.py``, ``BaseTuner._inject_parameters``) walks
``model.named_modules()`` and, for each parameter a module owns (``named_parameters(
recurse=False)``), adapts it when ``f"{module_name}.{param_name}"`` equals an entry or ends with
``"." + entry`` (:func:`cfgcheck.memory.params.matches_parameter`): the gpt-oss recipe's
``7.mlp.experts.gate_up_proj`` is layer 7's fused experts. An entry that matches nothing is
dropped without a word when any other entry or module matched; when the whole list matches
nothing and ``target_modules`` adapts something PEFT only warns ``RuntimeWarning:
target_parameters=[...] were set but no parameter was matched.``, and with no
``target_modules`` it raises ``NoMatchingPeftModuleError: No `target_modules` passed but also no
`target_parameters` found. Please check the values for these arguments.`` (reproduced on tiny
gpt-oss and Qwen3-MoE models, tests/test_lora_target_parameters.py). Each matched parameter is
wrapped in ``lora.ParamWrapper`` (``peft/tuners/lora/layer.py``), which raises ``ValueError:
lora.ParamWrapper does not work with lora_dropout != 0.``

Only PEFT has ``target_parameters``. LitGPT's LoRA is switched per module group (``litgpt/lora.py``
``Config``: ``lora_query`` ... ``lora_mlp``, ``lora_head``; Lightning-AI/litgpt at 26857050), and
torchtune's LoRA builders take ``lora_attn_modules`` / ``apply_lora_to_mlp`` /
``apply_lora_to_output`` (``torchtune/models/*/_component_builders.py``, 0.6.1): a
``target_parameters`` list with ``trainer.framework=litgpt`` or ``torchtune`` adapts nothing
(torchtune's builder raises ``TypeError`` on the keyword), so it is refused rather than counted.
"""

from __future__ import annotations

from collections.abc import Iterator

from cfgcheck.findings import Fix
from cfgcheck.memory.modules import traced
from cfgcheck.memory.params import matched_parameters, unmatched_parameters
from cfgcheck.rules._registry import Problem, rule
from cfgcheck.schema.run import RunConfig

PATH = "trainer.lora.target_parameters"


def _suggest(names: list[str], shapes: list[str]) -> str:
    """Names of 3D (fused expert) parameters, inside their layer, as examples."""
    inner = sorted({".".join(k.split(".")[-3:]) for k in names})
    return ", ".join(inner[:4]) or ", ".join(shapes[:4])


_EXPERTS_BY_FRAMEWORK = {
    "litgpt": "LitGPT adapts a MoE's experts with its MLP switch (trainer.lora.targets=[mlp], "
    "lora_mlp: litgpt/lora.py LLaMAMoE)",
    "torchtune": "torchtune 0.6's LoRA builders adapt linear modules only (lora_attn_modules, "
    "apply_lora_to_mlp, apply_lora_to_output)",
}


def _not_peft(framework: str) -> Problem:
    """``target_parameters`` with a framework that has no such setting."""
    return Problem(
        "error",
        (PATH, "trainer.framework"),
        f"{PATH} is PEFT's LoraConfig(target_parameters=...); trainer.framework={framework} "
        f"has no such setting, so no parameter would get an adapter (the memory estimate counts "
        f"none): {_EXPERTS_BY_FRAMEWORK.get(framework, '')}",
        f"drop {PATH}, or set trainer.framework=hf for a PEFT run",
        fixes=(Fix((f"{PATH}=[]",), "no parameter adapters"),),
    )


@rule("lora-target-parameter-unknown", requires=("model", "trainer"))
def lora_target_parameter_unknown(cfg: RunConfig) -> Iterator[Problem]:
    """Entries of ``trainer.lora.target_parameters`` that match no parameter of the model."""
    m, t = cfg.model, cfg.trainer
    wanted = list(t.lora.target_parameters)
    if not wanted or t.finetuning == "full":
        return
    if t.framework != "hf":
        yield _not_peft(t.framework)
        return
    tr = traced(m)
    if tr is None:
        return  # a hand-written shape has no parameter names to match
    missing = unmatched_parameters(tr, wanted)
    if missing:
        fused = [k for k, s in tr.param_shapes.items() if len(s) == 3]
        kept = [x for x in wanted if x not in missing]
        if kept:
            what = "PEFT adapts the others and drops these without a word"
        elif t.lora.targets:
            what = (
                'PEFT warns "RuntimeWarning: target_parameters='
                f'{wanted} were set but no parameter was matched." and trains no parameter'
            )
        else:
            what = (
                'PEFT raises "NoMatchingPeftModuleError: No `target_modules` passed but also '
                'no `target_parameters` found. Please check the values for these arguments."'
            )
        example = _suggest(fused, list(tr.param_shapes))
        layers = f"{tr.n_layer} layers, numbered 0-{tr.n_layer - 1}" if tr.n_layer else ""
        yield Problem(
            "error",
            (PATH,),
            f"{PATH} {', '.join(missing)} match{'es' if len(missing) == 1 else ''} no parameter "
            f"of {m.name} (a parameter's full name must end with '.' + the entry; {layers}): "
            f"{what}",
            f"name parameters of the model, e.g. {example}",
            fixes=(Fix((f"{PATH}=[{','.join(kept)}]",), "drop the names that match nothing"),)
            if kept
            else (),
        )
    if t.lora.dropout > 0 and matched_parameters(tr, wanted):
        yield Problem(
            "error",
            ("trainer.lora.dropout", PATH),
            f"trainer.lora.dropout={t.lora.dropout} with {PATH}: PEFT wraps those parameters "
            f'in lora.ParamWrapper, which raises "ValueError: lora.ParamWrapper does not work '
            f'with lora_dropout != 0."',
            "set trainer.lora.dropout=0",
            fixes=(Fix(("trainer.lora.dropout=0",), "no LoRA dropout"),),
        )
