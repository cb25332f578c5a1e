"""Keys TRL does not read, judged against the version and trainer the config is run with.

What TRL does with a key none of its dataclasses take: `trl <trainer> --config FILE` hands it
to ``accelerate launch`` (trl/cli/commands/training.py), which refuses an option it does not
know; a script run directly (``python sft.py --config FILE``, the recipes' way) refuses it in
``TrlParser.parse_args_and_config`` ("Unknown arguments from config file", trl/scripts/
utils.py). Either way the run does not start, so an unknown key is an error.

A key that another TRL (or transformers) version reads is named with that version and the
rename; it is an error only when the version is known (stated or installed), else a warning.
A key another trainer reads is named with that trainer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources import trl_versions as tv
from cfgcheck.sources.base import NativeConfig
from cfgcheck.sources.trl_run import TrlRun, run_of
from cfgcheck.sources.unknown import same_meaning, shown

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

BEHAVIOUR = (
    "TrlParser hands it to `accelerate launch`, which refuses it (trl/cli/commands/"
    'training.py); run as a script, TrlParser refuses it: "Unknown arguments from config '
    'file" (trl/scripts/utils.py)'
)


def unknown_rule(native: NativeConfig, run_config: RunConfig | None) -> Iterator[Finding]:
    run = run_of(native)
    for key, value in native.data.items():
        if run.reads(key):
            continue
        yield _finding(native, run, key, value)


def _finding(native: NativeConfig, run: TrlRun, key: str, value: object) -> Finding:
    v = run.version
    trainer = run.trainer.name
    read_as = f"read as `{run.command}` (from {run.trainer.origin}) with TRL {v.table} ({v.origin})"
    renamed = tv.RENAMED.get(key)
    elsewhere = tv.where_valid(key, trainer)
    tf = tv.transformers_versions(key)
    severity: str = "error"
    fixes: tuple[Fix, ...] = ()
    applies = renamed is not None and (renamed[3] is None or trainer in renamed[3])
    if renamed and applies and run.reads(renamed[0]):
        new, since, source, _ = renamed
        message = (
            f"{run.config_class} has no key {key} in TRL {v.table}: it was renamed {key} -> "
            f"{new} (since {since}; {source})"
        )
        if elsewhere:
            message += f"; TRL {tv.span(elsewhere)} reads {key}"
        hint = f"rename it: {new}: {shown(value)}"
        fixes = (Fix((f"~{key}", f"{new}={shown(value)}"), f"rename {key} to {new}"),)
        severity = "error" if v.known else "warning"
    elif elsewhere or tf:
        where = (
            f"TRL {tv.span(elsewhere)}"
            if elsewhere
            else f"TrainingArguments of transformers {tv.span(tf)}"
        )
        message = f"{key} is read by {where}, not by {run.config_class} of TRL {v.table}" + (
            "" if elsewhere else f" with transformers {v.transformers}"
        )
        hint = (
            f"run it with {where} (pin it: `# requires: trl==X` or --framework-version), "
            f"or drop {key} knowing what it set"
        )
        severity = "error" if v.known else "warning"
    else:
        others = tv.other_trainers(key, v.table)
        if others:
            message = (
                f"`{run.command}` does not read {key}; "
                f"{', '.join(f'`trl {t}`' for t in others[:4])} does"
            )
            hint = f"if this config is for {others[0]}, say so: --trainer {others[0]}"
        else:
            message = f"TRL {v.table} does not know the key {key} (value {value!r})"
            close = _close(key, run)
            if close:
                hint = f"did you mean {close}? (write {close}: {shown(value)} in {native.file})"
                if not isinstance(value, dict | list):
                    fixes = (Fix((f"~{key}", f"{close}={shown(value)}"), f"spell it {close}"),)
            else:
                hint = (
                    f"remove {key}, or declare the script's dataclass that reads it "
                    "(--script-args FILE.py:Class, --recipe)"
                )
    message += f": {BEHAVIOUR} [{read_as}]"
    return Finding("unknown-native-key", severity, (key,), message, hint, fixes=fixes)  # type: ignore[arg-type]


def _close(key: str, run: TrlRun) -> str | None:
    import difflib

    pool = [*run.keys.defaults, *run.keys.recipe, *run.script_fields]
    for candidate in difflib.get_close_matches(key, pool, n=5, cutoff=0.75):
        if same_meaning(key, candidate):
            return candidate
    return None
