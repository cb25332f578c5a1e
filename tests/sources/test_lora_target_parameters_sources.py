"""``trainer.lora.target_parameters`` from the native sources that carry PEFT's
``target_parameters``: TRL's ``lora_target_parameters`` (trl/trainer/model_config.py 1.16
``ModelConfig``, passed to ``LoraConfig(target_parameters=...)`` by ``get_peft_config`` in
trl/trainer/utils.py), Axolotl's ``lora_target_parameters`` (``str | list[str]``,
axolotl-ai-cloud/axolotl src/axolotl/utils/schemas, cfgcheck/sources/keys/axolotl.txt) and a
Python script's ``LoraConfig(target_parameters=[...])``; a name matching no parameter of the
model is reported at its line, and the fix clears it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cfgcheck.sources import check_native, load_native
from tests.conftest import requires
from tests.model_folders import write_config
from tests.sources.support import line_of, located_at, one, write

RULE = "lora-target-parameter-unknown"
# the OpenAI cookbook's gpt-oss recipe (openai/openai-cookbook,
# articles/gpt-oss/fine-tune-transfomers.ipynb at dcb64bfc2b4c4ec9bf1ac3abc2568cc28eadfe61)
RECIPE = [
    "7.mlp.experts.gate_up_proj", "7.mlp.experts.down_proj",
    "15.mlp.experts.gate_up_proj", "15.mlp.experts.down_proj",
    "23.mlp.experts.gate_up_proj", "23.mlp.experts.down_proj",
]  # fmt: skip
TINY_GPT_OSS: dict[str, Any] = {
    "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "vocab_size": 256,
    "hidden_size": 64, "intermediate_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 512,
    "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 32,
}  # fmt: skip


def test_trl_lora_target_parameters(tmp_path: Path) -> None:
    text = (
        "model_name_or_path: openai/gpt-oss-20b\nuse_peft: true\nlora_dropout: 0.0\n"
        "lora_target_modules: all-linear\nlora_target_parameters:\n"
        + "".join(f"  - {x}\n" for x in RECIPE)
    )
    file = write(tmp_path, "sft_gpt_oss.yaml", text)
    loaded = load_native(file, "trl")
    lora = loaded.config["trainer"]["lora"]
    assert lora["target_parameters"] == RECIPE and lora["targets"] == ["all-linear"]
    where = loaded.source_map.lookup("trainer.lora.target_parameters")
    assert where is not None and where.line == line_of(file, "lora_target_parameters")


def test_axolotl_lora_target_parameters_string_or_list(tmp_path: Path) -> None:
    base = "base_model: openai/gpt-oss-20b\nlearning_rate: 0.0002\nadapter: lora\nlora_r: 8\n"
    one_name = write(tmp_path, "a.yml", base + "lora_target_parameters: mlp.experts.down_proj\n")
    lora = load_native(one_name, "axolotl").config["trainer"]["lora"]
    assert lora["target_parameters"] == ["mlp.experts.down_proj"]
    listed = write(tmp_path, "b.yml", base + f"lora_target_parameters: [{', '.join(RECIPE)}]\n")
    assert load_native(listed, "axolotl").config["trainer"]["lora"]["target_parameters"] == RECIPE


@requires("torch", "transformers")
def test_python_lora_config_target_parameters_checked_on_the_model(tmp_path: Path) -> None:
    """The recipe's layers 7, 15, 23 on a two-layer gpt-oss: PEFT adapts nothing there (it
    warns, target_modules matching); cfgcheck reports it at the LoraConfig line."""
    folder = write_config(tmp_path / "tiny-gpt-oss", TINY_GPT_OSS)
    script = tmp_path / "train.py"
    script.write_text(
        "from transformers import AutoModelForCausalLM, Trainer, TrainingArguments\n"
        "from peft import LoraConfig, get_peft_model\n"
        f"model = AutoModelForCausalLM.from_pretrained({str(folder)!r})\n"
        "config = LoraConfig(r=8, lora_alpha=16, target_modules='all-linear',\n"
        f"    target_parameters={RECIPE!r})\n"
        "model = get_peft_model(model, config)\n"
        "args = TrainingArguments(output_dir='o', per_device_train_batch_size=1, bf16=True)\n"
        "Trainer(model=model, args=args).train()\n"
    )
    result = check_native(script, "python", gpu="H100")
    assert result.config is not None
    assert result.config.trainer.lora.target_parameters == RECIPE
    found = one(result, RULE)
    assert found.severity == "error" and "7.mlp.experts.gate_up_proj" in found.message
    assert "were set but no parameter was matched" in found.message
    located_at(found, "trainer.lora.target_parameters", script, 5)
    recipe = ["1.mlp.experts.gate_up_proj", "1.mlp.experts.down_proj"]  # layer 1 of 0-1
    fixed = write(tmp_path, "fixed.py", script.read_text().replace(repr(RECIPE), repr(recipe)))
    after = check_native(fixed, "python", gpu="H100")
    assert after.config is not None and not after.by_rule(RULE)
    assert not after.by_rule("lora-target-experts")  # the experts are adapted now
