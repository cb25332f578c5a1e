"""Fixes of a native config, in the format's terms, each checked the way the user applies it.

:func:`native_fixes` rewrites every fix of cfgcheck's rules in the format's keys (and flags:
the GPU is ``--gpu``, no format has a key for it); a fix with a change the format cannot
express is dropped, and a finding left without a fix says that its remedy is outside the
format. :func:`verify_native` then loads the native config again with each fix's native
overrides and flags appended, exactly as ``cfgcheck check --from FORMAT FILE ... FIX`` would,
and keeps the fix only when its finding is gone and no new error appears. When none works
alone, a fix together with a fix of the error it causes (a longer ``max_length`` that then
needs a smaller batch to fit the GPU), or two of the finding's fixes together, is tried.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, Finding, Fix

if TYPE_CHECKING:
    from cfgcheck.sources.base import Format, NativeConfig
    from cfgcheck.sources.native import Loaded

MAX_TRIES = 12  # combinations tried per finding when no single fix works

# What each format offers to lower the memory per GPU (a gpu-memory finding with no fix in
# the format's keys names them), read from the frameworks' own sources:
MEMORY_SETTINGS = {
    # Lightning-AI/litgpt at 26857050, litgpt/finetune/lora.py setup(): precision, quantize,
    # devices, lora_r and the lora_* switches, train.micro_batch_size, train.max_seq_length.
    # There is no activation-checkpointing key: with devices * num_nodes > 1 the finetune
    # commands wrap every Block in activation checkpointing themselves (full.py FSDPStrategy(
    # activation_checkpointing_policy={Block}); lora.py parallelize_fn(activation_checkpointing
    # =True)), and the full/LoRA choice is the command (litgpt finetune_full / finetune_lora).
    "litgpt": "train.micro_batch_size, train.max_seq_length, precision (bf16-true), quantize "
    "(bnb.nf4, bnb.nf4-dq with precision=bf16-true), lora_r and the lora_* switches, and "
    "devices (more than one shards with FSDP and checkpoints activations); LitGPT has no "
    "activation-checkpointing key, and full or LoRA fine-tuning is the command you run",
    "axolotl": "micro_batch_size, sequence_len, gradient_checkpointing, adapter (lora, qlora "
    "with load_in_4bit), lora_r, load_in_4bit / load_in_8bit, bf16 / fp16, "
    "chunked_cross_entropy or the Liger plugin, and fsdp / deepspeed",
    "trl": "per_device_train_batch_size, max_length, gradient_checkpointing, use_peft with "
    "lora_r, load_in_4bit, bf16 / fp16, use_liger_kernel, and the launcher's FSDP / DeepSpeed "
    "config",
}


def native_fixes(
    findings: Iterable[Finding], spec: Format, native: NativeConfig
) -> Iterator[Finding]:
    """Each fix rewritten in the format's keys; a fix with a change the format cannot express
    is dropped, and the hint of a finding left without a fix says so."""
    from cfgcheck.sources.native import rewrite

    for f in findings:
        if f.rule.startswith(f"{spec.name}-") or f.rule == "unknown-native-key":
            yield f  # written in native keys already
            continue
        fixes: list[Fix] = []
        for fix in f.fixes:
            rewritten = [rewrite(o, spec, native) for o in fix.overrides]
            if all(r is not None for r in rewritten):
                # "" is a change the format makes by itself; two cfgcheck keys may share one
                # native key (data.max_seq_length and data.max_length are both sequence_len).
                changes = [c for r in dict.fromkeys(rewritten) if r for c in r.splitlines()]
                flags = tuple(x for c in changes if c.startswith("--") for x in c.split("=", 1))
                overrides = tuple(c for c in changes if not c.startswith("--"))
                if overrides or flags:
                    fixes.append(Fix(overrides, fix.summary, (*fix.flags, *flags)))
        if spec.verifies_fixes:  # the format words its own hint (code edits, python)
            yield dataclasses.replace(f, fixes=tuple(fixes))
            continue
        hint = native_text(f.hint, spec)
        if not fixes and f.severity != "info" and (f.fixes or f.rule == "gpu-memory"):
            hint += f" [no fix in {spec.label}'s keys: " + (
                f"the settings {spec.label} offers that lower memory are "
                f"{MEMORY_SETTINGS[spec.name]}; none fits alone or in a pair]"
                if f.rule == "gpu-memory" and spec.name in MEMORY_SETTINGS
                else f"the change is outside what {native.file} can set]"
            )
        yield dataclasses.replace(f, fixes=tuple(fixes), hint=hint)


# A cfgcheck override spelled inside prose: ``trainer.precision=16-mixed``.
_OVERRIDE_IN_TEXT = re.compile(
    r"(?<![\w.-])((?:trainer|data|model|tokenizer)\.[\w.]+)=(\[[^\]\s]*\]|[^\s,;)]+)"
)


def native_text(text: str, spec: Format) -> str:
    """``text`` with each cfgcheck ``key=value`` the format can express written its way
    (``trainer.gpu.name=H100`` -> ``--gpu H100``, ``trainer.precision=16-mixed`` -> ``fp16=true``
    for TRL); the others are left as they are."""
    from cfgcheck.sources.native import rewrite

    def native(m: re.Match[str]) -> str:
        out = rewrite(m.group(0), spec)
        return " ".join(o.replace("=", " ", 1) if o.startswith("--") else o
                        for o in out.splitlines()) if out else m.group(0)  # fmt: skip

    return _OVERRIDE_IN_TEXT.sub(native, text)


def _key(f: Finding) -> tuple[str, tuple[str, ...]]:
    return (f.rule, f.paths)


def _gpu(fix: Fix, default: str | None) -> str | None:
    flags = list(fix.flags)
    return flags[flags.index("--gpu") + 1] if "--gpu" in flags[:-1] else default


def recheck(loaded: Loaded, fix: Fix) -> CheckResult | None:
    """The check of the native config with ``fix`` pasted after the user's overrides, as
    ``cfgcheck check --from FORMAT FILE OVERRIDES... FIX`` runs it; None when it cannot be
    loaded that way (the fix is then no fix)."""
    from cfgcheck.sources.native import check_loaded, load_document

    if loaded.document is None:
        return None
    try:
        again = load_document(
            loaded.document,
            loaded.format.name,
            (*loaded.overrides, *fix.overrides),
            _gpu(fix, loaded.gpu),
            loaded.native.options,  # --trainer, --framework-version...: the same command line
        )
        return check_loaded(again, verify=False)
    except ConfigLoadError:
        return None


def verify_native(loaded: Loaded, findings: Sequence[Finding]) -> list[Finding]:
    """``findings`` with each fix kept only when, pasted, it removes its finding without a new
    error (see the module)."""
    from cfgcheck.fixcheck import new_errors

    def outcome(finding: Finding, fix: Fix) -> list[Finding] | None:
        after = recheck(loaded, fix)
        if after is None:
            return None
        left = [g for g in after.findings if _key(g) == _key(finding)]
        return left or new_errors(findings, after.findings)

    out: list[Finding] = []
    for f in findings:
        if not f.fixes or f.severity == "info":
            out.append(f)
            continue
        kept: list[Fix] = []
        caused: list[tuple[Fix, list[Finding]]] = []
        for fix in f.fixes:
            result = outcome(f, fix)
            if result == []:
                kept.append(fix)
            elif result and not any(_key(g) == _key(f) for g in result):
                caused.append((fix, result))
        if not kept:
            kept = _combination(f, caused, outcome)
        out.append(dataclasses.replace(f, fixes=tuple(kept)))
    return out


def _combination(
    finding: Finding,
    caused: list[tuple[Fix, list[Finding]]],
    outcome: Callable[[Finding, Fix], list[Finding] | None],
) -> list[Fix]:
    tries = [fix.combined(extra) for fix, errors in caused for extra in errors[0].fixes]
    tries += [a.combined(b) for a, b in itertools.combinations(finding.fixes, 2)]
    for both in tries[:MAX_TRIES]:
        if outcome(finding, both) == []:
            return [both]
    return []
