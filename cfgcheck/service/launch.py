"""``{"format": "launch", "config": SCRIPT, "cwd": FOLDER}``: a launch script checked as
``cfgcheck check --from launch SCRIPT --cwd FOLDER`` checks it (:mod:`cfgcheck.sources.
launcher`), one verdict per training command.

The folder the script runs from (``cwd``, default: the first allowed root) must lie inside the
service's roots (:func:`cfgcheck.safeio.confinement_problem`); the entry point and the modules
it reads are then read only inside that folder (``cfgcheck.sources.launcher.entry.inside``),
and the files the flags name (``--deepspeed``) are confined relative to it before the builder
opens them; the run config is confined like any other before its model is resolved.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult
from cfgcheck.service.errors import RequestError
from cfgcheck.service.models import NativeRequest
from cfgcheck.service.paths import refused_paths

# Flags whose value is a file the launch builder opens (relative to the script's folder).
FILE_FLAGS = ("deepspeed",)


def _refuse(refused: list[str]) -> None:
    if refused:
        raise RequestError(422, "paths refused: " + "; ".join(refused))


def check_launch_request(request: NativeRequest, roots: Sequence[Path]) -> CheckResult:
    from cfgcheck.safeio import confinement_problem
    from cfgcheck.sources.launcher.commands import check_text
    from cfgcheck.sources.native import screened

    folder = request.cwd or str(roots[0])
    reason = confinement_problem(folder, roots, Path.cwd(), folder_entries=False)
    if reason is not None:
        _refuse([f"cwd={folder!r} {reason}"])
    root = Path(os.path.realpath(Path.cwd() / folder))
    if not root.is_dir():
        _refuse([f"cwd={folder!r} is not a folder"])

    def flags(native: Mapping[str, Any]) -> None:
        refused = []
        for key in FILE_FLAGS:
            value = native.get(key)
            if isinstance(value, str) and value:
                why = confinement_problem(value, roots, root, folder_entries=False)
                if why is not None:
                    refused.append(f"--{key} {value!r} {why}")
        _refuse(refused)

    with screened(flags, lambda config: _refuse(refused_paths(config, roots))):
        try:
            return check_text(
                request.config,
                request.filename,
                None,
                request.overrides,
                request.gpu,
                {"cwd": str(root), "confined": "1"},
            )
        except ConfigLoadError as e:
            raise RequestError(422, str(e)) from e
