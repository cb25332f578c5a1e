"""The published launch-script corpus (tests/sources/native/launch/published, sources and
commits in its SOURCES.md): each script, the folder it runs from, the arguments it takes, the
transformers release it was written for, and the Hub cache its models are read from (configs
as published on the Hub: tests/model_folders.py, and the OPT and larger Llama configs below)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.model_folders import GPT2, LLAMA2_7B, MISTRAL_7B_V03, QWEN25_05B, hub_cache

PUBLISHED = Path(__file__).resolve().parent / "native" / "launch" / "published"

# facebook/opt-1.3b config.json (Hub); opt-350m and opt-6.7b differ in these widths.
OPT_13B: dict[str, Any] = {
    "activation_function": "relu",
    "architectures": ["OPTForCausalLM"],
    "bos_token_id": 2,
    "do_layer_norm_before": True,
    "eos_token_id": 2,
    "ffn_dim": 8192,
    "hidden_size": 2048,
    "max_position_embeddings": 2048,
    "model_type": "opt",
    "num_attention_heads": 32,
    "num_hidden_layers": 24,
    "pad_token_id": 1,
    "torch_dtype": "float16",
    "vocab_size": 50272,
    "word_embed_proj_dim": 2048,
}
OPT_350M = OPT_13B | {
    "ffn_dim": 4096,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "word_embed_proj_dim": 512,
    "do_layer_norm_before": False,
}
OPT_67B = OPT_13B | {
    "ffn_dim": 16384,
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "word_embed_proj_dim": 4096,
}
# meta-llama/Llama-2-13b-hf and -70b-hf config.json (Hub): Llama-2-7B's with these widths.
LLAMA2_13B = LLAMA2_7B | {
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "num_attention_heads": 40,
    "num_hidden_layers": 40,
    "num_key_value_heads": 40,
}
LLAMA2_70B = LLAMA2_7B | {
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
}
# mistralai/Mistral-7B-v0.1: v0.3's shapes with the 32000-token vocabulary, a 4096-token
# sliding window and rope_theta 10000 (its config.json on the Hub).
MISTRAL_7B_V01 = MISTRAL_7B_V03 | {
    "vocab_size": 32000,
    "sliding_window": 4096,
    "rope_theta": 10000.0,
}
# 01-ai/Yi-6B and Yi-34B config.json (Hub; Llama architecture since their 2023-11 update).
YI_6B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-05,
    "rope_theta": 5000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 64000,
}
YI_34B = YI_6B | {
    "hidden_size": 7168,
    "intermediate_size": 20480,
    "num_attention_heads": 56,
    "num_hidden_layers": 60,
    "num_key_value_heads": 8,
}
# openai-community/gpt2-xl config.json (Hub; cached as models--gpt2-xl under its legacy id).
GPT2_XL = GPT2 | {"n_embd": 1600, "n_head": 25, "n_layer": 48}
MODELS: dict[str, dict[str, Any]] = {
    "facebook/opt-1.3b": OPT_13B,
    "facebook/opt-350m": OPT_350M,
    "facebook/opt-6.7b": OPT_67B,
    "AdamG012/chat-opt-1.3b-sft-deepspeed": OPT_13B,  # an OPT-1.3b fine-tune
    "lmsys/vicuna-7b-v1.5": LLAMA2_7B,
    "lmsys/vicuna-13b-v1.5": LLAMA2_13B,
    "meta-llama/Llama-2-7b-hf": LLAMA2_7B,
    "meta-llama/Llama-2-70b-hf": LLAMA2_70B,
    "mistralai/Mistral-7B-v0.1": MISTRAL_7B_V01,
    "Qwen/Qwen2.5-0.5B": QWEN25_05B,
    "01-ai/Yi-6B": YI_6B,
    "01-ai/Yi-34B": YI_34B,
    "gpt2": GPT2,
    "gpt2-xl": GPT2_XL,
}


def make_cache(cache: Path) -> Path:
    for i, (hub_id, config) in enumerate(MODELS.items()):
        hub_cache(cache, hub_id, config, f"{i:040x}")
    return cache


@dataclass(frozen=True)
class Case:
    script: str  # under PUBLISHED
    cwd: str | None = None  # the folder it runs from, under PUBLISHED (None: found)
    args: tuple[str, ...] = ()  # the script's own arguments ($1, $2...) and KEY=VALUE
    transformers: str | None = None  # the release the repository pins
    errors: frozenset[str] = frozenset()  # the error rules expected, each explained below
    why: str = ""
    # A model only its repository's own code builds (trust_remote_code: ChatGLM, Baichuan,
    # Qwen-7B): the verdict is the one line that names it (exit 2), after the flags parse.
    remote: str | None = None

    @property
    def name(self) -> str:
        return self.script


DSCHAT = "dschat/training"
RENAMED = frozenset({"launch-unknown-flag"})  # --evaluation_strategy / --warmup_ratio
CASES = [
    # FastChat (pins no transformers release: checked against the installed one, which
    # refuses --evaluation_strategy and --warmup_ratio).
    Case(
        "fastchat/scripts/train_vicuna_7b.sh",
        args=("model_name_or_path=lmsys/vicuna-7b-v1.5",),
        errors=RENAMED,
        why="renamed flags in the installed transformers",
    ),
    Case(
        "fastchat/scripts/train_vicuna_13b.sh",
        args=("model_name_or_path=lmsys/vicuna-13b-v1.5",),
        errors=RENAMED,
        why="renamed flags in the installed transformers",
    ),
    Case("fastchat/scripts/train_lora.sh", errors=RENAMED, why="renamed flags"),
    Case("fastchat/scripts/test_readme_train.sh", errors=RENAMED, why="renamed flags"),
    Case(
        "fastchat/scripts/train_vicuna_7b.sh",
        args=("model_name_or_path=lmsys/vicuna-7b-v1.5",),
        transformers="4.45.2",
    ),
    Case("fastchat/scripts/train_lora.sh", transformers="4.45.2"),
    # stanford_alpaca's README command (OPT-6.7B; the repository predates eval_strategy).
    Case("alpaca/train_opt.sh", errors=RENAMED, why="renamed flags"),
    Case("alpaca/train_opt.sh", transformers="4.37.2"),
    # LLaVA pins transformers==4.37.2 (pyproject.toml).
    *[
        Case(f"llava/scripts/v1_5/{name}.sh", transformers="4.37.2")
        for name in ("finetune", "finetune_lora", "pretrain")
    ],
    Case("llava/scripts/v1_5/finetune.sh", errors=RENAMED, why="installed transformers"),
    # LLaVA's first-release scripts leave the model to variables the user sets
    # ($MODEL_VERSION, $PROMPT_VERSION); the v1.5 task scripts start from the LLaVA-v1.5
    # checkpoint (a llava_llama config): both given a Vicuna model here.
    *[
        Case(
            f"llava/scripts/{name}.sh",
            args=("model_name_or_path=lmsys/vicuna-7b-v1.5", "version=v1"),
            transformers="4.37.2",
        )
        for name in (
            "finetune",
            "finetune_lora",
            "finetune_qlora",
            "pretrain",
            "finetune_full_schedule",
            "finetune_sqa",
            "v1_5/finetune_task",
            "v1_5/finetune_task_lora",
        )
    ],
    # DeepSpeed-Chat: argparse entry points, run from each step's folder.
    *[
        Case(
            f"{DSCHAT}/step1_supervised_finetuning/training_scripts/{s}",
            cwd=f"{DSCHAT}/step1_supervised_finetuning",
        )
        for s in (
            "opt/single_gpu/run_1.3b.sh",
            "opt/single_node/run_1.3b.sh",
            "opt/single_node/run_1.3b_lora.sh",
            "llama2/run_llama2_7b.sh",
            "llama2/run_llama2_7b_lora.sh",
        )
    ],
    Case(
        f"{DSCHAT}/step2_reward_model_finetuning/training_scripts/opt/single_node/run_350m.sh",
        cwd=f"{DSCHAT}/step2_reward_model_finetuning",
    ),
    Case(
        f"{DSCHAT}/step2_dpo_finetuning/training_scripts/opt/single_node/run_350m.sh",
        cwd=f"{DSCHAT}/step2_dpo_finetuning",
    ),
    Case(
        f"{DSCHAT}/step3_rlhf_finetuning/training_scripts/opt/single_node/run_1.3b.sh",
        cwd=f"{DSCHAT}/step3_rlhf_finetuning",
        args=("facebook/opt-1.3b", "facebook/opt-350m"),
    ),
    Case(
        f"{DSCHAT}/step3_rlhf_finetuning/training_scripts/llama2/run_llama2_7b_lora.sh",
        cwd=f"{DSCHAT}/step3_rlhf_finetuning",
        args=("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
    ),
    # ChatGLM-6B ptuning (requirements.txt pins transformers==4.27.1) and ChatGLM2-6B ptuning
    # (4.30.2): main.py parses arguments.py's ModelArguments (--quantization_bit,
    # --pre_seq_len) and Seq2SeqTrainingArguments (--predict_with_generate); the models are
    # remote code. Against transformers 5 --overwrite_output_dir is refused (removed in 5.0).
    *[
        Case(f"{repo}/ptuning/{name}", transformers=pin, remote=model)
        for repo, pin, model in (
            ("chatglm", "4.27.1", "THUDM/chatglm-6b"),
            ("chatglm2", "4.30.2", "THUDM/chatglm2-6b"),
        )
        for name in ("train.sh", "ds_train_finetune.sh", "train_chat.sh")
    ],
    Case("chatglm/ptuning/ds_train_finetune.sh", remote="THUDM/chatglm-6b", errors=RENAMED),
    # Baichuan2's README deepspeed command (fine-tune/requirements.txt pins no transformers):
    # the installed release refuses --warmup_ratio; the model is remote code.
    Case(
        "baichuan2/fine-tune/readme_train.sh",
        remote="baichuan-inc/Baichuan2-7B-Base",
        errors=RENAMED,
        why="--warmup_ratio in transformers 5",
    ),
    Case(
        "baichuan2/fine-tune/readme_train.sh",
        transformers="4.37.2",
        remote="baichuan-inc/Baichuan2-7B-Base",
    ),
    # Yi finetune/scripts (DeepSpeed-Chat-style argparse main.py; they `cd ../sft/` first and
    # name placeholder model folders, given a Hub id here).
    *[
        Case(
            f"yi/finetune/scripts/{name}.sh",
            cwd="yi/finetune/sft",
            args=(f"model_name_or_path=01-ai/{model}",),
        )
        for name, model in (
            ("run_sft_Yi_6b", "Yi-6B"),
            ("run_sft_lora_Yi_6b", "Yi-6B"),
            ("run_sft_Yi_34b", "Yi-34B"),
        )
    ],
    # transformers examples/pytorch/language-modeling/run_clm.py (its check_min_version asks
    # 4.57.0.dev0: checked against 4.57.1): the README's two commands, and a published
    # script that passes --overwrite_output_dir, which transformers 5 removed.
    Case("transformers_clm/readme_clm_wikitext.sh", transformers="4.57.1"),
    Case("transformers_clm/readme_clm_wikitext.sh"),
    Case(  # the README's placeholders for its own files, given
        "transformers_clm/readme_clm_files.sh",
        transformers="4.57.1",
        args=("train_file=train.txt", "validation_file=valid.txt"),
    ),
    Case("transformers_clm/train_gpt2_xl.sh", transformers="4.57.1"),
    Case("transformers_clm/train_gpt2_xl.sh", errors=RENAMED, why="removed in transformers 5"),
    # parsa-epfl/quantization-sparsity-interplay runs its transformers fork's run_clm.py after
    # copying files and writing a YAML with a multi-line echo: read against upstream's copy.
    Case("transformers_clm/gpt2_wikitext_finetune.sh", transformers="4.57.1"),
    Case("transformers_clm/gpt2_wikitext_finetune.sh", errors=RENAMED, why="removed in 5"),
    # peft examples/sft (TRL's SFTConfig).
    *[
        Case(f"peft_sft/{name}.sh")
        for name in (
            "run_peft",
            "run_peft_deepspeed",
            "run_peft_fsdp",
            "run_peft_multigpu",
            "run_peft_qlora_deepspeed_stage3",
            "run_peft_qlora_fsdp",
        )
    ],
]
