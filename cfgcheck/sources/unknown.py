"""Unknown native keys, with a did-you-mean against the format's own key list.

Each format's list lives in ``keys/<format>.txt`` (extracted from the framework's source at a
cited commit). What the framework does with a key it does not know decides the severity: TRL's
parser and LitGPT's jsonargparse refuse the file, Axolotl drops the key silently.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources.base import Format, NativeConfig
from cfgcheck.sources.reader import walk_keys

RULE = "unknown-native-key"


@cache
def key_list(fmt: str) -> frozenset[str]:
    """The keys of ``fmt`` (``keys/<fmt>.txt``, one a line, ``#`` comments)."""
    text = resources.files("cfgcheck.sources").joinpath("keys", f"{fmt}.txt").read_text("utf-8")
    return frozenset(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def same_meaning(key: str, candidate: str) -> bool:
    """A did-you-mean only for a misspelling: the same words, each close to its pair
    or abbreviated (``lerning_rate`` -> ``learning_rate``, ``lora_target_module`` ->
    ``lora_target_modules``, ``sequence_length`` -> ``sequence_len``),
    never a key with a word more or less, which names another setting
    (``hub_model_revision`` is not ``model_revision``, ``chat_template`` is not
    ``chat_template_path``, ``warmup_ratio`` is not ``warmup_steps``)."""
    a = [w for w in re.split(r"[_.\-]", key.lower()) if w]
    b = [w for w in re.split(r"[_.\-]", candidate.lower()) if w]
    if len(a) != len(b):
        return False
    return all(
        x == y
        or (min(len(x), len(y)) >= 3 and (x.startswith(y) or y.startswith(x)))  # len/length
        or difflib.SequenceMatcher(None, x, y).ratio() >= 0.75
        for x, y in zip(a, b, strict=True)
    )


def shown(value: object) -> object:
    """A value as the user writes it in YAML."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else value


def _is_known(key: str, fmt: Format) -> bool:
    if key in fmt.keys:
        return True
    if any(key == p or key.startswith(p + ".") for p in fmt.open_prefixes):
        return True
    # A nested key is judged only where the list spells that level (train.*, eval.*).
    parent = key.rpartition(".")[0]
    return bool(parent) and not any(k.startswith(parent + ".") for k in fmt.keys)


def unknown_keys(native: NativeConfig, fmt: Format) -> Iterator[Finding]:
    for key, value in walk_keys(native.data):
        parent = key.rpartition(".")[0]
        if parent and not _is_known(parent, fmt):
            continue  # reported at its parent
        if _is_known(key, fmt):
            continue
        siblings = sorted(
            k for k in fmt.keys if k.rpartition(".")[0] == parent and k.count(".") == key.count(".")
        )
        new = fmt.renamed.get(key)
        close = (
            [new]
            if new
            else [
                c
                for c in difflib.get_close_matches(key, siblings, n=5, cutoff=0.7)
                if same_meaning(key, c)
            ][:1]
        )
        message = (
            f"{fmt.label} does not know the key {key} (value {value!r}): {fmt.unknown_behaviour}"
        )
        if new:
            message += f"; {fmt.label} renamed {key} to {new}"
        fixes: tuple[Fix, ...] = ()
        if close and not isinstance(value, dict | list):
            written = shown(value)
            fixes = (Fix((f"~{key}", f"{close[0]}={written}"), f"spell it {close[0]}"),)
            hint = f"did you mean {close[0]}? (write {close[0]}: {written} in {native.file})"
        elif close:
            hint = f"did you mean {close[0]}?"
        else:
            hint = f"remove {key}; see {fmt.label}'s documented keys"
        yield Finding(RULE, fmt.unknown_severity, (key,), message, hint, fixes=fixes)
