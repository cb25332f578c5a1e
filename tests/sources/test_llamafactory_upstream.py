"""LLaMA-Factory's own argument dataclasses (hparams/finetuning_args.py and data_args.py,
copied verbatim: they import only the standard library) against the adapter: the generated
defaults are theirs, and each refusal the adapter reports from their ``__post_init__`` is
raised by them with the message it quotes."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cfgcheck.sources import check_native
from cfgcheck.sources.llamafactory_args import defaults
from tests.sources.support import NATIVE, one

ROOT = NATIVE / "llamafactory"
SFT = Path("examples/train_lora/llama3_lora_sft.yaml")


def upstream(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"llamafactory_upstream_{name}", ROOT / "upstream" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


FT = upstream("finetuning_args")
DATA = upstream("data_args")


@pytest.mark.parametrize("cls", [FT.FinetuningArguments, DATA.DataArguments])
def test_generated_defaults_are_the_dataclasses(cls: type) -> None:
    generated = defaults()
    checked = 0
    for f in dataclasses.fields(cls):
        if not f.init or f.default is dataclasses.MISSING:
            continue
        assert f.name in generated, f.name
        assert generated[f.name] == f.default, f.name
        checked += 1
    assert checked > 20


def test_lora_target_and_alpha_as_llamafactory_derives_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cfgcheck.sources import load_native

    monkeypatch.chdir(ROOT)
    args = FT.FinetuningArguments(lora_target="q_proj, v_proj", lora_rank=4)
    lora = load_native(SFT, "llamafactory", ["lora_target=q_proj, v_proj", "lora_rank=4"]).config[
        "trainer"
    ]["lora"]
    assert (
        (lora["targets"], lora["alpha"])
        == (args.lora_target, args.lora_alpha)
        == (
            ["q_proj", "v_proj"],
            8,
        )
    )
    packed = DATA.DataArguments(neat_packing=True)
    assert packed.packing is True  # neat_packing sets packing
    collator = load_native(SFT, "llamafactory", ["neat_packing=true"]).config["data"]["collator"]
    assert collator == "packed"


REFUSALS: list[tuple[list[str], str, Callable[[], Any]]] = [
    (
        ["finetuning_type=full", "use_dora=true"],
        "llamafactory-lora-only-option",
        lambda: FT.FinetuningArguments(finetuning_type="full", use_dora=True),
    ),
    (
        ["finetuning_type=freeze", "loraplus_lr_ratio=16"],
        "llamafactory-lora-only-option",
        lambda: FT.FinetuningArguments(finetuning_type="freeze", loraplus_lr_ratio=16.0),
    ),
    (
        ["use_galore=true"],
        "llamafactory-lora-with-optimizer",
        lambda: FT.FinetuningArguments(finetuning_type="lora", use_galore=True),
    ),
    (
        ["stage=ppo"],
        "llamafactory-ppo-reward-model",
        lambda: FT.FinetuningArguments(stage="ppo"),
    ),
    (
        ["eval_dataset=identity", "val_size=0.1"],
        "llamafactory-argument-conflict",
        lambda: DATA.DataArguments(dataset="identity", eval_dataset="identity", val_size=0.1),
    ),
    (
        ["mask_history=true", "train_on_prompt=true"],
        "llamafactory-argument-conflict",
        lambda: DATA.DataArguments(mask_history=True, train_on_prompt=True),
    ),
]


@pytest.mark.parametrize(("overrides", "rule", "build"), REFUSALS)
def test_each_refusal_is_raised_by_llamafactory_with_the_quoted_message(
    overrides: list[str], rule: str, build: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(ValueError) as raised:
        build()
    finding = one(check_native(SFT, "llamafactory", overrides), rule)
    assert f'"{raised.value}"' in finding.message, (str(raised.value), finding.message)
