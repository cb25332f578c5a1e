"""Fixes of cfgcheck's rules rewritten in each format's keys: every translatable change,
pasted as a native override, really sets the cfgcheck value it stands for."""

from __future__ import annotations

from typing import Any

import pytest

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources import load_native
from cfgcheck.sources.native import get_format
from cfgcheck.sources.native_fixes import native_fixes
from cfgcheck.sources.reader import get_dotted
from tests.sources.support import example

FILES = {
    "litgpt": example("litgpt", "tiny-llama-lora.yaml"),
    "axolotl": example("axolotl", "mistral-lora.yml"),
    "trl": example("trl", "example_config.yaml"),
    "llamafactory": example("llamafactory", "examples/train_lora/llama3_lora_sft.yaml"),
}
BASE = {
    "trl": [
        "model_name_or_path=TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T",
        "use_peft=true",
    ]
}

CHANGES: list[tuple[str, str, Any]] = [
    ("data.max_seq_length", "1000", 1000),
    ("trainer.micro_batch_size", "3", 3),
    ("trainer.gradient_accumulation_steps", "5", 5),
    ("trainer.global_batch_size", "24", 24),
    ("trainer.gradient_checkpointing", "true", True),
    ("trainer.learning_rate", "0.001", 0.001),
    ("trainer.lora.rank", "4", 4),
    ("trainer.precision", "32-true", "32-true"),
    ("trainer.precision", "16-mixed", "16-mixed"),
    ("trainer.finetuning", "lora", "lora"),
    ("trainer.quantization", "none", "none"),
    ("trainer.loss_chunking", "chunked", "chunked"),
    ("trainer.attention", "eager", "eager"),
    ("data.collator", "padded", "padded"),
    ("seed", "7", 7),
]


@pytest.mark.parametrize("fmt", list(FILES))
@pytest.mark.parametrize(("path", "value", "expected"), CHANGES)
def test_every_translated_change_sets_its_value(
    fmt: str, path: str, value: str, expected: Any
) -> None:
    native = get_format(fmt).to_native(path, value)
    if native is None:
        pytest.skip(f"{fmt} has no key for {path}")
    if native == "":
        pytest.skip(f"{fmt} derives {path} itself")
    loaded = load_native(FILES[fmt], fmt, [*BASE.get(fmt, []), *native.splitlines()])
    assert get_dotted(loaded.config, path) == expected, native


def test_untranslatable_fixes_are_dropped_and_the_gpu_is_a_flag() -> None:
    loaded = load_native(FILES["litgpt"], "litgpt")
    finding = Finding(
        "gpu-memory",
        "error",
        ("trainer.micro_batch_size",),
        "m",
        "h",
        fixes=(
            Fix(("trainer.micro_batch_size=2", "data.max_seq_length=256"), "smaller"),
            Fix(("trainer.gradient_checkpointing=true",), "LitGPT has no switch for it"),
            Fix(("trainer.gpu.name=H100",), "a bigger GPU"),
        ),
    )
    (out,) = native_fixes([finding], loaded.format, loaded.native)
    assert [(f.flags, f.overrides) for f in out.fixes] == [
        ((), ("train.micro_batch_size=2", "train.max_seq_length=256")),
        (("--gpu", "H100"), ()),
    ]
    assert out.fixes[1].shell == "--gpu H100"
    assert out.hint == "h"


def test_a_finding_whose_remedy_is_outside_the_format_says_so() -> None:
    loaded = load_native(FILES["litgpt"], "litgpt")
    memory = Finding(
        "gpu-memory",
        "error",
        ("trainer.micro_batch_size",),
        "m",
        "h",
        fixes=(Fix(("trainer.gradient_checkpointing=true",), "no LitGPT switch"),),
    )
    other = Finding(
        "lora-needs-targets",
        "error",
        ("trainer.lora.targets",),
        "m",
        "h",
        fixes=(Fix(("trainer.finetuning=full",), "the command, not a key"),),
    )
    out_memory, out_other = native_fixes([memory, other], loaded.format, loaded.native)
    assert not out_memory.fixes and not out_other.fixes
    assert "LitGPT has no activation-checkpointing key" in out_memory.hint
    assert "train.micro_batch_size" in out_memory.hint
    assert "outside what" in out_other.hint


@pytest.mark.parametrize(
    ("fmt", "text", "expected"),
    [
        ("axolotl", "name the card: trainer.gpu.name=A100-80GB", "name the card: --gpu A100-80GB"),
        ("trl", "set trainer.precision=16-mixed (fp16)", "set fp16=true (fp16)"),
        ("axolotl", "or trainer.precision=16-mixed", "or bf16=false fp16=true"),
        ("litgpt", "trainer.gradient_checkpointing=true", "trainer.gradient_checkpointing=true"),
    ],
)
def test_hints_spell_what_the_format_can_express_its_way(
    fmt: str, text: str, expected: str
) -> None:
    from cfgcheck.sources.native_fixes import native_text

    assert native_text(text, get_format(fmt)) == expected


def test_a_native_fix_that_adds_a_memory_error_comes_with_the_change_that_fits() -> None:
    """TRL's max_length fix restores the 2048 tokens a renamed key lost: on a 10 GiB GPU that
    alone no longer fits (the fix was once kept unverified: written in native keys, it could not
    be applied to the composed config). Checked by loading the file again with the fix, it
    comes with a smaller micro batch, and pasted it leaves no error."""
    from cfgcheck.sources import check_native
    from cfgcheck.sources.native import load_native as load

    args = [*BASE["trl"], "max_seq_length=2048"]
    result = check_native(FILES["trl"], "trl", args, gpu="10")
    (finding,) = result.by_rule("trl-max-length-truncates")
    (fix,) = finding.fixes
    assert fix.overrides[:2] == ("~max_seq_length", "max_length=2048")
    assert any(o.startswith("per_device_train_batch_size=") for o in fix.overrides)
    from cfgcheck.sources.native import check_loaded

    alone = check_loaded(load(FILES["trl"], "trl", [*args, *fix.overrides[:2]], "10"))
    assert [f.rule for f in alone.errors] == ["gpu-memory"]
    pasted = check_loaded(load(FILES["trl"], "trl", [*args, *fix.overrides], "10"))
    assert not pasted.errors and not pasted.by_rule("trl-max-length-truncates")
