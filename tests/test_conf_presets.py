"""The shipped conf/ tree: every preset is valid, links its source, and passes its shape rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cfgcheck import check
from cfgcheck.rules import run_rules
from cfgcheck.schema import ModelConfig, RunConfig
from tests.conftest import CONF, MODEL_FOLDER_OPTION

MODEL_PRESETS = sorted(
    p.stem for p in (CONF / "model").glob("*.yaml") if p.stem != MODEL_FOLDER_OPTION
)

GEMMA3_LEN = 262145  # Gemma 3's 262144 SentencePiece pieces + <image_soft_token>

# Each model with its own tokenizer preset, and the fix its pairing needs, if any.
PAIRS = {
    "tinyllama-1.1b": ("llama-2", []),
    "llama-2-7b": ("llama-2", []),
    "llama-3-8b": ("llama-3", []),
    "mistral-7b-v0.1": ("mistral", []),
    "qwen1.5-7b": ("qwen1.5", []),
    "gemma-2b": ("gemma", []),
    # phi-2 ships no pad token: padding needs one (pad = eos is the usual fix).
    "phi-2": ("phi-2", ['+tokenizer.pad_token="<|endoftext|>"', "+tokenizer.pad_token_id=50256"]),
    "llama-3.1-8b": ("llama-3", []),
    "llama-3.2-1b": ("llama-3", []),
    "llama-3.2-3b": ("llama-3", []),
    "mistral-7b-v0.3": ("mistral-v0.3", []),
    "qwen2.5-0.5b": ("qwen2.5", []),
    "qwen2.5-1.5b": ("qwen2.5", []),
    "qwen2.5-7b": ("qwen2.5", []),
    "qwen3-0.6b": ("qwen3", []),
    "qwen3-8b": ("qwen3", []),
    "gemma-2-2b": ("gemma", []),
    "gemma-2-9b": ("gemma", []),
    "phi-3-mini-4k": ("phi-3", []),
    "smollm2-135m": ("smollm2", []),
    "smollm2-360m": ("smollm2", []),
    "smollm2-1.7b": ("smollm2", []),
    "mixtral-8x7b": ("mistral", []),
    "mixtral-8x22b": ("mistral-v0.3", []),
    "qwen3-30b-a3b": ("qwen3", []),
    "llama-3.3-70b": ("llama-3.1-instruct", []),
    "gpt-oss-20b": ("gpt-oss", []),
    "gemma-3-4b": ("gemma-3", []),
    "gemma-3-12b": ("gemma-3", []),
    # gemma-3-1b's 262144 rows stop one short of its tokenizer's <image_soft_token> (262144):
    # the pairing needs the embedding resized to len(tokenizer).
    "gemma-3-1b": (
        "gemma-3",
        [f"model.vocab_size={GEMMA3_LEN}", f"model.padded_vocab_size={GEMMA3_LEN}"],
    ),
    "olmo-2-7b": ("olmo-2", []),
    # SmolLM3 was pretrained with Llama-3.2's tokenizer (see conf/tokenizer/llama-3.yaml).
    "smollm3-3b": ("llama-3", []),
    "phi-4": ("phi-4", []),
}

TOKENIZER_RULES = {"vocab-mismatch", "special-token-out-of-range", "pad-token-missing"}


def load(path: Path) -> dict[str, object]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def test_required_presets_ship() -> None:
    assert set(PAIRS) <= set(MODEL_PRESETS)


def test_every_tokenizer_preset_is_paired_with_a_model() -> None:
    """demo-bpe aside (no model's tokenizer), each tokenizer preset is checked with a model."""
    shipped = {p.stem for p in (CONF / "tokenizer").glob("*.yaml")} - {"demo-bpe"}
    assert shipped == {tokenizer for tokenizer, _ in PAIRS.values()}


@pytest.mark.parametrize("name", MODEL_PRESETS)
def test_model_preset_is_valid_and_links_its_source(name: str) -> None:
    model = ModelConfig.model_validate(load(CONF / "model" / f"{name}.yaml"))
    assert model.name == name
    assert model.source is not None and model.source.startswith("https://")


@pytest.mark.parametrize("name", MODEL_PRESETS)
def test_model_preset_passes_shape_rules(name: str) -> None:
    model = ModelConfig.model_validate(load(CONF / "model" / f"{name}.yaml"))
    findings = list(run_rules(RunConfig.model_construct(model=model), {"model"}))
    assert findings == []


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_model_with_its_tokenizer_has_no_tokenizer_errors(name: str) -> None:
    tokenizer, fix = PAIRS[name]
    result = check(CONF, "config", [f"model={name}", f"tokenizer={tokenizer}", *fix])
    assert [f for f in result.errors if f.rule in TOKENIZER_RULES] == []


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_model_vocab_size_is_its_tokenizer_length(name: str) -> None:
    """cfgcheck/models/presets.py's convention: a model preset's vocab_size is len(tokenizer) of
    the tokenizer it was published with (the rows may be more), so a LoRA run on the pair finds no
    other-tokenizer error."""
    tokenizer, fix = PAIRS[name]
    model = ModelConfig.model_validate(load(CONF / "model" / f"{name}.yaml"))
    size = load(CONF / "tokenizer" / f"{tokenizer}.yaml").get("vocab_size")
    assert isinstance(size, int)
    resized = [int(f.split("=")[1]) for f in fix if f.startswith("model.vocab_size=")]
    if resized:  # the pairing's fix builds the embedding for the tokenizer
        assert resized == [size] and model.rows < size
    else:
        assert model.vocab_size == size and size <= model.rows


def test_phi2_without_a_pad_token_is_flagged() -> None:
    result = check(CONF, "config", ["model=phi-2", "tokenizer=phi-2"])
    assert [f.rule for f in result.errors] == ["pad-token-missing"]


def test_gemma3_1b_with_its_published_tokenizer_is_warned() -> None:
    """Gemma 3's tokenizer adds <image_soft_token> at 262144 (len 262145), past the 1B's 262144
    embedding rows: a text spelling the token encodes to id 262144 and the lookup fails (the
    mechanism tests/crash/test_crash_vocab.py reproduces on a real embedding), but plain text
    never does, and the model is fine-tuned with that tokenizer as published: a warning
    (tests/test_vocab_special_beyond.py). The 4B and 12B have 262208 rows and pass."""
    result = check(CONF, "config", ["model=gemma-3-1b", "tokenizer=gemma-3"])
    assert result.errors == []
    (finding,) = result.warnings
    assert finding.rule == "vocab-mismatch"
    assert "(id 262144, tokenizer.placeholder_tokens_from=262144)" in finding.message
    assert (f"model.padded_vocab_size={GEMMA3_LEN}",) in [fix.overrides for fix in finding.fixes]


@pytest.mark.parametrize("group", ["tokenizer", "data", "trainer"])
def test_every_group_option_composes_and_validates_its_section(group: str) -> None:
    for path in sorted((CONF / group).glob("*.yaml")):
        result = check(CONF, "config", [f"{group}={path.stem}"])
        schema_errors = [f for f in result.findings if f.rule in {"unknown-key", "invalid-value"}]
        assert schema_errors == [], path.name


def test_the_model_folder_option_checks_a_folder_without_dropping_groups() -> None:
    """model=pretrained spells no shape, so model.pretrained needs no '~model': its default
    (a preset's Hub id) validates, and a plain override points it at another model."""
    default = check(CONF, "config", [f"model={MODEL_FOLDER_OPTION}"])
    assert default.ok, [f.message for f in default.errors]
    assert default.config is not None and default.config.model.n_layer == 22  # TinyLlama
    other = check(
        CONF,
        "config",
        [f"model={MODEL_FOLDER_OPTION}", "model.pretrained=Qwen/Qwen2.5-0.5B", "tokenizer=qwen2.5"],
    )
    assert other.ok, [f.message for f in other.errors]
    assert other.config is not None and other.config.model.padded_vocab_size == 151936


def test_gemma_shape_gives_its_published_parameter_count() -> None:
    """The gemma-2b preset's shape reproduces 2,506,172,416 parameters (tied embeddings,
    head_size 256 with 8 heads and one KV head, GeGLU 16384)."""
    m = ModelConfig.model_validate(load(CONF / "model" / "gemma-2b.yaml"))
    q = m.n_embd * m.n_head * m.head_dim
    kv = 2 * m.n_embd * m.kv_heads * m.head_dim
    o = m.n_head * m.head_dim * m.n_embd
    mlp = 3 * m.n_embd * m.mlp_width
    layer = q + kv + o + mlp + 2 * m.n_embd
    total = m.rows * m.n_embd + m.n_layer * layer + m.n_embd
    assert total == 2_506_172_416
