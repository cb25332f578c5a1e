"""One check of the page's form, run on a validation thread: the service's own validation
(:meth:`cfgcheck.service.runner.Runner.check`, the code ``POST /v1/validate`` runs) on the
body the form stands for, then the findings located on the lines of the pasted file and the
memory panel."""

from __future__ import annotations

from cfgcheck.findings import CheckResult, Location
from cfgcheck.locations import locate
from cfgcheck.service.runner import Runner
from cfgcheck.service.web import form as forms
from cfgcheck.service.web import hfconfig
from cfgcheck.service.web.memory import panel
from cfgcheck.service.web.page import Outcome


def check_form(runner: Runner, form: forms.PageForm, deadline: float) -> Outcome:
    paste = form.format if form.mode == "paste" else None
    shown = forms.shown_filename(form)
    if paste == hfconfig.FORMAT:
        body, keys = hfconfig.run_config(runner, form)
        result = runner.check(body, "json", deadline)
        if result.findings:
            result = locate(result, hfconfig.source_map(form.config, shown, keys))
    else:
        body, kind = forms.request_body(form)
        if paste == "cfgcheck" and form.gpu:
            body, kind = with_gpu(runner, body, form.gpu)
        result = runner.check(body, kind, deadline)
        if paste == "cfgcheck" and result.findings:
            result = locate_in_text(result, form.config, shown, form.gpu)
    if result.config is None:
        return Outcome(result)
    native = paste if paste not in (None, "cfgcheck", hfconfig.FORMAT) else None
    return Outcome(result, panel(result.config, form.gpu, native))


def with_gpu(runner: Runner, body: bytes, gpu: str) -> tuple[bytes, str]:
    """A pasted run config with ``trainer.gpu`` set to the GPU picked on the page (as the
    override ``trainer.gpu.name=GPU`` sets it for ``cfgcheck check``). The text is read by the
    service's own bounded parser; what it refuses, or a body that is no run config, is left to
    the check to refuse or judge."""
    import json

    from cfgcheck.service.body import parse_body
    from cfgcheck.service.errors import RequestError
    from cfgcheck.service.models import COMPOSE_KEYS, NATIVE_KEY

    try:
        payload = parse_body(body, "yaml", runner.limits)
    except RequestError:
        return body, "yaml"
    if not isinstance(payload, dict) or (COMPOSE_KEYS | {NATIVE_KEY}) & payload.keys():
        return body, "yaml"
    trainer = payload.get("trainer")
    if isinstance(trainer, dict):
        trainer["gpu"] = {"name": gpu}
    return json.dumps(payload).encode(), "json"


def locate_in_text(result: CheckResult, text: str, shown: str, gpu: str = "") -> CheckResult:
    """``result`` with each finding's paths located on the line of the pasted run config that
    sets them (as ``cfgcheck check`` locates them in conf/ files,
    :func:`cfgcheck.locations.locate`); the text is read by the sources layer's bounded
    reader, which the service's parser already accepted."""
    from cfgcheck.errors import ConfigLoadError
    from cfgcheck.locations import SourceMap
    from cfgcheck.sources.reader import parse_yaml

    try:
        _, lines = parse_yaml(text, shown)
    except ConfigLoadError:  # accepted by the service's reader, not by this one: no lines
        return result
    parents = {key.rsplit(".", 1)[0] for key in lines if "." in key}
    smap = SourceMap()
    for key, line in lines.items():  # a key with nothing below it holds its whole value
        smap.set(key, Location(shown, line), covering=key not in parents)
    if gpu:  # the GPU picked on the page, not the file's
        smap.set("trainer.gpu", Location(f"<GPU picked on the page: {gpu}>"), covering=True)
    return locate(result, smap)
