"""``{"format": ..., "config": ...}`` requests: a native framework config (LitGPT, Axolotl,
TRL, torchtune) or a training script or notebook (``python``) checked as ``cfgcheck check --from
FORMAT FILE`` checks it (:mod:`cfgcheck.sources`).

The text is read by the sources layer's bounded reader; the run config it maps to is confined
like any submitted config (paths inside the allowed roots) before anything reads a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult
from cfgcheck.service.errors import RequestError
from cfgcheck.service.models import NativeRequest
from cfgcheck.service.paths import hide_outside, refused_native_paths, refused_paths

# Formats whose config text may hold ${key} references: every published torchtune recipe
# config interpolates ${output_dir}; the adapter resolves only plain references, bounded. A
# launch script's ${VAR:-default} is shell, substituted only from the script's own assignments
# (cfgcheck.sources.launcher.shell: linear, nothing run, never OmegaConf).
INTERPOLATING_FORMATS = frozenset({"torchtune", "launch"})


def _confine(refused: list[str]) -> None:
    if refused:
        raise RequestError(422, "paths refused: " + "; ".join(refused))


def check_native_request(payload: dict[str, Any], roots: Sequence[Path]) -> CheckResult:
    """The verdict on a native request. The paths it names are confined to ``roots`` before
    anything resolves them: the native keys a builder reads before it runs, the run config
    before its model is resolved (a length left to the model resolves it while loading), and
    again each time a fix is checked by loading the config again."""
    from cfgcheck.sources.native import screened

    with screened(
        lambda native: _confine(refused_native_paths(native, roots)),
        lambda config: _confine(refused_paths(config, roots)),
    ):
        try:
            return _check(payload, roots)
        except RequestError as e:
            raise RequestError(e.status, hide_outside(e.detail, roots)) from e


def _check(payload: dict[str, Any], roots: Sequence[Path]) -> CheckResult:
    from cfgcheck.sources import check_loaded, load_document, parse_document

    try:
        request = NativeRequest.model_validate(payload)
    except ValidationError as e:
        parts = [
            f"{'.'.join(str(p) for p in err['loc']) or '<body>'}: {err['msg']}"
            for err in e.errors()
        ]
        raise RequestError(422, "invalid native request: " + "; ".join(parts)) from e
    if request.format == "launch":  # a shell script and its entry point, read statically
        from cfgcheck.service.launch import check_launch_request

        return check_launch_request(request, roots)
    try:
        if request.format == "python":  # a script or notebook body, read statically
            from cfgcheck.sources.python import load_text

            loaded = load_text(request.config, request.filename, request.overrides, request.gpu)
        else:
            doc = parse_document(request.config, request.filename)
            options = {
                k: str(v)
                for k, v in (("recipe", request.recipe), ("nproc_per_node", request.nproc_per_node))
                if v is not None
            }
            loaded = load_document(doc, request.format, request.overrides, request.gpu, options)
    except ConfigLoadError as e:
        raise RequestError(422, str(e)) from e
    refused = refused_paths(loaded.config, roots)
    if refused:
        raise RequestError(422, "paths refused: " + "; ".join(refused))
    try:
        return check_loaded(loaded)
    except ConfigLoadError as e:  # the model cannot be resolved
        raise RequestError(422, str(e)) from e
