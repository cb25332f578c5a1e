"""``--from launch``: a shell script that launches a Hugging Face Trainer entry point
(``torchrun ... train.py --flag value``), read statically and checked like any other source.

The script is read by :mod:`.shell` (never run), its training command found by
:mod:`.command`, the entry point read by :mod:`.entry` with the shared static reader (never
imported); the flags are parsed against the entry point's ``HfArgumentParser`` dataclasses as
``HfArgumentParser`` parses them (:mod:`.flags`) and mapped onto cfgcheck's sections
(:mod:`.build`). Findings sit at the script's lines (the flag) and the entry point's (the
tokenizer call, the Trainer); fixes are flags as they would be typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cfgcheck.findings import Finding
from cfgcheck.sources.base import Format, NativeConfig
from cfgcheck.sources.launcher.command import Launch
from cfgcheck.sources.launcher.entry import Entry

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig
    from cfgcheck.sources.native import Loaded
    from cfgcheck.sources.profiles import Profile


@dataclass
class LaunchConfig(NativeConfig):
    """The flags the entry point gets (name -> typed value, located at the script's line),
    plus what the launcher and the entry point say."""

    launch: Launch | None = None
    entry: Entry | None = None
    root: Path = Path()
    problems: list[Finding] = field(default_factory=list)
    unknown: dict[str, str] = field(default_factory=dict)  # flag -> why its value is unknown
    unknown_paths: dict[str, str] = field(default_factory=dict)  # cfgcheck path -> flag
    defaults: dict[str, tuple[Any, str]] = field(default_factory=dict)  # field -> value, where
    launch_flags: list[str] = field(default_factory=list)  # the flags, for a fix's re-check
    verify: bool = True  # check each fix by reading the script again (not when re-checking)
    given: tuple[str, ...] = ()  # the overrides and script arguments it was read with
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES the command runs with
    adjustments: list[Any] = field(default_factory=list)  # profiles.Adjustment, per entry point

    def value(self, key: str, fallback: Any = None) -> Any:
        """The flag's value, else the field's default, else ``fallback``."""
        if key in self.data:
            return self.data[key]
        if key in self.defaults and not str(self.defaults[key][0]).startswith("<no literal"):
            return self.defaults[key][0]
        return fallback

    def known(self, *keys: str) -> bool:
        return any(k in self.data or k in self.defaults for k in keys)


def launch_of(native: NativeConfig) -> LaunchConfig:
    if not isinstance(native, LaunchConfig):
        raise TypeError("the launch format builds only what load_launch read")
    return native


def load_launch(
    path: str | Path,
    overrides: Sequence[str] = (),
    gpu: str | None = None,
    options: dict[str, str] | None = None,
) -> Loaded:
    """Read a launch script and its entry point and map them (see the module);
    :class:`ConfigLoadError` (one line) when there is no training command, the entry point
    is missing or not Python, or the shell cannot be parsed."""
    from cfgcheck import safeio
    from cfgcheck.locations import display_path
    from cfgcheck.sources.launcher.flags import read_launch

    opts = dict(options or {})
    script = Path(path)
    shown = display_path(script)
    text = safeio.read_text(script)
    native = read_launch(text, shown, script, overrides, opts)
    return _loaded(native, gpu)


def _loaded(native: LaunchConfig, gpu: str | None) -> Loaded:
    from cfgcheck.sources.native import build_loaded

    spec = FORMAT
    return build_loaded(spec, native, _builder(native, spec), gpu)


def _builder(native: LaunchConfig, spec: Format) -> Any:
    from cfgcheck.sources.base import Builder

    return Builder(native, spec.label)


def launch_rules(native: NativeConfig, run: RunConfig | None) -> list[Finding]:
    return list(launch_of(native).problems)


def deepspeed_rules(native: NativeConfig, run: RunConfig | None) -> list[Finding]:
    from cfgcheck.sources.launcher.ds_config import mismatch_rule
    from cfgcheck.sources.launcher.dschat import lora_module_rule

    return mismatch_rule(native, run) + lora_module_rule(native, run)


def finish(loaded: Loaded, findings: list[Finding]) -> list[Finding]:
    from cfgcheck.sources.launcher.fixes import finish_fixes

    return finish_fixes(loaded, findings)


def profile(native: NativeConfig) -> Profile:
    from cfgcheck.sources.profiles import Adjustment, Profile

    entry = launch_of(native).entry
    adjustments = []
    if entry is not None and entry.pad_token_set:
        note = f"the entry point gives the tokenizer a pad token ({entry.pad_token_set})"
        adjustments.append(Adjustment("pad-token-missing", None, note))
    if entry is not None and entry.rope_scaling is not None:
        # FastChat fastchat/train/train.py (0e6d3e4b) train(): when model_max_length is above
        # max_position_embeddings, config.rope_scaling = {"type": "linear", "factor": ...}.
        note = (
            f"the entry point scales RoPE to the length ({entry.rope_scaling}: "
            "config.rope_scaling): no crash, on positions the model was not trained on"
        )
        adjustments.append(Adjustment("seq-len-over-block-size", "warning", note, "error"))
    adjustments += launch_of(native).adjustments
    return Profile("transformers Trainer", tuple(adjustments))


_LENGTH_PATHS = ("data.max_seq_length", "data.max_length")
_FLAGGED = "\x00"  # a value fix_value gave its flag: NUL flag=value


def _fix_value(native: NativeConfig, path: str, value: str) -> str:
    """A length fix goes to the flag the entry point reads the length from (run_clm.py's
    ``--block_size``, FastChat's ``--model_max_length``...); other values are unchanged."""
    from cfgcheck.sources.launcher.build import LENGTH_FLAGS

    entry = launch_of(native).entry
    if path not in _LENGTH_PATHS or entry is None:
        return value
    names = ("block_size",) if entry.packs is not None else LENGTH_FLAGS
    flag = next((k for k in names if k in entry.fields), None)
    return value if flag is None else f"{_FLAGGED}{flag}={value}"


def _to_native(path: str, value: str) -> str | None:
    from cfgcheck.sources.launcher.build import TO_FLAG

    if path in _LENGTH_PATHS:
        return value[1:] if value.startswith(_FLAGGED) else None
    flag = TO_FLAG.get(path)
    return None if flag is None else f"{flag}={value}"


def _build(b: Any) -> None:
    from cfgcheck.sources.launcher.build import build

    build(b)


FORMAT = Format(
    name="launch",
    label="launch script",
    framework="hf",
    keys=frozenset(),
    build=_build,
    to_native=_to_native,
    fix_value=_fix_value,
    profile=profile,
    rules=(launch_rules, deepspeed_rules),
    open_prefixes=("",),
    finish=finish,
    verifies_fixes=True,
    unknown=lambda native, run: iter(()),
)
