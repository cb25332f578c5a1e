"""DeepSpeed-Chat's ``--lora_module_name``: ``convert_linear_layer_to_lora`` (dschat/utils/
module/lora.py lines 94-97) keeps the ``nn.Linear`` modules whose name contains it. The same
loop on the real tiny Llama (transformers, CPU) decides: OPT's ``decoder.layers.`` matches none
of its linears, ``layers.`` (cfgcheck's fix) matches them."""

from __future__ import annotations

from pathlib import Path

from cfgcheck.sources import check_native
from tests.conftest import requires

LAUNCH = Path(__file__).resolve().parent / "native" / "launch"
SCRIPT = LAUNCH / "seed" / "dschat_lora.sh"


def _replaced(part: str) -> list[str]:
    """DeepSpeed-Chat's loop (convert_linear_layer_to_lora) on the real model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(LAUNCH / "seed" / "tiny-llama")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and part in name
    ]


@requires("transformers", "torch")
def test_a_module_name_in_no_linear_applies_lora_to_nothing() -> None:
    assert not _replaced("decoder.layers.")
    result = check_native(SCRIPT, "launch")
    (finding,) = result.by_rule("launch-lora-module-unmatched")
    assert "applies LoRA to nothing" in finding.message
    assert "--only_optimize_lora then leaves no parameter to train" in finding.message
    (fix,) = finding.fixes
    assert fix.flags == ("--lora_module_name", "layers.")
    assert _replaced("layers.")  # the fix names real linears
    fixed = check_native(SCRIPT, "launch", ["lora_module_name=layers."])
    assert not fixed.by_rule("launch-lora-module-unmatched")


def test_the_published_llama_scripts_name_their_layers() -> None:
    text = (
        LAUNCH
        / "published/dschat/training/step1_supervised_finetuning/training_scripts"
        / "llama2/run_llama2_7b_lora.sh"
    ).read_text()
    assert '--lora_module_name "layers."' in text
    result = check_native(SCRIPT, "launch", ["lora_module_name=self_attn"])
    assert not result.by_rule("launch-lora-module-unmatched")
    assert result.config is not None  # a verdict
