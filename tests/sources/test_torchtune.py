"""``--from torchtune``: torchtune's published recipe configs (tests/sources/native/torchtune,
copied from pytorch/torchtune, see SOURCES.md there) get a verdict without false errors; the
seed failures planted in them are caught at the file's lines with fixes in torchtune's keys;
malformed input is one line and exit 2. The failures themselves are reproduced with
torchtune's and torch's own code in test_torchtune_ground_truth.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import Document, check_native, load_document, load_native, parse_document
from cfgcheck.sources import torchtune_data as tt
from cfgcheck.sources import torchtune_versions as tv
from cfgcheck.sources.native import get_format
from cfgcheck.sources.reader import get_dotted
from tests.conftest import REPO, run_cfgcheck
from tests.sources.support import NATIVE, applying_fixes_clears, line_of, located_at, one, write
from tests.sources.test_native_fixes import CHANGES

CONFIGS = sorted(p for p in (NATIVE / "torchtune").glob("*.yaml") if "broken" not in p.name)
BROKEN = sorted((NATIVE / "torchtune").glob("broken_*.yaml"))
LORA_1B = NATIVE / "torchtune" / "llama3_2_1B_lora_single_device.yaml"
PHI3 = NATIVE / "torchtune" / "phi3_mini_lora_single_device.yaml"
FULL_70B = NATIVE / "torchtune" / "llama3_70B_full.yaml"
# The configs here are main's (SOURCES.md): read as main's, whatever torchtune is installed.
MAIN = {"framework_version": tv.newest()}


def test_the_ground_truth_is_a_few_dozen_configs_with_their_source() -> None:
    assert len(CONFIGS) >= 40
    sources = (NATIVE / "torchtune" / "SOURCES.md").read_text()
    assert tt.source().rsplit(" ", 1)[-1] in sources  # the same commit as the builders
    for config in CONFIGS:
        assert f"`{config.name}`" in sources


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_published_configs_get_a_verdict_without_errors(config: Path) -> None:
    # the installed torchtune's tables (not stated), and main's, which the files come from
    for gpu, options in ((None, None), ("H100", None), (None, MAIN)):
        result = check_native(config, "torchtune", gpu=gpu, options=options)
        assert result.ok, [(f.rule, f.message) for f in result.errors]
        assert result.config is not None and result.config.trainer.framework == "torchtune"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        # its tokenizer.path is ${model_dir}/tokenizer.model, and no key model_dir exists
        ("broken_llama4_maverick_17B_128E_full.yaml", "Interpolation key 'model_dir' not found"),
        # torchtune renamed the builder lora_qwen2_5_7b_instruct / _base
        (
            "broken_qwen2_5_14B_to_7B_KD_lora_single_device.yaml",
            "lora_qwen2_5_7b is not a model builder torchtune",
        ),
    ],
)
def test_published_configs_torchtune_cannot_run_stop_with_one_line(
    config: str, message: str
) -> None:
    file = NATIVE / "torchtune" / config
    assert file in BROKEN
    with pytest.raises(ConfigLoadError, match=re.escape(message)):
        load_native(file, "torchtune")


def test_other_recipes_memory_is_not_a_training_verdict() -> None:
    generation = check_native(
        NATIVE / "torchtune" / "llama3_1_70B_generation_distributed.yaml", "torchtune", gpu="H100"
    )
    assert not generation.by_rule("gpu-memory")  # the generate recipe does not train
    dpo = check_native(NATIVE / "torchtune" / "llama3_1_8B_full_dpo.yaml", "torchtune", gpu="A10G")
    (memory,) = dpo.by_rule("gpu-memory")
    assert memory.severity == "warning" and "supervised fine-tuning" in memory.message
    ppo = load_native(NATIVE / "torchtune" / "mistral_7B_full_ppo_low_memory.yaml", "torchtune")
    assert ppo.model_key == "policy_model._component_"


def test_builder_shapes_come_from_torchtune_builders() -> None:
    loaded = load_native(LORA_1B, "torchtune", options=MAIN)
    model, trainer = loaded.config["model"], loaded.config["trainer"]
    # torchtune/models/llama3_2/_model_builders.py lora_llama3_2_1b
    assert (model["n_layer"], model["n_embd"], model["n_head"], model["n_query_groups"]) == (
        16,
        2048,
        32,
        8,
    )
    assert (model["intermediate_size"], model["padded_vocab_size"]) == (8192, 128_256)
    assert model["block_size"] == 131072 and model["tie_embeddings"] is True
    assert trainer["finetuning"] == "lora" and trainer["lora"]["rank"] == 64
    assert trainer["lora"]["targets"] == ["q_proj", "v_proj", "o_proj", *tt_mlp()]
    assert trainer["micro_batch_size"] == 4 and trainer["gradient_accumulation_steps"] == 8
    assert trainer["loss_chunking"] == "chunked" and trainer["precision"] == "bf16-true"
    smap = loaded.source_map
    located_at_entry(smap.lookup("model.n_layer"), LORA_1B, line_of(LORA_1B, "_component_"))
    located_at_entry(smap.lookup("trainer.lora.rank"), LORA_1B, line_of(LORA_1B, "lora_rank"))

    qwen = load_native(NATIVE / "torchtune" / "qwen2_5_7B_lora.yaml", "torchtune").config
    assert qwen["model"]["attn_bias"] is True and qwen["model"]["architecture"] == "qwen2"
    gemma2 = load_native(NATIVE / "torchtune" / "gemma2_2B_lora_single_device.yaml", "torchtune")
    assert gemma2.config["model"]["head_size"] == 256
    assert gemma2.config["model"]["sliding_window_size"] == 4096
    qlora = load_native(NATIVE / "torchtune" / "llama3_3_70B_qlora.yaml", "torchtune").config
    assert qlora["trainer"]["finetuning"] == "qlora"
    assert qlora["model"]["n_layer"] == 80 and qlora["model"]["tie_embeddings"] is False


def tt_mlp() -> list[str]:
    return ["gate_proj", "up_proj", "down_proj"]


def located_at_entry(location: object, file: Path, line: int) -> None:
    assert location is not None
    assert Path(getattr(location, "file", "")).resolve() == file.resolve(), location
    assert getattr(location, "line", None) == line, (location, line)


def test_the_recipe_and_process_count_come_from_the_tune_run_comment() -> None:
    config = load_native(FULL_70B, "torchtune").config["trainer"]
    # "tune run --nproc_per_node 8 full_finetune_distributed --config llama3/70B_full"
    assert (config["devices"], config["strategy"]) == (8, "fsdp")
    single = load_native(LORA_1B, "torchtune").config["trainer"]
    assert (single["devices"], single["strategy"]) == (1, "single")
    launched = load_native(
        LORA_1B, "torchtune", options={"recipe": "lora_finetune_distributed", "nproc_per_node": "2"}
    ).config["trainer"]
    assert (launched["devices"], launched["strategy"]) == (2, "fsdp")


def test_the_tune_run_line_of_this_config_wins_over_others() -> None:
    # the distillation config first shows the teacher's fine-tuning command
    kd = NATIVE / "torchtune" / "qwen2_1.5_to_0.5B_KD_lora_distributed.yaml"
    text = kd.read_text()
    assert text.index("lora_finetune_distributed --config") < text.index(
        "knowledge_distillation_distributed --config"
    )
    loaded = load_native(kd, "torchtune")
    assert tt.launch(loaded.native).recipe == "knowledge_distillation_distributed"
    assert loaded.config["trainer"]["devices"] == 2


def test_a_single_device_recipe_under_torchrun_is_refused() -> None:
    result = check_native(LORA_1B, "torchtune", options={"nproc_per_node": "2"})
    finding = one(result, "torchtune-recipe-not-distributed")
    assert "does not support distributed training" in finding.message
    assert str(finding.locations["tune run --nproc_per_node"]) == "<--nproc-per-node 2>"


def test_fsdp_cpu_offload_is_counted() -> None:
    # llama3/70B_full.yaml runs with fsdp_cpu_offload: True on 8 GPUs: FSDP2's
    # CPUOffloadPolicy keeps parameters, gradients and optimizer states on the host
    cut = ["tokenizer.max_seq_len=4096"]
    loaded = load_native(FULL_70B, "torchtune", cut)
    assert loaded.config["trainer"]["offload"] == {"optimizer": "cpu", "params": "cpu"}
    where = loaded.source_map.lookup("trainer.offload.params")
    assert where is not None and where.line == line_of(FULL_70B, "fsdp_cpu_offload")
    offloaded = check_native(FULL_70B, "torchtune", cut, gpu="H100")
    assert not offloaded.by_rule("gpu-memory")  # fits: the estimate counts the offload
    kept = check_native(FULL_70B, "torchtune", [*cut, "fsdp_cpu_offload=false"], gpu="H100")
    assert one(kept, "gpu-memory").severity == "error"


def test_memory_savings_the_estimate_does_not_model_make_it_a_bound() -> None:
    cut = ["tokenizer.max_seq_len=4096", "fsdp_cpu_offload=false"]
    bound = check_native(FULL_70B, "torchtune", [*cut, "compile=true"], gpu="H100")
    (memory,) = bound.by_rule("gpu-memory")
    assert memory.severity == "warning" and "compile" in memory.message
    assert "fsdp_cpu_offload" not in memory.message
    certain = check_native(FULL_70B, "torchtune", cut, gpu="H100")
    assert one(certain, "gpu-memory").severity == "error"


def test_seed_ragged_default_collate() -> None:
    overrides = ["collate_fn=torch.utils.data.default_collate"]
    result = check_native(LORA_1B, "torchtune", overrides)
    finding = one(result, "torchtune-collate")
    assert finding.severity == "error" and not result.ok
    assert "got an unexpected keyword argument 'padding_idx'" in finding.message
    assert "each element in list of batch should be of equal size" in finding.message
    located_at(finding, "batch_size", LORA_1B, line_of(LORA_1B, "batch_size"))
    assert not result.by_rule("ragged-batch")  # said once, in torchtune's words
    assert finding.fixes[0].overrides == ("collate_fn=torchtune.data.padded_collate_sft",)
    applying_fixes_clears(LORA_1B, "torchtune", overrides, finding)


def test_seed_max_seq_len_above_the_model_context() -> None:
    overrides = ["tokenizer.max_seq_len=8192"]
    result = check_native(PHI3, "torchtune", overrides)
    finding = one(result, "torchtune-max-seq-len")
    assert "seq_len (8192) of input tensor should be smaller than max_seq_len (4096)" in (
        finding.message
    )
    located_at(finding, "model._component_", PHI3, line_of(PHI3, "_component_"))
    assert not result.by_rule("seq-len-over-block-size")
    applying_fixes_clears(PHI3, "torchtune", overrides, finding)


def test_seed_max_seq_len_planted_in_the_file(tmp_path: Path) -> None:
    text = PHI3.read_text().replace("max_seq_len: null", "max_seq_len: 8192", 1)
    planted = write(tmp_path, "phi3.yaml", text)
    finding = one(check_native(planted, "torchtune"), "torchtune-max-seq-len")
    located_at(finding, "tokenizer.max_seq_len", planted, line_of(planted, "max_seq_len"))


def test_seed_lora_module_names_that_do_not_exist(tmp_path: Path) -> None:
    text = LORA_1B.read_text().replace(
        "lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']",
        "lora_attn_modules: ['o_proj']",
    )
    text = text.replace("apply_lora_to_mlp: True", "apply_lora_to_mlp: False")
    planted = write(tmp_path, "lora.yaml", text)
    result = check_native(planted, "torchtune")
    finding = one(result, "torchtune-lora-modules")
    assert finding.severity == "error"
    assert "does not require grad and does not have a grad_fn" in finding.message
    located_at(finding, "model.lora_attn_modules", planted, line_of(planted, "lora_attn_modules"))
    assert finding.fixes[0].overrides == ("model.lora_attn_modules=[output_proj]",)
    applying_fixes_clears(planted, "torchtune", [], finding)

    some = check_native(LORA_1B, "torchtune", ["model.lora_attn_modules=[q_proj,o_proj]"])
    partial = one(some, "torchtune-lora-modules")
    # FullModelHFCheckpointer turns the names into a PEFT config when it saves the epoch
    assert partial.severity == "error" and "Unknown target module o_proj" in partial.message
    assert some.config is not None and "o_proj" not in some.config.trainer.lora.targets[:1]
    meta = ["checkpointer._component_=torchtune.training.FullModelMetaCheckpointer"]
    skipped = one(
        check_native(LORA_1B, "torchtune", ["model.lora_attn_modules=[q_proj,o_proj]", *meta]),
        "torchtune-lora-modules",
    )
    assert skipped.severity == "warning" and "silently skip" in skipped.message


def test_left_pad_sequence_is_refused_packed_or_not() -> None:
    # found by test_torchtune_differential.py: the recipe's _setup_data raises before it
    # looks at packing (tests/sources/torchtune_real.py runs that recipe)
    for packed in ("false", "true"):
        overrides = ["collate_fn=torchtune.data.left_pad_sequence", f"dataset.packed={packed}"]
        overrides.append("tokenizer.max_seq_len=2048")
        finding = one(check_native(LORA_1B, "torchtune", overrides), "torchtune-collate")
        assert "left_pad_sequence collator is only for inference." in finding.message


def test_an_unexpected_builder_argument_is_a_type_error_with_did_you_mean() -> None:
    result = check_native(LORA_1B, "torchtune", ["model.lora_rnak=16"])
    finding = one(result, "torchtune-unexpected-argument")
    assert "TypeError: lora_llama3_2_1b() got an unexpected keyword argument 'lora_rnak'" in (
        finding.message
    )
    assert finding.fixes[0].overrides == ("~model.lora_rnak", "model.lora_rank=16")
    applying_fixes_clears(LORA_1B, "torchtune", ["model.lora_rnak=16"], finding)
    # a component with **kwargs takes anything (alpaca_dataset(**load_dataset_kwargs))
    assert not check_native(LORA_1B, "torchtune", ["dataset.data_dir=x"]).by_rule(
        "torchtune-unexpected-argument"
    )


def test_an_unknown_top_level_key_is_ignored_by_the_recipe() -> None:
    result = check_native(LORA_1B, "torchtune", ["batch_sise=8"], options=MAIN)
    finding = one(result, "unknown-native-key")
    assert finding.severity == "warning" and "silently ignored" in finding.message
    assert "batch_size" in finding.hint


def test_a_key_the_recipe_reads_without_default_is_required() -> None:
    result = check_native(LORA_1B, "torchtune", ["~batch_size"])
    finding = one(result, "torchtune-missing-key")
    assert "ConfigAttributeError: Missing key batch_size" in finding.message
    full_builder = check_native(
        LORA_1B,
        "torchtune",
        ["model._component_=torchtune.models.llama3_2.llama3_2_1b", "~model.lora_rank"],
    )
    assert any("lora_rank" in f.message for f in full_builder.by_rule("torchtune-missing-key"))


def test_packing_needs_a_max_seq_len() -> None:
    finding = one(
        check_native(LORA_1B, "torchtune", ["dataset.packed=true"]), "torchtune-packed-max-seq-len"
    )
    assert "PackedDataset requires a max_seq_len to be set on the tokenizer." in finding.message
    ok = check_native(LORA_1B, "torchtune", ["dataset.packed=true", "tokenizer.max_seq_len=2048"])
    assert ok.ok and ok.config is not None and ok.config.data.collator == "packed"


def test_recipe_refusals() -> None:
    fp16 = one(check_native(LORA_1B, "torchtune", ["dtype=fp16"]), "torchtune-fp16")
    assert "fp16 precision is not supported in this recipe" in fp16.message
    offload = check_native(LORA_1B, "torchtune", ["enable_activation_offloading=true"])
    assert one(offload, "torchtune-offloading").fixes


def test_interpolations_resolve_like_omegaconf() -> None:
    loaded = load_native(LORA_1B, "torchtune", ["output_dir=/data/run"])
    assert loaded.native.get("checkpointer.output_dir") == "/data/run"
    assert loaded.native.get("metric_logger.log_dir") == "/data/run/logs"
    env = load_native(LORA_1B, "torchtune", ["output_dir=${oc.env:HOME}"])
    assert env.native.get("output_dir") == "${oc.env:HOME}"  # resolvers are never evaluated
    nested = load_native(LORA_1B, "torchtune", ["output_dir=${oc.env:${seed}}"])
    assert nested.native.get("checkpointer.output_dir") == "${oc.env:${seed}}"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model._component_=[1,2]"], "model._component_ must be a dotted path"),
        (["loss._component_=3"], "loss._component_ must be a dotted path"),
        (
            ["model._component_=torchtune.models.llama3_2.lora_llama3_2_9b"],
            "did you mean torchtune.models.llama3_2.lora_llama3_2_3b?",
        ),
        (["output_dir=${nope}"], "Interpolation key 'nope' not found"),
        (["output_dir=${a}", "a=${output_dir}"], "the interpolation cycles"),
        (["output_dir=${out${x}}"], "only plain"),
        (["output_dir=${model}"], "names a section"),
        (["~model"], "has no model section"),
    ],
)
def test_malformed_input_is_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigLoadError, match=message.replace("?", r"\?").replace("[", r"\[")):
        load_native(LORA_1B, "torchtune", overrides)
    proc = run_cfgcheck("check", "--from", "torchtune", str(LORA_1B), *overrides)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_an_interpolation_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: xxxxxxxxxxxxxxxx"] + [f"a{i}: ${{a{i - 1}}}${{a{i - 1}}}" for i in range(1, 30)]
    bomb = write(tmp_path, "bomb.yaml", LORA_1B.read_text() + "\n".join(lines) + "\n")
    with pytest.raises(ConfigLoadError, match="expand past"):
        load_native(bomb, "torchtune")


def test_cli_recipe_argument_and_nproc_per_node() -> None:
    proc = run_cfgcheck(
        "memory",
        "--from",
        "torchtune",
        str(LORA_1B),
        "lora_finetune_distributed",
        "tokenizer.max_seq_len=2048",
        "--nproc-per-node",
        "4",
        "--gpu",
        "A100-40GB",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 GPU(s), sequence length 2048" in proc.stdout and "fsdp" in proc.stdout
    bad = run_cfgcheck("check", "--from", "torchtune", str(LORA_1B), "--nproc-per-node", "2")
    assert bad.returncode == 1 and "torchtune-recipe-not-distributed" in bad.stdout


def test_json_output_points_at_the_recipe_file() -> None:
    proc = run_cfgcheck(
        "check",
        "--from",
        "torchtune",
        str(LORA_1B),
        "collate_fn=torch.utils.data.default_collate",
        "--format",
        "json",
    )
    assert proc.returncode == 1, proc.stderr
    finding = next(
        f for f in json.loads(proc.stdout)["findings"] if f["rule"] == "torchtune-collate"
    )
    assert finding["locations"][1]["line"] == line_of(LORA_1B, "batch_size")
    assert finding["fixes"][0]["overrides"] == ["collate_fn=torchtune.data.padded_collate_sft"]


def test_hook_from_torchtune(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", LORA_1B.read_text().replace("dtype: bf16", "dtype: fp16"))
    proc = run_cfgcheck("hook", "--from", "torchtune", str(LORA_1B), str(bad))
    assert proc.returncode == 1, proc.stdout
    assert f"{bad}:{line_of(bad, 'dtype')}: dtype set here" in proc.stdout
    assert "2 torchtune config(s) checked: failed" in proc.stdout


def test_service_torchtune_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from cfgcheck.service import ServiceSettings, create_app

    monkeypatch.chdir(REPO)
    settings = ServiceSettings(config_dir=REPO / "conf", allowed_roots=(REPO,))
    text = LORA_1B.read_text()
    with TestClient(create_app(settings)) as client:
        body = {"format": "torchtune", "config": text, "filename": "lora.yaml"}
        ok = client.post("/v1/validate", json=body)
        assert ok.status_code == 200 and ok.json()["ok"], ok.text
        planted = {**body, "overrides": ["collate_fn=torch.utils.data.default_collate"]}
        bad = client.post("/v1/validate", json=planted).json()
        rules = [f["rule"] for f in bad["findings"]]
        assert "torchtune-collate" in rules
        launched = {**body, "recipe": "lora_finetune_single_device", "nproc_per_node": 2}
        refused = client.post("/v1/validate", json=launched).json()
        assert "torchtune-recipe-not-distributed" in [f["rule"] for f in refused["findings"]]
        for odd in ([1], {"a": 1}, None):
            answer = client.post("/v1/validate", json={**body, "format": odd})
            assert answer.status_code == 422, answer.text
        interpolating = {"format": "litgpt", "config": text, "filename": "lora.yaml"}
        answer = client.post("/v1/validate", json=interpolating)
        assert answer.status_code == 422 and "${" in answer.json()["detail"]
        broken = {
            **body,
            "config": text.replace("_component_: torch.optim.AdamW", "_component_: [1]"),
        }
        answer = client.post("/v1/validate", json=broken)
        assert answer.status_code == 422 and "must be a dotted path" in answer.json()["detail"]


def test_check_from_torchtune_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys\nfrom cfgcheck.cli import main\n"
        f"main(['check', '--from', 'torchtune', {str(LORA_1B)!r}])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'hydra', 'torchtune') "
        "if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout + proc.stderr


@pytest.mark.parametrize(("path", "value", "expected"), CHANGES)
def test_every_translated_change_sets_its_value(path: str, value: str, expected: object) -> None:
    """cfgcheck's fixes in torchtune's keys really set the value they stand for."""
    native = get_format("torchtune").to_native(path, value)
    if native is None:
        pytest.skip(f"torchtune has no key for {path}")
    if native == "":
        pytest.skip(f"torchtune derives {path} itself")
    loaded = load_native(LORA_1B, "torchtune", [native])
    assert get_dotted(loaded.config, path) == expected, native


def test_a_builder_torchtune_does_not_ship_reads_checkpoint_dir_config_json(
    tmp_path: Path,
) -> None:
    from tests.model_folders import QWEN25_05B, write_config

    folder = tmp_path / "Qwen2.5-0.5B"
    write_config(folder, QWEN25_05B)
    overrides = [
        "model._component_=my_models.qwen_with_tweaks",
        f"checkpointer.checkpoint_dir={folder}",
    ]
    result = check_native(
        NATIVE / "torchtune" / "qwen2_0.5B_lora_single_device.yaml",
        "torchtune",
        overrides,
        options=MAIN,
    )
    assert result.config is not None and result.config.model.n_layer == 24
    assert result.config.model.block_size == 32768
    assert not result.by_rule("torchtune-component-unknown")  # not a torchtune.* path
    with pytest.raises(ConfigLoadError, match=r"no config\.json"):
        load_native(LORA_1B, "torchtune", ["model._component_=my_models.qwen_with_tweaks"])
    # a service request's text (no file on disk) never makes cfgcheck look at the folder
    text = (NATIVE / "torchtune" / "qwen2_0.5B_lora_single_device.yaml").read_text()
    with pytest.raises(ConfigLoadError, match="is not a model builder torchtune"):
        load_document(parse_document(text, "q.yaml"), "torchtune", overrides)


_TOKENS = [
    "${",
    "}",
    "${a}",
    "${b.c}",
    "${oc.env:HOME}",
    "$",
    "\\",
    ":",
    ".",
    "'",
    "a",
    "b",
    "{",
    "${.a}",
    "${..b}",
    "${a[0]}",
]


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "output_dir", "x.y", "${a}", "c"]),
        st.one_of(
            st.lists(st.sampled_from(_TOKENS), max_size=6).map("".join),
            st.dictionaries(
                st.sampled_from(["c", "d"]),
                st.lists(st.sampled_from(_TOKENS), max_size=4).map("".join),
                max_size=2,
            ),
            st.integers(),
        ),
        max_size=5,
    )
)
def test_any_interpolation_is_resolved_or_one_line(extra: dict[str, object]) -> None:
    """Whatever ${...} a config holds, loading it resolves or raises ConfigLoadError."""
    doc = parse_document(yaml.safe_dump(extra), "fuzz.yaml")
    base = yaml.safe_load(LORA_1B.read_text())
    merged = Document("fuzz.yaml", {**base, **doc.data}, doc.lines, "")
    try:
        loaded = load_document(merged, "torchtune")
    except ConfigLoadError as e:
        assert "\n" not in str(e) and str(e)  # one line
    else:
        assert loaded.config["trainer"]["framework"] == "torchtune"


@pytest.mark.parametrize(
    "override",
    [
        "optimizer.lr=abc",
        "dtype=[1]",
        "dtype={a: 1}",
        "batch_size=[1]",
        "tokenizer.max_seq_len=[2]",
        "dataset.packed=[1]",
        "dataset=[1,2]",
        "model.lora_rank={a: 1}",
        "model.lora_attn_modules=[[1],q_proj]",
        "model.lora_attn_modules=q_proj",
        "collate_fn=[1]",
        "loss=3",
        "checkpointer=1",
        "tokenizer=x",
        "model.apply_lora_to_mlp=[1]",
    ],
)
def test_odd_values_are_findings_or_one_line(override: str) -> None:
    try:
        result = check_native(LORA_1B, "torchtune", [override])
    except ConfigLoadError as e:
        assert "\n" not in str(e)
    else:
        assert result.config is None or result.config.trainer.framework == "torchtune"


def test_what_only_other_versions_have_is_a_warning_until_the_version_is_stated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No torchtune installed and none stated: main's tables, and what holds only in some
    versions is a warning naming them; stated, an error naming the version."""
    monkeypatch.setattr(tv, "_installed", lambda: None)
    unstated = check_native(LORA_1B, "torchtune", ["~log_level"])
    missing = one(unstated, "torchtune-missing-key")
    assert missing.severity == "warning" and "torchtune main" in missing.message
    stated = check_native(LORA_1B, "torchtune", ["~log_level"], options=MAIN)
    assert one(stated, "torchtune-missing-key").severity == "error"
    # an argument main's checkpointer takes and 0.6.1's does not
    arg = "checkpointer.keep_last_n_checkpoints=2"
    old = {"framework_version": "0.6.1"}
    assert not check_native(LORA_1B, "torchtune", [arg], options=MAIN).by_rule(
        "torchtune-unexpected-argument"
    )
    refused = one(
        check_native(LORA_1B, "torchtune", [arg], options=old), "torchtune-unexpected-argument"
    )
    assert refused.severity == "error" and "torchtune 0.6.1" in refused.message
    assert "unexpected keyword argument 'keep_last_n_checkpoints'" in refused.message
    # a builder of main only (Qwen 3), read for 0.6.1: one line naming the versions that ship it
    qwen3 = NATIVE / "torchtune" / "qwen3_0.6B_lora_single_device.yaml"
    with pytest.raises(
        ConfigLoadError, match=r"not a model builder torchtune 0\.6\.1 ships .*main"
    ):
        load_native(qwen3, "torchtune", options=old)
    # not stated (torchtune 0.6.1 installed): read with main's shape, warned of
    monkeypatch.setattr(tv, "_installed", lambda: "0.6.1")
    warned = check_native(qwen3, "torchtune").by_rule("torchtune-component-unknown")
    assert {f.severity for f in warned} == {"warning"}
    assert any(f.paths == ("model._component_",) for f in warned)


def test_the_version_comes_from_the_flag_then_the_pin_then_the_installed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tv, "_installed", lambda: "0.6.1")
    pinned = write(tmp_path, "p.yaml", "# requires: torchtune==0.5.0\n" + LORA_1B.read_text())
    native = load_native(pinned, "torchtune").native
    assert tv.resolve(native) == tv.Version(
        "0.5.0", "0.5.0", "the file's pin torchtune==0.5.0", True
    )
    flagged = load_native(pinned, "torchtune", options={"framework_version": "v0.6.2"}).native
    assert (tv.resolve(flagged).table, tv.resolve(flagged).known) == ("0.6.1", True)
    installed = tv.resolve(load_native(LORA_1B, "torchtune").native)
    assert (installed.table, installed.known) == ("0.6.1", False)
    proc = run_cfgcheck(
        "check", "--from", "torchtune", str(LORA_1B), "--framework-version", "latest"
    )
    assert proc.returncode == 2 and "expected a version like 0.6.1" in proc.stderr
