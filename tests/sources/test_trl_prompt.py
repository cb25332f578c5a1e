"""An online trainer's prompt length (cfgcheck/sources/trl_prompt.py): what bounds it per TRL
version, what the estimate counts, and the ``trl-prompt-unbounded`` warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cfgcheck.memory.estimate import estimate
from cfgcheck.sources import check_native, load_native
from cfgcheck.validate import validate
from tests.sources.support import line_of, one, write

MODEL = "model_name_or_path: Qwen/Qwen2.5-1.5B\n"
BOTH = "max_prompt_length: 300\nmax_completion_length: 256\n"


def _load(tmp_path: Path, text: str, version: str, trainer: str = "grpo") -> Any:
    file = write(tmp_path, "config.yaml", MODEL + text)
    loaded = load_native(file, "trl", options={"framework_version": version, "trainer": trainer})
    cfg = validate(loaded.config).config
    assert cfg is not None
    return cfg


@pytest.mark.parametrize(
    ("trainer", "version", "keys", "bound", "prompt"),
    [
        # GRPOTrainer 0.18 truncates to max_prompt_length (default 512, v0.18.0 lines 997-999)
        ("grpo", "0.18.2", "max_completion_length: 256\n", "truncated", 512),
        ("grpo", "0.25.1", BOTH, "truncated", 300),
        # 0.26: GRPOConfig still accepts max_prompt_length, GRPOTrainer reads it nowhere
        ("grpo", "0.26.2", BOTH, "context", None),
        ("grpo", "1.16.0", "max_completion_length: 256\n", "context", None),
        # a colocated vLLM engine refuses a prompt past its max_model_len
        (
            "grpo",
            "1.16.0",
            "max_completion_length: 512\nuse_vllm: true\nvllm_mode: colocate\n"
            "vllm_max_model_length: 2048\n",
            "vllm",
            1536,
        ),
        # vllm_max_model_length is colocate's: a server's max_model_len is set where it runs
        (
            "grpo",
            "1.16.0",
            "max_completion_length: 512\nuse_vllm: true\nvllm_mode: server\n"
            "vllm_max_model_length: 2048\n",
            "context",
            None,
        ),
        # RLOOTrainer truncated one release longer (0.26.0 lines 1133-1134)
        ("rloo", "0.26.2", BOTH, "truncated", 300),
        ("rloo", "0.27.2", BOTH, "context", None),
    ],
)
def test_the_prompt_bound_per_version(
    tmp_path: Path, trainer: str, version: str, keys: str, bound: str, prompt: int | None
) -> None:
    cfg = _load(tmp_path, keys, version, trainer)
    rl, block = cfg.trainer.rl, cfg.model.block_size
    completion = rl.scored_tokens
    expected = block - completion if prompt is None else prompt  # None: the model's context
    assert (rl.prompt_bound, rl.prompt_tokens) == (bound, expected)
    assert cfg.data.max_seq_length == expected + completion


def test_the_estimate_counts_and_names_the_prompt(tmp_path: Path) -> None:
    """TRL 1.16 GRPO without a bound: the sequence is the model's context (the worst-case
    prompt plus the completion), named in the estimate; with vllm_max_model_length, its cap."""
    keys = (
        "max_completion_length: 1024\nper_device_train_batch_size: 2\nuse_peft: true\n"
        "bf16: true\ngradient_checkpointing: true\nuse_vllm: true\nvllm_mode: colocate\n"
    )
    worst = _load(tmp_path, keys, "1.16.0")
    est = estimate(worst.model, worst.data, worst.trainer)
    assert est.seq_len == worst.model.block_size
    (note,) = (n for n in est.notes if "prompts up to" in n)
    assert f"prompts up to {worst.model.block_size - 1024}" in note and "worst case" in note
    (acts,) = (c for c in est.components if c.key == "activations")
    assert "worst case" in acts.note  # shown by `cfgcheck memory`
    capped = _load(tmp_path, keys + "vllm_max_model_length: 3072\n", "1.16.0")
    est2 = estimate(capped.model, capped.data, capped.trainer)
    assert est2.seq_len == 3072 and any("prompts up to 2048" in n for n in est2.notes)
    # counting the completion alone (what the prompt's 0 would give) is far below either
    alone = estimate(
        capped.model, capped.data.model_copy(update={"max_seq_length": 1024}), capped.trainer
    )
    assert alone.total_bytes < est2.total_bytes < est.total_bytes


def test_unbounded_prompts_are_a_warning(tmp_path: Path) -> None:
    opts = {"framework_version": "1.16.0", "trainer": "grpo"}
    text = MODEL + "num_generations: 4\nmax_completion_length: 1024\n"
    file = write(tmp_path, "a.yaml", text)
    found = one(check_native(file, "trl", options=opts), "trl-prompt-unbounded")
    assert found.severity == "warning"
    where = found.locations["max_completion_length"]
    assert where is not None and where.line == line_of(file, "max_completion_length")
    assert "truncates no prompt" in found.message and "worst case" in found.message
    assert "filter the dataset" in found.hint
    # 0.26-0.27 accept max_prompt_length and ignore it: the warning says so
    old = write(tmp_path, "b.yaml", text + "max_prompt_length: 512\n")
    ignored = one(
        check_native(old, "trl", options={**opts, "framework_version": "0.26.2"}),
        "trl-prompt-unbounded",
    )
    assert "no trainer code reads" in ignored.message
    # bounded: 0.18 truncates; colocated vLLM with vllm_max_model_length refuses longer ones
    for version, extra in (
        ("0.18.2", ""),
        ("1.16.0", "use_vllm: true\nvllm_mode: colocate\nvllm_max_model_length: 2048\n"),
    ):
        bounded = write(tmp_path, "c.yaml", text + extra)
        result = check_native(bounded, "trl", options={**opts, "framework_version": version})
        assert not result.by_rule("trl-prompt-unbounded"), version


def test_trl_116_tokenizes_prompts_whole(tmp_path: Path) -> None:
    """Ground truth for the unbounded case: the installed GRPOTrainer's own _tokenize_prompts
    keeps every token of a prompt far longer than the tokenizer's model_max_length."""
    import types

    pytest.importorskip("trl")
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from tests.model_folders import tokenizer_files

    assert "max_prompt_length" not in GRPOConfig.__dataclass_fields__
    folder = tokenizer_files(tmp_path / "tok", 64)
    tok = AutoTokenizer.from_pretrained(folder, model_max_length=32)
    text = " ".join(["a b c d"] * 200)
    owner = types.SimpleNamespace(processing_class=tok, _is_vlm=False, environment_factories=None)
    (ids,), _, _ = GRPOTrainer._tokenize_prompts(owner, [text])
    assert len(ids) == len(tok(text)["input_ids"]) > 32 * 10


def test_a_worst_case_memory_verdict_is_a_warning(tmp_path: Path) -> None:
    """Out of memory at the worst-case prompt depends on the data: a warning that says so;
    the same run with vllm_max_model_length capping every sequence is a certain error."""
    opts = {"framework_version": "1.16.0", "trainer": "grpo"}
    text = (
        MODEL + "num_generations: 16\nper_device_train_batch_size: 16\n"
        "max_completion_length: 4096\nbf16: true\nuse_vllm: true\nvllm_mode: colocate\n"
    )
    worst = one(
        check_native(write(tmp_path, "a.yaml", text), "trl", gpu="H100", options=opts),
        "gpu-memory",
    )
    assert worst.severity == "warning" and "the worst case" in worst.message
    capped = text + "vllm_max_model_length: 8192\n"
    certain = one(
        check_native(write(tmp_path, "b.yaml", capped), "trl", gpu="H100", options=opts),
        "gpu-memory",
    )
    assert certain.severity == "error" and "worst case" not in certain.message
