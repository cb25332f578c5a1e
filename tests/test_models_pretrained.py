"""model.pretrained: real config.json files of published checkpoints, LitGPT model_config.yaml,
the local Hugging Face cache, presets, shape disagreements and the vocabulary semantics."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import cfgcheck
from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Finding, Location
from cfgcheck.models.files import ModelFolderError, read_json
from cfgcheck.models.resolve import ModelSource, resolve_pretrained
from tests.conftest import run_cfgcheck
from tests.model_folders import (
    LLAMA2_7B,
    PUBLISHED,
    QWEN25_05B,
    hub_cache,
    qwen25_tokenizer_files,
    tokenizer_files,
    write_config,
)


def shape(source: ModelSource) -> dict[str, Any]:
    return {k: v.value for k, v in source.values.items()}


def run(model: dict[str, Any], tokenizer: dict[str, Any] | None = None, **trainer: Any) -> Any:
    """A plain run config around a model section (the rest from the shipped defaults' kind)."""
    return {
        "name": "pretrained-test",
        "model": model,
        **({"tokenizer": tokenizer} if tokenizer is not None else {}),
        "data": {"max_seq_length": 512},
        "trainer": {"micro_batch_size": 1, "finetuning": "full", **trainer},
    }


def fired(result: cfgcheck.CheckResult, rule: str) -> list[Finding]:
    return result.by_rule(rule)


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never the user's own ~/.cache: every test sees an empty cache unless it fills it."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


# --- config.json of published checkpoints, against transformers' own reading ---------------


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED))
def test_published_config_reads_as_transformers_reads_it(tmp_path: Path, hub_id: str) -> None:
    transformers = pytest.importorskip("transformers")
    data = PUBLISHED[hub_id]
    got = shape(resolve_pretrained(str(write_config(tmp_path / "m", data))))
    hf = transformers.AutoConfig.for_model(**data)
    assert got["n_layer"] == hf.num_hidden_layers
    assert got["n_embd"] == hf.hidden_size
    assert got["n_head"] == hf.num_attention_heads
    assert got["n_query_groups"] == getattr(hf, "num_key_value_heads", hf.num_attention_heads)
    head = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    assert got.get("head_size", hf.hidden_size // hf.num_attention_heads) == head
    width = getattr(hf, "intermediate_size", None) or getattr(hf, "n_inner", None)
    assert got["intermediate_size"] == (width or 4 * hf.hidden_size)
    assert got["padded_vocab_size"] == hf.vocab_size  # config.json vocab_size = embedding rows
    assert "vocab_size" not in got  # the trained tokenizer length is not in a config.json
    assert got["block_size"] == hf.max_position_embeddings
    assert got["tie_embeddings"] == hf.tie_word_embeddings
    assert got["architecture"] == data["model_type"]
    # the whole run config validates with the folder's shape (Gemma 2 soft-caps its scores and
    # transformers has no sdpa path for it: _supports_sdpa = False in modeling_gemma2.py)
    attention = "eager" if data["model_type"] == "gemma2" else "sdpa"
    cfg = run(
        {"pretrained": str(tmp_path / "m")},
        {"vocab_size": 1000, "pad_token_id": 0},
        attention=attention,
    )
    result = cfgcheck.validate(cfg)
    assert result.ok, [f.message for f in result.errors]


@pytest.mark.parametrize(
    ("hub_id", "expected"),
    [
        ("Qwen/Qwen2.5-0.5B", {"attn_bias": True, "n_query_groups": 2, "head_size": 64,
                               "sliding_window_size": None, "tie_embeddings": True}),
        ("Qwen/Qwen3-0.6B", {"norm_qk": True, "head_size": 128, "attn_bias": False}),
        ("google/gemma-2-2b", {"mlp": "geglu", "sliding_window_size": 4096,
                               "attention_logit_softcapping": 50.0,
                               "final_logit_softcapping": 30.0, "post_attention_norm": True,
                               "post_mlp_norm": True}),
        ("google/gemma-2b", {"mlp": "geglu", "n_query_groups": 1, "head_size": 256}),
        ("microsoft/phi-2", {"mlp": "gelu", "norm": "layernorm", "bias": True,
                             "lm_head_bias": True, "rotary_fraction": 0.4,
                             "shared_attention_norm": True, "parallel_residual": True}),
        ("microsoft/Phi-3-mini-4k-instruct", {"mlp": "swiglu", "sliding_window_size": 2047,
                                              "padded_vocab_size": 32064}),
        ("mistralai/Mistral-7B-v0.3", {"sliding_window_size": None, "n_query_groups": 8}),
        ("meta-llama/Llama-3.2-1B", {"head_size": 64, "tie_embeddings": True,
                                     "block_size": 131072}),
        ("openai-community/gpt2", {"mlp": "gelu", "norm": "layernorm", "bias": True,
                                   "intermediate_size": 3072, "block_size": 1024}),
    ],
)  # fmt: skip
def test_architecture_elements(tmp_path: Path, hub_id: str, expected: dict[str, Any]) -> None:
    got = shape(resolve_pretrained(str(write_config(tmp_path / "m", PUBLISHED[hub_id]))))
    assert {k: got[k] for k in expected} == expected


def test_values_are_located_at_the_config_json_key(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "qwen", QWEN25_05B)
    source = resolve_pretrained(str(folder))
    lines = (folder / "config.json").read_text().splitlines()
    line = source.line(source.values["n_layer"])
    assert line is not None and '"num_hidden_layers": 24' in lines[line - 1]


def test_a_default_of_the_transformers_class_is_named(tmp_path: Path) -> None:
    data = {k: v for k, v in LLAMA2_7B.items() if k != "num_key_value_heads"}
    data.pop("tie_word_embeddings")
    source = resolve_pretrained(str(write_config(tmp_path / "l", data)))
    default = source.values["tie_embeddings"].default_of
    assert default == "transformers LlamaConfig.tie_word_embeddings"
    assert source.values["n_query_groups"].value == 32  # None -> num_attention_heads


# --- vocabulary: embedding rows and tokenizer length are separate facts ---------------------


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen2.5-0.5B's config.json (151,936 rows) with a 151,665-token tokenizer."""
    folder = write_config(tmp_path_factory.mktemp("qwen") / "Qwen2.5-0.5B", QWEN25_05B)
    return qwen25_tokenizer_files(folder)


@pytest.fixture(scope="module")
def llama2_padded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Llama-2-7b's config.json (32,000 rows); its tokenizer gained an added <pad> (32,001)
    and the embedding was not resized."""
    folder = write_config(tmp_path_factory.mktemp("llama") / "Llama-2-7b-hf", LLAMA2_7B)
    return tokenizer_files(folder, 32000, added=("<pad>",), pad_token="<pad>")


def test_larger_embedding_than_tokenizer_passes(qwen_folder: Path) -> None:
    result = cfgcheck.validate(run({"pretrained": str(qwen_folder)}))
    assert result.ok, [f.message for f in result.errors]
    assert not fired(result, "vocab-mismatch")
    assert result.config is not None
    assert result.config.model.rows == 151936 and result.config.model.vocab_size is None
    assert result.config.tokenizer.path == str(qwen_folder)  # defaulted to the folder


def test_added_pad_without_resize_fails(llama2_padded: Path) -> None:
    result = cfgcheck.validate(run({"pretrained": str(llama2_padded)}))
    (f,) = fired(result, "vocab-mismatch")
    assert f.severity == "error"
    assert "32001 tokens" in f.message and "32000 embedding rows" in f.message
    assert f.locations["model.padded_vocab_size"] == Location(
        str(llama2_padded / "config.json"), _line(llama2_padded, "vocab_size")
    )
    # the convention in use is the checkpoint's rows: no model.vocab_size in the advice
    assert "model.vocab_size" not in f.hint
    (fix,) = f.fixes
    assert fix.overrides == ("model.padded_vocab_size=32001",)
    fixed = cfgcheck.validate(run({"pretrained": str(llama2_padded), "padded_vocab_size": 32001}))
    assert fixed.ok, [x.message for x in fixed.errors]


def test_checkpoint_with_another_tokenizer_is_an_error(
    qwen_folder: Path, llama2_padded: Path
) -> None:
    """A tokenizer that fits the rows but is not the one stored with the checkpoint."""
    result = cfgcheck.validate(
        run({"pretrained": str(llama2_padded)}, {"path": str(_small_tokenizer(llama2_padded))})
    )
    (f,) = fired(result, "vocab-mismatch")
    assert f.severity == "error" and "not the tokenizer" in f.message
    # This folder's own tokenizer gained a <pad> (32001 > 32000 rows): the verified fix pairs
    # the switch back with the embedding resize (cfgcheck.fixcheck combines them).
    assert f.fixes[0].overrides[0] == f"tokenizer.path={llama2_padded}"
    from cfgcheck.fixcheck import apply_overrides

    raw = run({"pretrained": str(llama2_padded)}, {"path": str(_small_tokenizer(llama2_padded))})
    fixed = cfgcheck.validate(apply_overrides(raw, f.fixes[0].overrides))
    assert fixed.ok, [x.message for x in fixed.errors]


def _small_tokenizer(near: Path) -> Path:
    folder = near.parent / "other-tokenizer"
    if not folder.exists():
        from tests.factories import bpe, save_folder

        save_folder(bpe(), folder)
    return folder


@pytest.mark.parametrize(
    ("finetuning", "severity"), [("lora", "error"), ("qlora", "error"), ("full", "warning")]
)
def test_smaller_tokenizer_than_declared_vocab_is_graded(
    tmp_path: Path, finetuning: str, severity: str
) -> None:
    """LitGPT's convention (model.vocab_size = len(tokenizer) trained): a smaller tokenizer is
    another one when weights are loaded (LoRA needs a base), harmless from scratch."""
    tok = _small_tokenizer(tmp_path / "x")
    model = {"name": "m", "block_size": 64, "vocab_size": 32000, "n_layer": 2, "n_embd": 32,
             "n_head": 2}  # fmt: skip
    result = cfgcheck.validate(run(model, {"path": str(tok)}, finetuning=finetuning))
    (f,) = fired(result, "vocab-mismatch")
    assert f.severity == severity
    assert f.fixes and f.fixes[0].overrides[0].startswith("model.vocab_size=")


def test_tokenizer_beyond_declared_vocab_within_rows_is_info(tmp_path: Path) -> None:
    tok = _small_tokenizer(tmp_path / "x")
    # sizes only: a config.json without special-token ids (tokenizer-model-mismatch would
    # judge this small tokenizer's </s> against Qwen's eos otherwise)
    shape_only = {k: v for k, v in QWEN25_05B.items() if not k.endswith("_token_id")}
    size = cfgcheck.validate(run({"pretrained": str(write_config(tmp_path / "q", shape_only))},
                                 {"path": str(tok), "pad_token": "<unk>"}))  # fmt: skip
    assert size.ok, [f.message for f in size.errors]
    model = {"name": "m", "block_size": 64, "vocab_size": 100, "padded_vocab_size": 512,
             "n_layer": 2, "n_embd": 32, "n_head": 2}  # fmt: skip
    result = cfgcheck.validate(run(model, {"path": str(tok)}, finetuning="lora"))
    (f,) = fired(result, "vocab-mismatch")
    assert f.severity == "info" and "never trained" in f.message


# --- LitGPT checkpoint folders ------------------------------------------------------------

# litgpt/config.py (Lightning-AI/litgpt): dict(name="Llama-2-7b-hf", ..., vocab_size=32000,
# padding_multiple=64, n_layer=32, rotary_percentage=1.0, parallel_residual=False, bias=False,
# norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", intermediate_size=11008), as
# ``litgpt download`` saves it (the other keys are Config's defaults and left out here).
LITGPT_LLAMA2 = """\
name: Llama-2-7b-hf
hf_config:
  org: meta-llama
  name: Llama-2-7b-hf
block_size: 4096
vocab_size: 32000
padding_multiple: 64
n_layer: 32
n_embd: 4096
n_head: 32
rotary_percentage: 1.0
parallel_residual: false
bias: false
norm_class_name: RMSNorm
mlp_class_name: LLaMAMLP
intermediate_size: 11008
"""


def test_litgpt_checkpoint_folder(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints" / "meta-llama" / "Llama-2-7b-hf"
    folder.mkdir(parents=True)
    (folder / "model_config.yaml").write_text(LITGPT_LLAMA2)
    source = resolve_pretrained(str(folder))
    assert source.kind == "litgpt" and source.trained_vocab_declared
    got = shape(source)
    assert got["vocab_size"] == 32000 and got["padded_vocab_size"] == 32000
    assert (got["mlp"], got["norm"], got["rotary_fraction"]) == ("swiglu", "rmsnorm", 1.0)
    assert (got["bias"], got["parallel_residual"], got["n_query_groups"]) == (False, False, 32)
    assert source.line(source.values["n_layer"]) == 8
    # LitGPT's vocab_size is the trained tokenizer length: another tokenizer is an error,
    # and no config change fixes it (the folder has no tokenizer to point at)
    result = cfgcheck.validate(run({"pretrained": str(folder)}, {"vocab_size": 259}))
    (f,) = fired(result, "vocab-mismatch")
    assert f.severity == "error" and "another one" in f.message and not f.fixes


def test_litgpt_defaults_are_litgpts_not_cfgchecks(tmp_path: Path) -> None:
    (tmp_path / "model_config.yaml").write_text("name: tiny\nn_layer: 2\nn_embd: 64\nn_head: 4\n")
    got = shape(resolve_pretrained(str(tmp_path / "model_config.yaml")))
    # litgpt Config: LayerNorm, parallel residual, bias, 25 % rotary, GptNeoxMLP, 50254 -> 50688
    assert (got["norm"], got["parallel_residual"], got["bias"]) == ("layernorm", True, True)
    assert (got["rotary_fraction"], got["mlp"]) == (0.25, "gelu")
    assert (got["vocab_size"], got["padded_vocab_size"]) == (50254, 50688)


# --- the local Hugging Face cache and presets ---------------------------------------------


def test_hub_id_resolves_from_the_local_cache(empty_hub_cache: Path) -> None:
    commit = "a" * 40
    snapshot = hub_cache(empty_hub_cache, "Qwen/Qwen2.5-0.5B", QWEN25_05B, commit)
    source = resolve_pretrained("Qwen/Qwen2.5-0.5B")
    assert source.kind == "hf" and source.folder == snapshot
    assert source.values["n_layer"].value == 24


def test_hf_home_locates_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    hub_cache(tmp_path / "home" / "hub", "org/tiny-gpt2", PUBLISHED["openai-community/gpt2"],
              "b" * 40)  # fmt: skip
    assert resolve_pretrained("org/tiny-gpt2").values["architecture"].value == "gpt2"


def test_a_broken_ref_is_not_a_cache_hit(empty_hub_cache: Path) -> None:
    snapshot = hub_cache(empty_hub_cache, "org/model", QWEN25_05B, "c" * 40)
    (snapshot.parent.parent / "refs" / "main").write_text("../../../../etc")
    with pytest.raises(ModelFolderError, match="not in the Hugging Face cache"):
        resolve_pretrained("org/model")


def test_known_hub_id_without_a_copy_resolves_from_the_presets() -> None:
    source = resolve_pretrained("meta-llama/Llama-2-7b-hf")
    assert source.kind == "preset" and source.file == "<preset llama-2-7b>"
    assert source.values["n_layer"].value == 32
    result = cfgcheck.validate(run({"pretrained": "NousResearch/Llama-2-7b-hf"},
                                   {"vocab_size": 32000, "pad_token_id": 0}))  # fmt: skip
    assert result.ok, [f.message for f in result.errors]


def test_unknown_id_is_a_load_error() -> None:
    with pytest.raises(ConfigLoadError, match="not in the Hugging Face cache") as e:
        cfgcheck.validate(run({"pretrained": "nobody/no-such-model"}))
    assert "\n" not in str(e.value)


# --- disagreements between the config and the folder ---------------------------------------


def test_shape_disagreement_names_both_values_and_places(tmp_path: Path) -> None:
    folder = write_config(tmp_path / "qwen", QWEN25_05B)
    conf = tmp_path / "conf"
    (conf / "model").mkdir(parents=True)
    (conf / "config.yaml").write_text(
        "defaults:\n  - model: local\n  - _self_\nname: r\n"
        "tokenizer:\n  vocab_size: 151665\n  pad_token_id: 0\n"
        "data:\n  max_seq_length: 512\ntrainer:\n  micro_batch_size: 1\n"
    )
    (conf / "model" / "local.yaml").write_text(
        f"pretrained: {folder}\nname: mine\nn_layer: 22\nblock_size: 4096\n"
    )
    result = cfgcheck.check(conf, "config")
    (f,) = fired(result, "pretrained-shape-mismatch")
    assert f.severity == "error"
    assert "model.n_layer=22" in f.message and "num_hidden_layers=24" in f.message
    assert f.locations["model.n_layer"] == Location(str(conf / "model" / "local.yaml"), 3)
    assert f.locations["model.pretrained"] == Location(
        str(folder / "config.json"), _line(folder, "num_hidden_layers")
    )
    assert f.fixes[0].overrides == ("model.n_layer=24",)
    assert result.config is not None and result.config.model.n_layer == 24  # the folder's
    assert result.config.model.block_size == 4096  # a shorter block is a setting, not a clash
    fixed = cfgcheck.check(conf, "config", list(f.fixes[0].overrides))
    assert not fired(fixed, "pretrained-shape-mismatch") and fixed.ok, fixed.errors


def test_longer_block_than_the_checkpoint_is_a_warning(qwen_folder: Path) -> None:
    result = cfgcheck.validate(run({"pretrained": str(qwen_folder), "block_size": 65536}))
    (f,) = fired(result, "pretrained-shape-mismatch")
    assert f.severity == "warning" and "never trained" in f.message
    assert f.fixes[0].overrides == ("model.block_size=32768",)


def test_the_callers_config_is_not_modified(qwen_folder: Path) -> None:
    cfg = run({"pretrained": str(qwen_folder), "n_layer": 3})
    before = copy.deepcopy(cfg)
    cfgcheck.validate(cfg)
    assert cfg == before


# --- hostile folders ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[" * 100 + "]" * 100, "nested deeper"),
        ("{not json", "malformed JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"model_type": "mamba"}', "write the model section by hand"),  # not a transformer
        ('{"model_type": "no_such_arch"}', "not an architecture the installed transformers"),
        ('{"model_type": "llama", "hidden_size": "big"}', "must be a positive integer"),
    ],
)
def test_bad_config_json_is_one_line(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(ConfigLoadError, match=message) as e:
        cfgcheck.validate(run({"pretrained": str(tmp_path)}))
    assert "\n" not in str(e.value)


def test_oversized_config_json_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"x": "' + "a" * (5 * 1024 * 1024) + '"}')
    with pytest.raises(ModelFolderError, match="larger than"):
        read_json(tmp_path / "config.json")


def test_folder_without_a_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigLoadError, match=r"holds neither config\.json nor model_config"):
        cfgcheck.validate(run({"pretrained": str(tmp_path)}))


# --- the real command ------------------------------------------------------------------------


def test_cli_check_with_a_model_folder(qwen_folder: Path, llama2_padded: Path) -> None:
    ok = run_cfgcheck("check", "~model", "~tokenizer", f"+model.pretrained={qwen_folder}")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run_cfgcheck(
        "check", "~model", "~tokenizer", f"+model.pretrained={llama2_padded}", "--format", "json"
    )
    assert bad.returncode == 1, bad.stderr
    (vocab,) = [f for f in json.loads(bad.stdout)["findings"] if f["rule"] == "vocab-mismatch"]
    assert "32001 tokens" in vocab["message"] and "32000 embedding rows" in vocab["message"]
    assert vocab["fixes"][0]["overrides"] == ["model.padded_vocab_size=32001"]
    fixed = run_cfgcheck(
        "check", "~model", "~tokenizer", f"+model.pretrained={llama2_padded}",
        "+model.padded_vocab_size=32001",
    )  # fmt: skip
    assert fixed.returncode == 0, fixed.stdout


def test_cli_unknown_id_exits_2_with_one_line() -> None:
    r = run_cfgcheck("check", "~model", "+model.pretrained=nobody/no-such-model")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "model.pretrained=nobody/no-such-model" in r.stderr


def test_cli_unbuildable_architecture_is_one_line(tmp_path: Path) -> None:
    """A Mamba config is built on the meta device (which imports torchao where the frameworks
    extra installed it, and torchao logs each CUDA-only extension it cannot load): stderr is
    the one line that says what to do, nothing of the libraries' import-time logging."""
    (tmp_path / "config.json").write_text(
        '{"model_type": "mamba", "hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 2}'
    )
    r = run_cfgcheck("check", "~model", f"+model.pretrained={tmp_path}")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "write the model section by hand" in r.stderr, r.stderr


def _line(folder: Path, key: str) -> int:
    lines = (folder / "config.json").read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.strip().startswith(f'"{key}"'))


def test_service_answers_an_unknown_id_with_422() -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from cfgcheck.service import ServiceSettings, create_app
    from tests.conftest import CONF, REPO

    client = TestClient(create_app(ServiceSettings(config_dir=CONF, allowed_roots=(REPO,))))
    r = client.post("/v1/validate", json=run({"pretrained": "nobody/no-such-model"}))
    assert r.status_code == 422
    assert "model.pretrained=nobody/no-such-model" in r.json()["detail"]


def test_a_cached_model_is_named_by_its_hub_id(empty_hub_cache: Path) -> None:
    hub_cache(empty_hub_cache, "Qwen/Qwen2.5-0.5B", QWEN25_05B, "d" * 40)
    result = cfgcheck.validate(run({"pretrained": "Qwen/Qwen2.5-0.5B"}, {"vocab_size": 151665}))
    assert result.config is not None and result.config.model.name == "Qwen/Qwen2.5-0.5B"


# Parameters of an element the memory model may not count yet (the presets engineer's
# cfgcheck/memory/params.py): q_norm + k_norm of Qwen3 (2 x head_dim per layer), Gemma 2's
# post-attention / post-feedforward norms (2 x hidden per layer), GPT-2's learned position
# embedding (n_positions x n_embd, no schema field). Everything else must count exactly.
UNMODELLED = {
    "Qwen/Qwen3-0.6B": 28 * 2 * 128,
    "google/gemma-2-2b": 26 * 2 * 2304,
    "openai-community/gpt2": 1024 * 768,
}


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED))
def test_folder_shape_counts_the_parameters_of_transformers_model(
    tmp_path: Path, hub_id: str
) -> None:
    """The expanded shape, counted by cfgcheck, against the real transformers model built from
    the same config.json on the meta device (no weights, no download)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from cfgcheck.memory.params import count_params

    data = PUBLISHED[hub_id]
    cfg = run({"pretrained": str(write_config(tmp_path / "m", data))}, {"vocab_size": 1000})
    result = cfgcheck.validate(cfg)
    assert result.config is not None
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**data)
        )
    real = sum(p.numel() for p in model.parameters())
    counted = count_params(result.config.model).total
    assert real - counted in {0, UNMODELLED.get(hub_id, 0)}


def test_sweep_over_model_folders(qwen_folder: Path, llama2_padded: Path) -> None:
    """Both the fast path (one composition, values set per point) and the reference path
    expand each point's model.pretrained."""
    pytest.importorskip("hydra")
    from cfgcheck.hydra.sweep import check_sweep
    from tests.conftest import CONF

    sweep = ["~model", "~tokenizer", f"+model.pretrained={qwen_folder},{llama2_padded}"]
    for fast in (True, False):
        result = check_sweep(CONF, "config", sweep, fast=fast)
        verdicts = {str(v.overrides[-1]).rsplit("/", 1)[-1]: v for v in result.points}
        assert verdicts["Qwen2.5-0.5B"].ok
        bad = verdicts["Llama-2-7b-hf"]
        assert bad.result is not None and bad.result.by_rule("vocab-mismatch")


def test_tokens_added_to_the_checkpoints_tokenizer_within_the_rows_are_noted(
    qwen_folder: Path, tmp_path: Path
) -> None:
    """Two chat tokens added to Qwen's own tokenizer (ids 151665, 151666 < 151936 rows)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(qwen_folder / "tokenizer.json"))
    tok.add_special_tokens(["<|tool|>", "<|/tool|>"])
    from tests.factories import save_folder

    eos = "<|endoftext|>"  # Qwen2.5's eos and pad (tokenizer_config.json), no bos, no unk
    folder = save_folder(
        tok, tmp_path / "chat-tokenizer", pad_token=eos, eos_token=eos, bos_token=None,
        unk_token=None,
    )  # fmt: skip
    result = cfgcheck.validate(run({"pretrained": str(qwen_folder)}, {"path": str(folder)}))
    assert result.ok, [f.message for f in result.errors]
    (f,) = fired(result, "vocab-mismatch")
    assert f.severity == "info" and "by 2 tokens (ids 151665..151666)" in f.message


@pytest.mark.parametrize("ref", ["x" * 5000, "a/b\x00c", "y" * 300 + "/z"])
def test_hostile_refs_are_one_line(ref: str) -> None:
    with pytest.raises(ConfigLoadError) as e:
        cfgcheck.validate(run({"pretrained": ref}))
    assert "\n" not in str(e.value) and len(str(e.value)) < 600


def test_a_null_activation_takes_the_class_default(tmp_path: Path) -> None:
    data = {**PUBLISHED["google/gemma-2-2b"], "hidden_activation": None}
    source = resolve_pretrained(str(write_config(tmp_path / "g", data)))
    assert source.values["mlp"].value == "geglu"
    assert source.values["mlp"].default_of == "transformers Gemma2Config.hidden_activation"
