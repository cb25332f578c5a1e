"""LLaMA-Factory configs: its published examples get a verdict without false errors, the
mapping and defaults, the seed failures planted in them at the native line with fixes in its
keys, its start-up refusals, the files it names (DeepSpeed JSON, dataset_info.json) read inside
the project only, and the entry points (CLI, hook, service).

The examples are copied unchanged under tests/sources/native/llamafactory/ in LLaMA-Factory's
own layout (see SOURCES.md there); llamafactory-cli runs from its repository root, so these
tests run from that folder too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult
from cfgcheck.sources import check_native, load_native
from cfgcheck.sources.unknown import key_list
from tests.conftest import requires
from tests.sources.support import (
    NATIVE,
    applying_fixes_clears,
    is_default,
    line_of,
    located_at,
    one,
    write,
)

ROOT = NATIVE / "llamafactory"
SFT = Path("examples/train_lora/llama3_lora_sft.yaml")
FULL = Path("examples/train_full/llama3_full_sft.yaml")
# Examples whose model cfgcheck resolves (presets by Hub id), by stage and method.
RESOLVED = [
    "examples/train_lora/llama3_lora_sft.yaml",
    "examples/train_lora/llama3_lora_dpo.yaml",
    "examples/train_lora/llama3_lora_kto.yaml",
    "examples/train_lora/llama3_lora_ppo.yaml",
    "examples/train_lora/llama3_lora_pretrain.yaml",
    "examples/train_lora/llama3_lora_reward.yaml",
    "examples/train_lora/llama3_lora_sft_ds3.yaml",
    "examples/train_lora/llama3_preprocess.yaml",
    "examples/train_full/llama3_full_sft.yaml",
    "examples/train_qlora/llama3_lora_sft_otfq.yaml",
    "examples/train_qlora/llama3_lora_sft_bnb_npu.yaml",
    "examples/extras/apollo/llama3_full_sft.yaml",
    "examples/extras/badam/llama3_full_sft.yaml",
    "examples/extras/fp8/llama3_fp8_deepspeed_sft.yaml",
    "examples/extras/fp8/llama3_fp8_fsdp_sft.yaml",
    "examples/extras/fsdp_qlora/llama3_lora_sft.yaml",
    "examples/extras/galore/llama3_full_sft.yaml",
    "examples/extras/loraplus/llama3_lora_sft.yaml",
    "examples/extras/mod/llama3_full_sft.yaml",
    "examples/extras/oft/llama3_oft_sft.yaml",
    "examples/extras/pissa/llama3_lora_sft.yaml",
    "examples/extras/qoft/llama3_oft_sft_bnb_npu.yaml",
    "examples/extras/nlg_eval/llama3_lora_predict.yaml",
    "examples/ascend/qwen3_full_sft_fsdp2.yaml",
]
# Examples naming a Hub model that is neither cached here nor a cfgcheck preset.
UNRESOLVED = {
    "examples/train_lora/qwen3_lora_sft.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_lora/qwen3_lora_dpo.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_lora/qwen3_lora_kto.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_lora/qwen3_lora_pretrain.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_lora/qwen3_lora_reward.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_lora/qwen3_lora_sft_ds3.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_lora/qwen3_lora_sft_ray.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_full/qwen3_full_sft.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_qlora/qwen3_lora_sft_otfq.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_qlora/qwen3_lora_sft_bnb_npu.yaml": "Qwen/Qwen3-4B-Instruct-2507",
    "examples/train_qlora/llama3_lora_sft_awq.yaml": "TechxGenus/Meta-Llama-3-8B-Instruct-AWQ",
    "examples/train_qlora/llama3_lora_sft_gptq.yaml": "TechxGenus/Meta-Llama-3-8B-Instruct-GPTQ",
    "examples/extras/adam_mini/qwen2_full_sft.yaml": "Qwen/Qwen2-1.5B-Instruct",
    "examples/extras/muon/qwen2_full_sft.yaml": "Qwen/Qwen2-1.5B-Instruct",
    "examples/extras/dft/qwen2_full_sft.yaml": "Qwen/Qwen2-1.5B-Instruct",
    "examples/extras/eaft/qwen25_05b_eaft_full.yaml": "Qwen/Qwen2.5-0.5B-Instruct",
}


@pytest.fixture(autouse=True)
def in_llamafactory_root(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_HUB_CACHE", str(ROOT / "no-hub-cache"))
    yield


def check(file: Path | str, *overrides: str, gpu: str | None = None) -> CheckResult:
    return check_native(file, "llamafactory", list(overrides), gpu=gpu)


def rules(result: CheckResult) -> list[tuple[str, str]]:
    return [(f.rule, f.message) for f in result.findings]


@pytest.mark.parametrize("name", RESOLVED)
def test_published_examples_get_a_verdict_without_errors(name: str) -> None:
    result = check(name)
    assert result.ok, rules(result)
    expected = {"gpu-memory"}  # no GPU visible: the estimate is an info
    if name.endswith("llama3_fp8_fsdp_sft.yaml"):  # a transformers 4.x-only key
        expected.add("llamafactory-transformers-key")
    assert {f.rule for f in result.findings} <= expected, rules(result)


@pytest.mark.parametrize("name", [n for n in RESOLVED if "lora" in n and "fsdp" not in n])
def test_single_gpu_lora_examples_fit_an_h100(name: str) -> None:
    # (full fine-tuning of 8B does not fit one 80 GB GPU: those run on several)
    result = check(name, gpu="H100")
    assert result.ok and not result.warnings, rules(result)


@pytest.mark.parametrize(("name", "model"), sorted(UNRESOLVED.items()))
def test_an_unresolved_model_is_one_line_naming_the_key(name: str, model: str) -> None:
    with pytest.raises(ConfigLoadError) as e:
        check(name)
    text = str(e.value)
    assert text.startswith(f"{name}:{line_of(Path(name), 'model_name_or_path')}: ")
    assert f"model_name_or_path={model}" in text and "\n" not in text
    # the same file with a model cfgcheck knows gets a verdict
    family = "Qwen/Qwen3-8B" if "qwen" in name else "meta-llama/Meta-Llama-3-8B-Instruct"
    result = check(name, f"model_name_or_path={family}")
    assert result.ok, rules(result)


def test_mapping_of_the_lora_sft_example() -> None:
    loaded = load_native(SFT, "llamafactory")
    cfg, smap = loaded.config, loaded.source_map
    assert cfg["model"] == {"pretrained": "meta-llama/Meta-Llama-3-8B-Instruct"}
    d, t = cfg["data"], cfg["trainer"]
    assert (d["max_seq_length"], d["collator"], d["padding"]) == (2048, "padded", "longest")
    assert d["pad_to_multiple_of"] == 8  # train/sft/workflow.py, when do_train
    assert (t["finetuning"], t["quantization"]) == ("lora", "none")
    assert t["lora"] == {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["all-linear"]}
    assert (t["micro_batch_size"], t["gradient_accumulation_steps"]) == (1, 8)
    assert (t["precision"], t["gradient_checkpointing"], t["attention"]) == (
        "bf16-true",
        True,
        "sdpa",
    )
    assert t["learning_rate"] == 1e-4 and t["strategy"] == "single"
    for path, key in [
        ("data.max_seq_length", "cutoff_len"),
        ("trainer.lora.rank", "lora_rank"),
        ("trainer.lora.targets", "lora_target"),
        ("trainer.micro_batch_size", "per_device_train_batch_size"),
        ("trainer.precision", "bf16"),
        ("model.pretrained", "model_name_or_path"),
    ]:
        location = smap.lookup(path)
        assert location is not None and location.line == line_of(ROOT / SFT, key), (path, key)
    assert is_default(smap.lookup("trainer.lora.alpha"), "LLaMA-Factory")
    assert is_default(smap.lookup("trainer.gradient_checkpointing"), "LLaMA-Factory")


def test_defaults_are_llamafactorys(tmp_path: Path) -> None:
    file = write(tmp_path, "min.yaml", "model_name_or_path: meta-llama/Meta-Llama-3-8B\n")
    loaded = load_native(file, "llamafactory")
    d, t = loaded.config["data"], loaded.config["trainer"]
    # DataArguments cutoff_len=2048; TrainingArguments per_device_train_batch_size=8;
    # LoraArguments lora_rank=8, lora_alpha = rank * 2, lora_target=all; FinetuningArguments
    # finetuning_type=lora, stage=sft (no packing)
    assert d["max_seq_length"] == 2048 and d["collator"] == "padded"
    assert (t["micro_batch_size"], t["gradient_accumulation_steps"]) == (8, 1)
    assert t["lora"] == {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": ["all-linear"]}
    assert (t["finetuning"], t["gradient_checkpointing"], loaded.config["seed"]) == (
        "lora",
        True,
        42,
    )
    for path in ("data.max_seq_length", "trainer.micro_batch_size", "trainer.lora.rank"):
        assert is_default(loaded.source_map.lookup(path), "LLaMA-Factory"), path


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["stage=pt"], {"collator": "packed"}),  # get_train_args: packing None -> stage pt
        (["neat_packing=true"], {"collator": "packed"}),  # DataArguments: sets packing
        (["quantization_bit=4"], {"finetuning": "qlora", "quantization": "nf4-dq"}),
        (["quantization_bit=8"], {"finetuning": "lora", "quantization": "int8"}),
        (["finetuning_type=full", "~lora_rank", "~lora_target"], {"precision": "bf16-mixed"}),
        (["pure_bf16=true", "~bf16"], {"precision": "bf16-true"}),
        (["flash_attn=fa2"], {"attention": "flash"}),
        (["flash_attn=disabled"], {"attention": "eager"}),
        (["enable_liger_kernel=true"], {"loss_chunking": "fused"}),
        (["disable_gradient_checkpointing=true"], {"gradient_checkpointing": False}),
        (["deepspeed=examples/deepspeed/ds_z3_config.json"], {"strategy": "zero3"}),
        (["deepspeed=examples/deepspeed/ds_z0_config.json"], {"strategy": "ddp"}),
        (["lora_target=q_proj,v_proj"], {"targets": ["q_proj", "v_proj"]}),
    ],
)
def test_derived_values(overrides: list[str], expected: dict[str, object]) -> None:
    cfg = load_native(SFT, "llamafactory", overrides).config
    flat = {**cfg["data"], **cfg["trainer"], **cfg["trainer"].get("lora", {})}
    assert {k: flat[k] for k in expected} == expected


# --- seed failures, planted in the published example ------------------------------------------


def test_cutoff_len_over_the_context_is_a_warning_that_rope_scaling_clears() -> None:
    # Meta-Llama-3-8B attends to 8192 positions; LLaMA-Factory scales RoPE only with
    # rope_scaling (model_utils/rope.py), else trains past the context without an error
    result = check(SFT, "cutoff_len=16384", gpu="H200")
    finding = one(result, "seq-len-over-block-size")
    assert finding.severity == "warning" and "configure_rope" in finding.message
    assert str(finding.locations["data.max_seq_length"]) == "<override cutoff_len=16384>"
    assert any("cutoff_len=" in o for fix in finding.fixes for o in fix.overrides)
    scaled = check(SFT, "cutoff_len=16384", "rope_scaling=linear", gpu="H200")
    assert not scaled.by_rule("seq-len-over-block-size"), rules(scaled)


def test_a_wrong_lora_target_is_an_error_with_the_architectures_names() -> None:
    result = check(SFT, "lora_target=query_key_value")
    finding = one(result, "lora-target-unknown")
    assert finding.severity == "error" and "not found in the base model" in finding.message
    assert (
        str(finding.locations["trainer.lora.targets"]) == "<override lora_target=query_key_value>"
    )
    assert finding.fixes[0].overrides[0].startswith("lora_target=")
    applying_fixes_clears(ROOT / SFT, "llamafactory", ["lora_target=query_key_value"], finding)
    partial = one(check(SFT, "lora_target=q_proj,qkv"), "lora-target-unknown")
    assert partial.severity == "warning"


def test_quantization_with_full_finetuning_is_refused_as_llamafactory_does() -> None:
    result = check(FULL, "quantization_bit=4")
    finding = one(result, "llamafactory-quantization-needs-adapters")
    assert "Quantization is only compatible with the LoRA or OFT method." in finding.message
    located_at(finding, "finetuning_type", ROOT / FULL, line_of(ROOT / FULL, "finetuning_type"))
    assert not result.by_rule("quantized-full-finetuning")  # one finding, LLaMA-Factory's words
    assert [fix.overrides for fix in finding.fixes] == [
        ("finetuning_type=lora",),
        ("~quantization_bit",),
    ]
    for fix in finding.fixes:
        after = check(FULL, "quantization_bit=4", *fix.overrides)
        assert not after.by_rule(finding.rule) and after.ok, rules(after)


def test_a_batch_that_does_not_fit_gets_a_fix_in_llamafactory_keys() -> None:
    planted = ["per_device_train_batch_size=16", "cutoff_len=8192"]
    finding = one(check(SFT, *planted, gpu="H100"), "gpu-memory")
    assert finding.severity == "error"
    where = finding.locations["trainer.micro_batch_size"]
    assert str(where) == "<override per_device_train_batch_size=16>"
    for fix in finding.fixes:
        assert all(o.split("=")[0].lstrip("~") in key_list("llamafactory") for o in fix.overrides)
    applying_fixes_clears(ROOT / SFT, "llamafactory", planted, finding)


def test_no_training_no_training_estimate() -> None:
    # extras/nlg_eval/llama3_lora_predict.yaml: do_predict only
    predict = check("examples/extras/nlg_eval/llama3_lora_predict.yaml", gpu="H100")
    assert not predict.by_rule("gpu-memory") and predict.ok, rules(predict)
    assert check(SFT, "per_device_train_batch_size=64", gpu="H100").by_rule("gpu-memory")
    assert not check(
        SFT, "per_device_train_batch_size=64", "~do_train", "do_eval=true", gpu="H100"
    ).by_rule("gpu-memory")


def test_a_pairwise_batch_counts_chosen_and_rejected() -> None:
    # PairwiseDataCollatorWithPadding: n pairs are 2n sequences in one forward
    dpo = Path("examples/train_lora/llama3_lora_dpo.yaml")
    assert load_native(dpo, "llamafactory").config["trainer"]["micro_batch_size"] == 2
    planted = ["per_device_train_batch_size=8", "cutoff_len=4096"]
    finding = one(check(dpo, *planted, gpu="H100"), "gpu-memory")
    micro = next(o for o in finding.fixes[0].overrides if o.startswith("per_device"))
    assert "micro_batch_size=16" in finding.message and micro == "per_device_train_batch_size=2"
    applying_fixes_clears(ROOT / dpo, "llamafactory", planted, finding)


def test_packing_without_neat_packing_warns_of_cross_attention() -> None:
    finding = one(check(SFT, "packing=true"), "llamafactory-packing-contamination")
    assert finding.fixes[0].overrides == ("neat_packing=true",)
    assert not check(SFT, "packing=true", "neat_packing=true").by_rule(finding.rule)


# --- LLaMA-Factory's own refusals --------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "rule", "quote"),
    [
        (["stage=dpo", "neat_packing=true"], "llamafactory-sft-only-option", "except SFT"),
        (["finetuning_type=full", "use_dora=true"], "llamafactory-lora-only-option", "LoRA"),
        (["use_galore=true"], "llamafactory-lora-with-optimizer", "GaLore"),
        (["stage=ppo"], "llamafactory-ppo-reward-model", "`reward_model` is necessary"),
        (["quantization_bit=3"], "llamafactory-quantization-bits", "4-bit or 8-bit"),
        (
            ["deepspeed=examples/deepspeed/ds_z3_config.json", "pure_bf16=true"],
            "llamafactory-zero3-conflict",
            "incompatible with DeepSpeed ZeRO-3",
        ),
        (["streaming=true"], "llamafactory-streaming-max-steps", "max_steps"),
        (["stage=sftt"], "llamafactory-invalid-choice", "stage='sftt'"),
        (["template=llama33"], "llamafactory-unknown-template", "Template llama33 does not"),
        (["dataset=identity,alpaca_en_dem"], "llamafactory-dataset-undefined", "Undefined"),
        (["dataset_dir=examples"], "llamafactory-dataset-info-missing", "dataset_info.json"),
        (["deepspeed=examples/deepspeed/nope.json"], "llamafactory-deepspeed-missing", "exist"),
        (["~do_train"], "llamafactory-no-do-train", "trains nothing"),
        (["do_eval=true"], "llamafactory-argument-conflict", "eval_dataset be provided"),
        (["eval_strategy=steps"], "llamafactory-argument-conflict", "eval_dataset be provided"),
        (["do_predict=true", "val_size=0.1"], "llamafactory-argument-conflict", "predict_with"),
        (["stage=rm", "load_best_model_at_end=true"], "llamafactory-argument-conflict", "RM"),
        (["fp8=true", "quantization_bit=4"], "llamafactory-argument-conflict", "FP8"),
        (["eval_dataset=identity", "val_size=0.1"], "llamafactory-argument-conflict", "val_size"),
        (["stage=dpo", "pissa_init=true"], "llamafactory-argument-conflict", "PiSSA"),
        (["stage=kto", "pissa_init=true"], "llamafactory-argument-conflict", "PiSSA"),
    ],
)
def test_start_up_refusals(overrides: list[str], rule: str, quote: str) -> None:
    finding = one(check(SFT, *overrides), rule)
    assert quote in finding.message, finding.message


def test_pissa_with_dpo_losses_without_a_reference_model_starts() -> None:
    # use_ref_model is False for orpo and simpo (finetuning_args.py:593)
    result = check(SFT, "stage=dpo", "pissa_init=true", "pref_loss=orpo")
    assert not result.by_rule("llamafactory-argument-conflict")


def test_did_you_mean_fixes_apply() -> None:
    for overrides, rule in [
        (["dataset=identity,alpaca_en_dem"], "llamafactory-dataset-undefined"),
        (["template=llama33"], "llamafactory-unknown-template"),
        (["stage=sftt"], "llamafactory-invalid-choice"),
    ]:
        finding = one(check(SFT, *overrides), rule)
        applying_fixes_clears(ROOT / SFT, "llamafactory", overrides, finding)


def test_an_unknown_key_is_an_error_with_did_you_mean(tmp_path: Path) -> None:
    text = (ROOT / SFT).read_text().replace("cutoff_len:", "cutoff_length:")
    file = write(tmp_path, "typo.yaml", text)
    finding = one(check(file), "unknown-native-key")
    assert finding.severity == "error" and "Some keys are not used" in finding.message
    located_at(finding, "cutoff_length", file, line_of(file, "cutoff_length"))
    assert finding.fixes[0].overrides == ("~cutoff_length", "cutoff_len=2048")
    assert "cutoff_len" in key_list("llamafactory") and "warmup_ratio" in key_list("llamafactory")


# --- files the config names: inside the project only --------------------------------------------


def test_a_path_outside_the_project_is_one_line(tmp_path: Path) -> None:
    outside = write(tmp_path, "ds.json", '{"zero_optimization": {"stage": 3}}')
    for override, key in [
        (f"deepspeed={outside}", "deepspeed"),
        ("dataset_dir=/etc", "dataset_dir"),
        ("deepspeed=../../axolotl/mistral-lora.yml", "deepspeed"),
    ]:
        with pytest.raises(ConfigLoadError) as e:
            check(SFT, override)
        text = str(e.value)
        assert f"<override {override}>: {key}=" in text and "\n" not in text, text


def test_malformed_files_it_names_are_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dataset_info.json").write_text('{"mine": {"file_name": ')
    (tmp_path / "ds.json").write_text("[" * 100)
    config = write(
        tmp_path, "c.yaml", "model_name_or_path: meta-llama/Meta-Llama-3-8B\ndataset: mine\n"
    )
    monkeypatch.chdir(tmp_path)
    for overrides, needle in [
        ([], "malformed JSON"),
        (["dataset_dir=ONLINE", "deepspeed=ds.json"], "nesting deeper"),
        (["dataset_dir=c.yaml"], "dataset_info.json"),
    ]:
        try:
            result = check(config, *overrides)
        except ConfigLoadError as e:
            assert needle in str(e) and "\n" not in str(e), str(e)
            continue
        assert needle == "dataset_info.json", rules(result)
        one(result, "llamafactory-dataset-info-missing")


def test_scan_data_files_come_from_dataset_info() -> None:
    cfg = load_native(SFT, "llamafactory").config["data"]
    # data/dataset_info.json: identity -> identity.json, alpaca_en_demo -> alpaca_en_demo.json
    assert cfg["paths"] == ["data/identity.json", "data/alpaca_en_demo.json"]
    assert cfg["template"] == "{instruction}\n{input}\n{output}"


def test_a_service_request_reads_no_file() -> None:
    from cfgcheck.sources import load_document, parse_document

    doc = parse_document((ROOT / "examples/train_lora/llama3_lora_sft_ds3.yaml").read_text(), "x")
    loaded = load_document(doc, "llamafactory")
    assert loaded.config["trainer"]["strategy"] == "zero3"  # from the file name
    assert "paths" not in loaded.config["data"]


# --- entry points ------------------------------------------------------------------------------


def test_cli_check_memory_and_hook() -> None:
    from tests.conftest import run_cfgcheck

    ok = run_cfgcheck("check", "--from", "llamafactory", str(SFT), "--gpu", "H100", cwd=ROOT)
    assert ok.returncode == 0 and "config OK" in ok.stdout, ok.stdout + ok.stderr
    bad = run_cfgcheck("check", "--from", "llamafactory", str(FULL), "quantization_bit=4", cwd=ROOT)
    assert bad.returncode == 1 and "Quantization is only compatible" in bad.stdout, bad.stdout
    memory = run_cfgcheck("memory", "--from", "llamafactory", str(SFT), "--gpu", "H100", cwd=ROOT)
    assert memory.returncode == 0 and "GiB" in memory.stdout, memory.stdout + memory.stderr
    outside = run_cfgcheck(
        "check", "--from", "llamafactory", str(SFT), "dataset_dir=/etc", cwd=ROOT
    )
    assert outside.returncode == 2 and len(outside.stderr.strip().splitlines()) == 1
    assert "outside the project" in outside.stderr
    hook = run_cfgcheck("hook", "--from", "llamafactory", str(SFT), str(FULL), cwd=ROOT)
    assert hook.returncode == 0, hook.stdout
    assert "2 llamafactory config(s) checked: OK" in hook.stdout


def test_check_from_llamafactory_imports_neither_torch_nor_transformers() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom cfgcheck.cli import main\n"
        f"main(['check', '--from', 'llamafactory', {str(SFT)!r}])\n"
        "print(sorted(m for m in ('torch', 'transformers', 'hydra') if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout + proc.stderr


@requires("fastapi", "httpx")
def test_service_accepts_the_format() -> None:
    from fastapi.testclient import TestClient

    from cfgcheck.service import ServiceSettings, create_app
    from tests.conftest import REPO

    settings = ServiceSettings(config_dir=REPO / "conf", allowed_roots=(ROOT,))
    text = (ROOT / SFT).read_text()
    with TestClient(create_app(settings)) as client:
        answer = client.post(
            "/v1/validate",
            json={
                "format": "llamafactory",
                "config": text,
                "filename": "sft.yaml",
                "overrides": ["quantization_bit=4", "finetuning_type=full"],
            },
        )
        assert answer.status_code == 200, answer.text
        finding = next(
            f
            for f in answer.json()["findings"]
            if f["rule"] == "llamafactory-quantization-needs-adapters"
        )
        assert finding["locations"][0] == {"file": "<override quantization_bit=4>", "line": None}
        typo = client.post(
            "/v1/validate",
            json={"format": "llamafactory", "config": text.replace("cutoff_len:", "cutof_len:")},
        ).json()
        unknown = next(f for f in typo["findings"] if f["rule"] == "unknown-native-key")
        assert unknown["severity"] == "error"


@requires("tokenizers")
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_scan_data_reads_the_registered_file(
    suffix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # LLaMA-Factory's data files are JSON arrays (data/identity.json) or JSON lines; its
    # loader (datasets' json builder) reads both
    import json

    from cfgcheck.data.check import with_scan_findings
    from tests.model_folders import LLAMA32_1B, tokenizer_files, write_config

    model = tmp_path / "model"
    write_config(model, LLAMA32_1B)
    tokenizer_files(model, 1000)
    (tmp_path / "data").mkdir()
    records = [{"instruction": "say", "input": "", "output": "word " * n} for n in (3, 30, 300)]
    text = (
        json.dumps(records, indent=2)
        if suffix == ".json"
        else "\n".join(json.dumps(r) for r in records)
    )
    (tmp_path / "data" / f"mine{suffix}").write_text(text)
    (tmp_path / "data" / "dataset_info.json").write_text(
        json.dumps({"mine": {"file_name": f"mine{suffix}"}})
    )
    config = write(
        tmp_path,
        "sft.yaml",
        f"model_name_or_path: {model}\nstage: sft\ndo_train: true\ndataset: mine\n"
        "cutoff_len: 64\nlora_target: all\n",
    )
    monkeypatch.chdir(tmp_path)
    loaded = load_native(config, "llamafactory")
    assert loaded.config["data"]["paths"] == [f"data/mine{suffix}"]
    result = with_scan_findings(check(config))
    assert not result.by_rule("data-unreadable"), rules(result)
    one(result, "data-truncated")  # the 300-word sample is over cutoff_len=64
