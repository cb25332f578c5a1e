"""Keys of older LitGPT releases: a warning naming the release and what replaced the key.

``keys/litgpt_versions.json`` lists, per key the newest LitGPT lacks, the release tags that
had it; it is generated from every tag by ``scripts/litgpt_keys.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from functools import lru_cache
from importlib import resources

from cfgcheck.findings import Finding
from cfgcheck.sources.base import Format, NativeConfig
from cfgcheck.sources.unknown import RULE, unknown_keys

# What the v0.3.x TrainArgs fields became when 0.4.0 added the optimizer argument
# (litgpt/args.py at v0.3.1 vs v0.4.0; the 0.4.0 config_hub files write optimizer.init_args).
RENAMED = {
    "train.learning_rate": "optimizer.init_args.lr",
    "train.weight_decay": "optimizer.init_args.weight_decay",
    "train.beta1": "optimizer.init_args.betas[0]",
    "train.beta2": "optimizer.init_args.betas[1]",
}


@lru_cache(maxsize=1)
def older_keys() -> dict[str, list[str]]:
    """Keys of an older release that the newest lacks, with the releases that had them
    (keys/litgpt_versions.json, generated from the release tags by scripts/litgpt_keys.py)."""
    text = resources.files("cfgcheck.sources").joinpath("keys", "litgpt_versions.json")
    table: dict[str, list[str]] = json.loads(text.read_text("utf-8"))["older_keys"]
    return table


def _installed_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("litgpt")
    except PackageNotFoundError:
        return None


def unknown_with_versions(native: NativeConfig, fmt: Format) -> Iterator[Finding]:
    """Unknown keys; a key of an older LitGPT release is a warning naming the release and
    what it became, and an error only where the installed LitGPT is known to lack it."""
    installed = _installed_version()
    for f in unknown_keys(native, fmt):
        key = f.paths[0] if f.rule == RULE and f.paths else ""
        releases = older_keys().get(key)
        if not releases or (installed is not None and installed not in releases):
            yield f
            continue
        span = releases[0] if len(releases) == 1 else f"{releases[0]} to {releases[-1]}"
        new = RENAMED.get(key)
        yield dataclasses.replace(
            f,
            severity="warning",
            fixes=(),
            message=f"{key} is a key of LitGPT {span} (litgpt/args.py TrainArgs), not of the "
            "newest release"
            + (f", which reads {new} instead" if new else "")
            + "; the newest LitGPT refuses the file, the release it was written for runs it",
            hint=f"run it with LitGPT {releases[-1]}, or write {new}"
            if new
            else f"run it with LitGPT {releases[-1]}",
        )
