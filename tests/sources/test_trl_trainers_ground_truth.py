"""Every TRL trainer against the real TRL 1.16 on CPU: the generated key tables are what each
`trl <trainer>` parser accepts, launcher keys reach `accelerate launch`, and each rule's
verdict is what the real trainer or model does (needs ``pip install 'cfgcheck[frameworks]'``).
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.sources import check_native, load_native
from cfgcheck.sources import trl_versions as tv
from cfgcheck.validate import validate
from tests.conftest import requires
from tests.model_folders import tokenizer_files
from tests.sources.support import line_of, located_at, one, write

pytestmark = requires("trl", "torch", "transformers")

CLI = ("sft", "dpo", "grpo", "kto", "reward", "rloo", "distillation")


def installed() -> str:
    import importlib.metadata

    return importlib.metadata.version("trl")


def make_parser(trainer: str) -> Any:
    return importlib.import_module(f"trl.scripts.{trainer}").make_parser()


def parse(trainer: str, file: Path, remaining: bool = False) -> Any:
    args = ["--config", str(file), "--output_dir", "out", "--use_cpu", "true"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if remaining:
            return make_parser(trainer).parse_args_and_config(
                args, return_remaining_strings=True, separate_remaining_strings=True
            )
        return make_parser(trainer).parse_args_and_config(args)


@pytest.mark.parametrize("trainer", CLI)
def test_the_table_is_what_each_trl_command_parses(trainer: str) -> None:
    fields = {f.name for c in make_parser(trainer).dataclass_types for f in dataclasses.fields(c)}
    version = tv.resolve_version(None, "", None, installed=installed())
    assert version.table == installed()
    assert set(tv.keyset(version, trainer, None).defaults) == fields


def test_non_cli_trainers_are_their_config_classes() -> None:
    from transformers import TrainingArguments
    from trl.experimental.orpo import ORPOConfig

    version = tv.resolve_version(None, "", None, installed=installed())
    table = tv.keyset(version, "orpo", None).defaults
    assert {f.name for f in dataclasses.fields(ORPOConfig)} <= set(table)
    assert {f.name for f in dataclasses.fields(TrainingArguments)} <= set(table)
    assert table["beta"] == ORPOConfig.beta == 0.1  # defaults come from the source too


def test_dpo_keys_are_known_and_a_wrong_one_refused(tmp_path: Path) -> None:
    text = "model_name_or_path: Qwen/Qwen2.5-0.5B\nbeta: 0.05\nmax_length: 512\n"
    good = write(tmp_path, "dpo.yaml", text)
    dpo = parse("dpo", good)[1]
    assert (dpo.beta, dpo.max_length) == (0.05, 512)
    result = check_native(good, "trl", gpu="H100")
    assert not result.by_rule("unknown-native-key"), [f.message for f in result.findings]
    assert result.config is not None and result.config.data.max_seq_length == 512
    bad = write(tmp_path, "dpo_bad.yaml", text + "num_generations: 4\n")
    with pytest.raises(ValueError, match=r"Unknown arguments from config file.*num_generations"):
        parse("dpo", bad)
    found = one(check_native(bad, "trl", gpu="H100"), "unknown-native-key")
    assert found.severity == "error" and "`trl grpo`" in found.message
    located_at(found, "num_generations", bad, line_of(bad, "num_generations"))


def test_launcher_keys_reach_accelerate(tmp_path: Path) -> None:
    from accelerate.commands.launch import launch_command_parser

    file = write(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\nnum_processes: 8\n",
    )
    *_, config_remaining, _ = parse("sft", file, remaining=True)
    assert config_remaining == ["--num_processes", "8"]
    launched = launch_command_parser().parse_args([*config_remaining, "sft.py"])
    assert launched.num_processes == 8
    result = check_native(file, "trl", gpu="H100")
    assert not result.by_rule("unknown-native-key")
    assert result.config is not None and result.config.trainer.devices == 8
    # a misspelt launcher key is what accelerate refuses
    typo = write(tmp_path, "typo.yaml", "model_name_or_path: Qwen/Qwen2.5-0.5B\nnum_proceses: 8\n")
    *_, remaining, _ = parse("sft", typo, remaining=True)
    with pytest.raises(SystemExit):
        launch_command_parser().parse_args([*remaining, "sft.py"])
    found = one(check_native(typo, "trl", gpu="H100"), "unknown-native-key")
    assert found.severity == "error"


# --- tiny models on CPU -------------------------------------------------------------------


def llama_folder(folder: Path, positions: int = 64) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        eos_token_id=2,
        bos_token_id=1,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    return tokenizer_files(folder, 64, pad_token="<unk>")


def texts(n: int, words: int) -> list[str]:
    return [" ".join(f"w{3 + (i + j) % 60}" for j in range(words)) for i in range(n)]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return llama_folder(tmp_path_factory.mktemp("llama") / "tiny-llama")


def sft_trainer(folder: Path, tmp: Path, **args: Any) -> Any:
    from trl import SFTConfig, SFTTrainer

    from datasets import Dataset

    config = SFTConfig(
        output_dir=str(tmp / "out"),
        use_cpu=True,
        bf16=False,
        max_steps=1,
        report_to="none",
        per_device_train_batch_size=2,
        **args,
    )
    data = Dataset.from_dict({"text": texts(4, 12)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SFTTrainer(model=str(folder), args=config, train_dataset=data)


def test_padding_free_without_packing_is_refused_by_sft_trainer(
    tmp_path: Path, tiny_llama: Path
) -> None:
    text = f"model_name_or_path: {tiny_llama}\npadding_free: true\nmax_length: 32\n"
    file = write(tmp_path, "pf.yaml", text)
    found = one(check_native(file, "trl"), "trl-padding-free-max-length")
    assert found.severity == "error"
    located_at(found, "padding_free", file, line_of(file, "padding_free"))
    with pytest.raises(ValueError, match="`max_length` is not enforced"):
        sft_trainer(tiny_llama, tmp_path, padding_free=True, max_length=32)
    # each fix starts: packing, or no max_length
    for fix in found.fixes:
        after = check_native(file, "trl", list(fix.overrides))
        assert not after.by_rule("trl-padding-free-max-length")
    trainer = sft_trainer(tiny_llama, tmp_path, padding_free=True, packing=True, max_length=32)
    trainer.train()


def test_padding_free_with_sdpa_masks_per_sample_in_trl_1_16(tiny_llama: Path) -> None:
    """TRL 1.16's padding-free collator passes position_ids and SFTTrainer.compute_loss sets
    ``use_cache=False`` (trl/trainer/sft_trainer.py); transformers then builds a block-diagonal
    mask for sdpa from the position_ids (masking_utils.py find_packed_sequence_indices, only
    without a cache), so each sample's logits are what it gets alone: no finding about sdpa
    for TRL >= 1.16 (older TRL warns, and cfgcheck with it)."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    model = AutoModelForCausalLM.from_pretrained(tiny_llama, attn_implementation="sdpa").eval()
    a, b = [5, 6, 7, 8, 9], [10, 11, 12]
    batch = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(
        [{"input_ids": a}, {"input_ids": b}]
    )
    assert "attention_mask" not in batch
    with torch.no_grad():
        flat = model(
            input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False
        ).logits
        alone = model(input_ids=torch.tensor([b]), use_cache=False).logits
    torch.testing.assert_close(flat[0, len(a) :], alone[0], rtol=1e-4, atol=1e-4)


def test_padding_free_with_sdpa_warns_for_older_trl(tmp_path: Path, tiny_llama: Path) -> None:
    file = write(
        tmp_path,
        "pf.yaml",
        f"model_name_or_path: {tiny_llama}\npadding_free: true\npacking: true\n",
    )
    old = check_native(file, "trl", options={"framework_version": "0.20.0"})
    found = one(old, "trl-padding-free-attention")
    assert "flash_attention_2" in found.message
    assert not check_native(file, "trl").by_rule("trl-padding-free-attention")


def test_rope_trains_past_its_positions_learned_positions_fail(tmp_path: Path) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    short = llama_folder(tmp_path / "short-llama", positions=16)
    from transformers import AutoModelForCausalLM

    llama = AutoModelForCausalLM.from_pretrained(short)
    ids = torch.randint(3, 60, (2, 24))
    loss = llama(input_ids=ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)  # 24 tokens, 16 positions: RoPE trains on
    gpt2_dir = tmp_path / "tiny-gpt2"
    GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4)
    ).save_pretrained(gpt2_dir)
    tokenizer_files(gpt2_dir, 64, pad_token="<unk>")
    gpt2 = GPT2LMHeadModel.from_pretrained(gpt2_dir)
    with pytest.raises(IndexError, match="index out of range in self"):
        gpt2(input_ids=ids, labels=ids)
    # cfgcheck's verdicts: a warning for the RoPE model, an error quoting the IndexError
    for folder, severity in ((short, "warning"), (gpt2_dir, "error")):
        file = write(tmp_path, f"{folder.name}.yaml", f"model_name_or_path: {folder}\n")
        result = check_native(file, "trl", ["max_length=24"])
        found = one(result, "trl-positions-past-context")
        assert found.severity == severity, found.message
        assert not result.by_rule("seq-len-over-block-size")
        assert "Cannot attend" not in found.message
        if severity == "error":
            assert "IndexError: index out of range in self" in found.message


def test_gemma2_without_attn_implementation_falls_back_to_eager(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM

    folder = tmp_path / "tiny-gemma2"
    Gemma2ForCausalLM(
        Gemma2Config(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=64,
        )
    ).save_pretrained(folder)
    tokenizer_files(folder, 64, pad_token="<unk>")
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config._attn_implementation == "eager"
    file = write(tmp_path, "g.yaml", f"model_name_or_path: {folder}\nmax_length: 32\n")
    assert not check_native(file, "trl").by_rule("attention-unsupported")
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa")
    explicit = check_native(file, "trl", ["attn_implementation=sdpa"])
    assert one(explicit, "attention-unsupported").severity == "error"


def test_grpo_defaults_come_from_the_installed_grpo_config(tmp_path: Path) -> None:
    from trl import GRPOConfig

    file = write(
        tmp_path, "grpo.yaml", "model_name_or_path: Qwen/Qwen2.5-0.5B\nnum_generations: 4\n"
    )
    grpo = parse("grpo", file)[1]
    loaded = load_native(file, "trl")
    rl = loaded.config["trainer"]["rl"]
    assert rl["scored_tokens"] == grpo.max_completion_length
    # GRPOConfig has no max_prompt_length and GRPOTrainer truncates no prompt: the prompt is
    # the worst case, the model's context minus the completion (cfgcheck/sources/trl_prompt.py)
    assert not hasattr(grpo, "max_prompt_length") and rl["prompt_bound"] == "context"
    block = validate(loaded.config).config.model.block_size  # type: ignore[union-attr]
    assert rl["prompt_tokens"] == block - grpo.max_completion_length
    assert loaded.config["data"]["max_seq_length"] == block
    assert loaded.config["trainer"]["learning_rate"] == GRPOConfig.learning_rate
    assert loaded.config["trainer"]["micro_batch_size"] == grpo.per_device_train_batch_size


def test_grpo_generation_batch_must_hold_whole_groups(tmp_path: Path) -> None:
    from trl import GRPOConfig

    text = (
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nnum_generations: 8\n"
        "per_device_train_batch_size: 3\ngradient_accumulation_steps: 2\n"
    )
    file = write(tmp_path, "grpo.yaml", text)
    with pytest.raises(ValueError, match=r"generation_batch_size \(6\) must be divisible by"):
        GRPOConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            num_generations=8,
            per_device_train_batch_size=3,
            gradient_accumulation_steps=2,
            report_to="none",
        )
    found = one(check_native(file, "trl"), "trl-grpo-generation-batch")
    assert "generation_batch_size (6) must be divisible by num_generations (8)" in found.message
    located_at(found, "num_generations", file, line_of(file, "num_generations"))
    fix = found.fixes[0].overrides
    assert fix == ("num_generations=6",)
    GRPOConfig(  # the fixed config is accepted by TRL
        output_dir=str(tmp_path),
        use_cpu=True,
        num_generations=6,
        per_device_train_batch_size=3,
        gradient_accumulation_steps=2,
        report_to="none",
    )
    assert not check_native(file, "trl", list(fix)).by_rule("trl-grpo-generation-batch")


def test_fp16_and_bf16_both_set_is_refused(tmp_path: Path) -> None:
    from trl import SFTConfig

    with pytest.raises(ValueError, match="At most one of fp16 and bf16 can be True"):
        SFTConfig(output_dir=str(tmp_path), fp16=True, bf16=True, use_cpu=True, report_to="none")
    file = write(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\nfp16: true\nbf16: true\n",
    )
    found = one(check_native(file, "trl", gpu="H100"), "trl-fp16-and-bf16")
    located_at(found, "fp16", file, line_of(file, "fp16"))
    for fix in found.fixes:
        assert check_native(file, "trl", list(fix.overrides), gpu="H100").ok


def hf_deepspeed_config(ds: dict[str, Any]) -> Any:
    """transformers' HfTrainerDeepSpeedConfig, its methods over accelerate's HfDeepSpeedConfig
    (transformers gives it a dummy base when the deepspeed package is not installed)."""
    from accelerate.utils.deepspeed import HfDeepSpeedConfig
    from transformers.integrations import deepspeed as hf

    methods = {
        k: v
        for k, v in vars(hf.HfTrainerDeepSpeedConfig).items()
        if k in ("fill_match", "fill_only", "trainer_config_process", "is_auto")
    }
    config = type("TrainerDeepSpeedConfig", (HfDeepSpeedConfig,), methods)(ds)
    config.mismatches = []
    return config


def test_a_deepspeed_batch_mismatch_is_what_transformers_refuses(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    ds = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": "auto",
        "train_batch_size": 64,
        "zero_optimization": {"stage": 3},
    }
    (tmp_path / "ds.json").write_text(
        '{\n  "train_micro_batch_size_per_gpu": 4,\n  "gradient_accumulation_steps": "auto",\n'
        '  "train_batch_size": 64,\n  "zero_optimization": {"stage": 3}\n}\n'
    )
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, report_to="none", use_cpu=True
    )
    real = hf_deepspeed_config(ds)
    real.trainer_config_process(args)
    assert "- ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=2" in (
        real.mismatches
    )
    file = write(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\n"
        "per_device_train_batch_size: 2\ndeepspeed: ds.json\n",
    )
    result = check_native(file, "trl", gpu="H100")
    assert result.config is not None and result.config.trainer.strategy == "zero3"
    found = one(result, "trl-deepspeed-batch-mismatch")
    assert "- ds train_micro_batch_size_per_gpu=4 vs hf per_device_train_batch_size=2" in (
        found.message
    )
    where = found.locations["deepspeed:train_micro_batch_size_per_gpu"]
    assert where is not None and where.line == 2 and where.file.endswith("ds.json")
    # with 8 processes stated, train_batch_size is checked the way transformers computes it
    eight = check_native(file, "trl", ["num_processes=8", "per_device_train_batch_size=4"])
    found = one(eight, "trl-deepspeed-batch-mismatch")
    assert "train_batch_size=64 vs hf train_batch_size (calculated)=32" in found.message
    args8 = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, report_to="none", use_cpu=True
    )
    real = hf_deepspeed_config(ds)
    real.trainer_config_process(args8)  # one CPU process: world_size 1
    assert real.mismatches == ["- ds train_batch_size=64 vs hf train_batch_size (calculated)=4"]
    # (world_size x 4 x 1: the calculation cfgcheck makes with the stated process count)


def test_sft_refusals_are_what_sft_trainer_raises(tmp_path: Path, tiny_llama: Path) -> None:
    # packing without a length
    with pytest.raises(ValueError, match="When packing is enabled, `max_length` can't be `None`"):
        sft_trainer(tiny_llama, tmp_path, packing=True, max_length=None)
    file = write(
        tmp_path,
        "pack.yaml",
        f"model_name_or_path: {tiny_llama}\npacking: true\nmax_length: null\n",
    )
    found = one(check_native(file, "trl"), "trl-packing-without-max-length")
    located_at(found, "packing", file, line_of(file, "packing"))
    assert not check_native(file, "trl", list(found.fixes[0].overrides)).by_rule(found.rule)
    # a pad token the tokenizer does not have
    with pytest.raises(ValueError, match="is not found in the vocabulary"):
        sft_trainer(tiny_llama, tmp_path, pad_token="<nope>", max_length=32)
    pad = write(
        tmp_path,
        "pad.yaml",
        f"model_name_or_path: {tiny_llama}\nmax_length: 32\npad_token: <nope>\n",
    )
    found = one(check_native(pad, "trl"), "special-token-not-in-vocab")
    assert found.severity == "error" and "SFTTrainer raises" in found.message
    located_at(found, "tokenizer.pad_token", pad, line_of(pad, "pad_token"))


def test_a_lora_adapter_on_lm_head_is_refused(tmp_path: Path, tiny_llama: Path) -> None:
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    from datasets import Dataset

    lora = write(
        tmp_path,
        "lora.yaml",
        f"model_name_or_path: {tiny_llama}\nmax_length: 32\nuse_peft: true\n"
        "lora_target_modules: [q_proj, lm_head]\n",
    )
    found = one(check_native(lora, "trl"), "trl-peft-lm-head")
    located_at(found, "lora_target_modules", lora, line_of(lora, "lora_target_modules"))
    assert found.fixes[0].overrides == ("lora_target_modules=[q_proj]",)
    args = SFTConfig(
        output_dir=str(tmp_path / "o"), use_cpu=True, bf16=False, max_length=32, report_to="none"
    )
    try:
        trainer = SFTTrainer(
            model=str(tiny_llama),
            args=args,
            train_dataset=Dataset.from_dict({"text": texts(2, 8)}),
            peft_config=LoraConfig(target_modules=["q_proj", "lm_head"], r=4),
        )
    except ImportError as e:  # peft refuses this venv's torchao before TRL's check runs
        pytest.skip(f"peft cannot wrap a model here: {e}")
    except ValueError as e:
        assert "Applying a PEFT adapter to `lm_head` is not supported" in str(e)
    else:
        raise AssertionError(f"SFTTrainer accepted an adapter on lm_head: {trainer}")


def test_renames_across_versions_keep_the_meaning(tmp_path: Path) -> None:
    """warmup_ratio (transformers 4) is warmup_steps as a ratio in transformers 5; torch_dtype
    is ModelConfig.dtype: the fixes rename, and the renamed file means the same."""
    text = (
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\nwarmup_ratio: 0.1\n"
        "torch_dtype: bfloat16\n"
    )
    old = write(tmp_path, "old.yaml", text)
    with pytest.raises(ValueError, match="Unknown arguments from config file"):
        parse("sft", old)
    result = check_native(old, "trl", gpu="H100")
    fixes = [f.fixes[0].overrides for f in result.by_rule("unknown-native-key")]
    assert ("~warmup_ratio", "warmup_steps=0.1") in fixes
    assert ("~torch_dtype", "dtype=bfloat16") in fixes
    new = write(
        tmp_path,
        "new.yaml",
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\nwarmup_steps: 0.1\n"
        "dtype: bfloat16\n",
    )
    _, sft, model, _ = parse("sft", new)
    assert sft.get_warmup_steps(100) == 10 and model.dtype == "bfloat16"
    assert not check_native(new, "trl", gpu="H100").by_rule("unknown-native-key")


def test_grpo_needs_two_generations(tmp_path: Path) -> None:
    from trl import GRPOConfig

    with pytest.raises(ValueError, match="GRPO requires at least 2 generations per prompt"):
        GRPOConfig(output_dir=str(tmp_path), use_cpu=True, num_generations=1, report_to="none")
    file = write(
        tmp_path, "grpo.yaml", "model_name_or_path: Qwen/Qwen2.5-0.5B\nnum_generations: 1\n"
    )
    found = one(check_native(file, "trl"), "trl-grpo-generation-batch")
    assert "at least 2 generations" in found.message
    located_at(found, "num_generations", file, line_of(file, "num_generations"))
    # a length that is not a number is the schema's one-line finding, not a crash
    bad = write(
        tmp_path,
        "bad.yaml",
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nnum_generations: 4\nmax_completion_length: abc\n",
    )
    assert one(check_native(bad, "trl"), "invalid-value").severity == "error"


def test_no_truncation_on_learned_positions_is_a_warning(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = tmp_path / "tiny-gpt2"
    GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4)
    ).save_pretrained(folder)
    tokenizer_files(folder, 64, pad_token="<unk>")
    file = write(tmp_path, "g.yaml", f"model_name_or_path: {folder}\nmax_length: null\n")
    found = one(check_native(file, "trl"), "trl-positions-past-context")
    assert found.severity == "warning" and "first sample longer than 16" in found.message
    # a sample of 24 tokens through SFTTrainer with no truncation: the IndexError it warns of
    from trl import SFTConfig, SFTTrainer

    from datasets import Dataset

    args = SFTConfig(
        output_dir=str(tmp_path / "o"),
        use_cpu=True,
        bf16=False,
        max_length=None,
        max_steps=1,
        per_device_train_batch_size=1,
        report_to="none",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SFTTrainer(
            model=str(folder), args=args, train_dataset=Dataset.from_dict({"text": texts(2, 24)})
        )
    with pytest.raises(IndexError, match="index out of range in self"):
        trainer.train()
