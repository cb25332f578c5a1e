"""A pasted Hugging Face ``config.json``: the model of the run, with the other sections from the
server's preset and the page's settings.

The file is read as ``model.pretrained`` reads a checkpoint folder's ``config.json``
(:func:`cfgcheck.models.hf.hf_model`, the same keys and transformers defaults), but from the
text the form sent (bounded by the service's parser), never from a path; the preset is composed
from the server's config directory exactly as a compose request is
(:meth:`cfgcheck.service.runner.Runner.compose`, overrides screened). The run config they make
is then checked like any submitted config.
"""

from __future__ import annotations

import json
from typing import Any

from cfgcheck.findings import Location
from cfgcheck.locations import SourceMap
from cfgcheck.service.errors import RequestError
from cfgcheck.service.runner import Runner
from cfgcheck.service.web import form as forms

FORMAT = "hf-config"


def run_config(runner: Runner, form: forms.PageForm) -> tuple[bytes, dict[str, Any]]:
    """The run config's JSON body, and {``model.<key>``: config.json key} for locations."""
    from pydantic import ValidationError

    from cfgcheck.models.files import ModelFolderError
    from cfgcheck.models.hf import hf_model
    from cfgcheck.service.body import parse_body
    from cfgcheck.service.guards import check_tree
    from cfgcheck.service.models import ComposeRequest

    shown = forms.shown_filename(form)
    data = parse_body(form.config.encode(), "json", runner.limits)
    check_tree(data, runner.settings.max_depth, runner.settings.max_nodes)
    if not isinstance(data, dict):
        raise RequestError(422, f"{shown} must hold a JSON object, not {type(data).__name__}")
    try:
        values = hf_model(data, shown)
    except (ModelFolderError, ValueError) as e:
        raise RequestError(422, str(e)) from e
    model: dict[str, Any] = {key: v.value for key, v in values.items()}
    name = data.get("_name_or_path")
    model.setdefault("name", name if isinstance(name, str) and name else shown)
    overrides = [o for o in forms.knob_overrides(form) if not o.startswith("model=")]
    overrides += form.override_lines()
    if form.gpu:
        overrides.append(f"trainer.gpu.name={form.gpu}")
    try:
        request = ComposeRequest(config_name="config", overrides=overrides)
    except ValidationError as e:
        raise RequestError(422, f"invalid settings: {e.errors()[0]['msg']}") from e
    composed = {**runner.compose(request), "model": model}  # the cached composition unchanged
    keys = {f"model.{key}": v.key for key, v in values.items()}
    return json.dumps(composed).encode(), keys


def source_map(text: str, shown: str, keys: dict[str, str]) -> SourceMap:
    """Where each ``model.*`` value comes from: the line of its config.json key (a value that
    is a formula or a default of transformers has none)."""
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.sources.reader import parse_yaml

    smap = SourceMap()
    try:
        _, lines = parse_yaml(text, shown)  # JSON is YAML: the line of every key
    except ConfigLoadError:
        return smap
    for path, key in keys.items():
        if key in lines:
            smap.set(path, Location(shown, lines[key]), covering=True)
    return smap
