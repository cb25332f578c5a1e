"""Fixes of a launch script, as flags typed after the command (``--per_device_train_batch_size
1``), each checked by reading the script again with the flag appended (the last one wins in
argparse); findings that rest on a value the script computes when it runs are left out."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources.code.resting import rests_on
from cfgcheck.sources.launcher import launch_of

if TYPE_CHECKING:
    from cfgcheck.sources.native import Loaded


def _as_flags(fix: Fix) -> Fix:
    flags: list[str] = list(fix.flags)
    for override in fix.overrides:
        key, _, value = override.partition("=")
        if value.startswith("[") and value.endswith("]"):  # a list field: nargs="+" words
            flags += [f"--{key}", *[v.strip() for v in value[1:-1].split(",") if v.strip()]]
        else:
            flags += [f"--{key}", value]
    return Fix((), fix.summary, tuple(flags))


def _clears(loaded: Loaded, finding: Finding, fix: Fix, before: set[str]) -> bool:
    """The fix removes ``finding`` and adds no error of a rule not already reported."""
    from cfgcheck.sources.launcher import _loaded
    from cfgcheck.sources.launcher.flags import read_launch, with_flags
    from cfgcheck.sources.native import check_loaded

    n = launch_of(loaded.native)
    pairs = _pairs(fix.flags)
    again = read_launch(n.text, n.file, n.origin, with_flags(n.given, pairs), dict(n.options))
    again.verify = False
    result = check_loaded(_loaded(again, loaded.gpu), verify=False)
    return not result.by_rule(finding.rule) and {f.rule for f in result.errors} <= before


def _pairs(flags: tuple[str, ...]) -> list[str]:
    """``--name v1 v2`` back into ``name=v1 v2`` overrides (a flag's words kept together)."""
    out: list[str] = []
    for word in flags:
        if word.startswith("--"):
            out.append(word[2:] + "=")
        elif out:
            out[-1] += word if out[-1].endswith("=") else f" {word}"
    return out


def finish_fixes(loaded: Loaded, findings: list[Finding]) -> list[Finding]:
    n = launch_of(loaded.native)
    before = {f.rule for f in findings if f.severity == "error"}
    out = []
    for f in findings:
        if rests_on(f, n.unknown_paths):
            continue
        if f.rule == "seq-len-over-block-size" and n.entry and n.entry.packs:
            from cfgcheck.sources.launcher.clm import with_crash

            f = with_crash(f)
        fixes = [_as_flags(x) for x in f.fixes]
        if f.rule == "ragged-batch":
            f = _ragged(loaded, f)
            fixes = [x for x in fixes if x.flags] + _batch_one(n)
        if n.verify:
            fixes = [x for x in fixes if _clears(loaded, f, x, before)]
        out.append(dataclasses.replace(f, fixes=tuple(fixes)))
    return out


def _batch_one(n: object) -> list[Fix]:
    native = launch_of(n)  # type: ignore[arg-type]
    batch = native.value("per_device_train_batch_size", 8)
    steps = native.value("gradient_accumulation_steps", 1)
    flags: tuple[str, ...] = ("--per_device_train_batch_size", "1")
    if isinstance(batch, int) and isinstance(steps, int):
        flags += ("--gradient_accumulation_steps", str(batch * steps))
    return [Fix((), "one sample per device step, the global batch kept", flags)]


def _ragged(loaded: Loaded, f: Finding) -> Finding:
    """The ragged-batch finding in the entry point's terms: which call pads per sample."""
    n = launch_of(loaded.native)
    entry = n.entry
    if entry is None or entry.tokenize is None:
        return f
    call = entry.tokenize
    trainer = entry.trainer.location if entry.trainer else None
    why = entry.per_sample or ""
    message = (
        f"{entry.file}:{call.location.line} tokenizes each sample on its own "
        f"({why}) with padding that leaves it at its own length, the Trainer"
        f"{f' at {trainer}' if trainer else ''} gets no collator that pads, and "
        f"--per_device_train_batch_size is {n.value('per_device_train_batch_size', 8)}: "
        + f.message
    )
    if "return_tensors" in call.kwargs:  # transformers data_collator.py torch_default_data_collator
        message += (
            '; with return_tensors="pt" each sample is a tensor and default_data_collator\'s '
            'torch.stack fails: "RuntimeError: stack expects each tensor to be equal size"'
        )
    hint = (
        f'tokenize with padding="max_length" and truncation=True at {call.location}, or give '
        f"the Trainer a padding collator (data_collator=DataCollatorForSeq2Seq(tokenizer)), "
        "or train one sample per device step: --per_device_train_batch_size 1"
    )
    return dataclasses.replace(f, message=message, hint=hint)
