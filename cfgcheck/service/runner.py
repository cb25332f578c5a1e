"""One validation request, start to verdict, run off the event loop.

Order matters: the body is parsed and screened (size of the tree, types, resolver calls),
a compose request is screened and composed, file paths are confined to the allowed roots,
and only then does :func:`cfgcheck.validate` run (it may read tokenizer and dataset files).
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult
from cfgcheck.safeio import Limits
from cfgcheck.service.body import parse_body
from cfgcheck.service.cache import ComposeCache
from cfgcheck.service.errors import RequestError
from cfgcheck.service.guards import MAX_KEYS_PER_MAPPING, check_tree, resolver_refused
from cfgcheck.service.interpolation import resolver_paths
from cfgcheck.service.models import COMPOSE_KEYS, NATIVE_KEY, ComposeRequest
from cfgcheck.service.overrides import screen_overrides
from cfgcheck.service.paths import hide_outside, refused_paths
from cfgcheck.service.settings import ServiceSettings

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

MAX_KEY_CHARS = 200  # no config key comes near it; Hydra turns keys into file names


class Past504(RequestError):
    """The request ran past its deadline; the client already has its 504."""


class _Stages:
    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline

    def check(self, done: str) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Past504(504, f"the deadline passed while {done}; stopped")


class Runner:
    """Turns a request body into the ``cfgcheck check --format json`` text."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.config_dir = settings.config_dir.expanduser().resolve()
        self.roots = settings.roots()
        self.limits = Limits(
            max_bytes=settings.max_body_bytes,
            max_depth=settings.max_depth + 1,  # check_tree names the path at max_depth
            max_nodes=settings.max_nodes,
            max_aliases=100,
            max_keys=MAX_KEYS_PER_MAPPING,  # refused while the tree is checked, at once
            max_key_chars=MAX_KEY_CHARS,
        )
        # Hydra's compose API keeps global state: one composition at a time per process.
        self._compose_lock = threading.Lock()
        self.cache = ComposeCache(self.config_dir)
        from cfgcheck.service.faults import enabled

        self._faults = enabled()
        # The team schema the server was started with (never one a request names).
        self.schema: type[RunConfig] | None = None
        if settings.schema is not None:
            from cfgcheck.project.schema import load_schema

            self.schema = load_schema(settings.schema)

    def run(self, body: bytes, kind: str, deadline: float | None = None) -> str:
        """The verdict's JSON text. With a ``deadline`` (``time.monotonic()`` seconds), the
        work stops between stages once it has passed: a request the client already got a
        504 for stops costing a worker at the next stage boundary."""
        return render(self.check(body, kind, deadline))

    def check(self, body: bytes, kind: str, deadline: float | None = None) -> CheckResult:
        """The verdict of :meth:`run` before it is rendered (the web page renders it too).

        The request runs under a CPU budget of ``request_timeout_s`` seconds of this worker
        thread's CPU time (:mod:`cfgcheck.budget`), checked wherever the work loops (every
        rule, every fix check, the interpolation count, the override screen): past it the
        request is refused with 422 and the worker is free for the next one."""
        from cfgcheck.budget import BudgetExceeded, cpu_budget

        try:
            with cpu_budget(self.settings.request_timeout_s, deadline):
                return self._check(body, kind, deadline)
        except BudgetExceeded as e:
            if deadline is not None and time.monotonic() > deadline:
                raise Past504(504, str(e)) from e
            raise RequestError(422, str(e)) from e

    def _check(self, body: bytes, kind: str, deadline: float | None) -> CheckResult:
        stage = _Stages(deadline)
        payload = parse_body(body, kind, self.limits)
        stage.check("parsing")
        check_tree(_screened(payload), self.settings.max_depth, self.settings.max_nodes)
        if self._faults:  # test-only (cfgcheck.service.faults): off unless set at start-up
            from cfgcheck.service.faults import inject

            inject(payload)
        if not isinstance(payload, dict):
            raise RequestError(
                422,
                f"the body must be a mapping (a run config or {{config_name, overrides}}), "
                f"got {_kind(payload)}",
            )
        if NATIVE_KEY in payload:
            from cfgcheck.service.native import check_native_request

            return check_native_request(payload, self.roots)
        request = _compose_request(payload) if COMPOSE_KEYS & payload.keys() else None
        config = payload if request is None else self.compose(request)
        stage.check("composing")
        refused = refused_paths(self._run_config(config), self.roots)
        if refused:
            raise RequestError(422, "paths refused: " + "; ".join(refused))
        stage.check("confining paths")
        try:
            result = (
                validate_config(config)
                if self.schema is None
                else validate_config(config, self.schema)
            )
        except ConfigLoadError as e:  # e.g. a model.pretrained folder that cannot be read
            raise RequestError(422, self._hide_dir(str(e))) from e
        if request is not None and result.findings:
            stage.check("validating")
            result = self._locate(result, request)
        return result

    def _run_config(self, config: dict[str, Any]) -> Any:
        """The run config whose paths are confined: a ``cfgcheck:`` mapping node resolved in
        the team's tree (see :mod:`cfgcheck.project.mapping`), else the config itself."""
        from cfgcheck.project.mapping import has_node, resolve

        if not has_node(config):
            return config
        found = resolver_paths(config)  # a body's resolver calls never run either
        if found:
            raise RequestError(422, resolver_refused(found))
        try:
            return resolve(config)
        except ConfigLoadError as e:
            raise RequestError(422, self._hide_dir(str(e))) from e

    def compose(self, request: ComposeRequest) -> dict[str, Any]:
        """Compose a ``{config_name, overrides}`` request into a plain, resolved config."""
        screen_overrides(request.overrides, self.config_dir)
        key = self.cache.key(request.config_name, request.overrides)
        return self.cache.config(key, lambda: self._compose(request))

    def _compose(self, request: ComposeRequest) -> dict[str, Any]:
        from omegaconf import OmegaConf

        from cfgcheck.compose import compose
        from cfgcheck.project.mapping import has_node, tree_of
        from cfgcheck.validate import to_plain

        try:
            with self._compose_lock:
                cfg = compose(self.config_dir, request.config_name, request.overrides)
            # Resolver calls are refused wherever they come from, before anything resolves.
            found = resolver_paths(OmegaConf.to_container(cfg, resolve=False))
            if found:
                raise RequestError(422, resolver_refused(found))
            # A team's tree keeps its interpolations: they say which key holds each value.
            plain = tree_of(cfg) if has_node(cfg) else to_plain(cfg)
        except ConfigLoadError as e:
            raise RequestError(422, self._hide_dir(str(e))) from e
        if not isinstance(plain, dict):  # a primary config that is a list or a scalar
            raise RequestError(422, f"{request.config_name} does not compose to a mapping")
        return plain

    def _locate(self, result: CheckResult, request: ComposeRequest) -> CheckResult:
        """Source locations of the findings, as ``cfgcheck check`` attaches them."""
        try:
            from cfgcheck.locations import locate
        except ImportError:  # pragma: no cover - locations are optional to the verdict
            return result
        key = self.cache.key(request.config_name, request.overrides)
        smap = self.cache.extra(key, "source_map", lambda: self._source_map(request))
        return result if smap is None else locate(result, smap)

    def _source_map(self, request: ComposeRequest) -> Any:
        """The composition's source map, or ``None`` where ``with_locations`` gives up too."""
        from cfgcheck.compose import compose_errors
        from cfgcheck.locations import source_map

        try:
            with self._compose_lock:
                return source_map(self.config_dir, request.config_name, request.overrides)
        except compose_errors(OSError, ValueError):
            return None

    def _hide_dir(self, message: str) -> str:
        """Say ``<config-dir>`` / ``<python>`` instead of the server's own directory layout."""
        import sys

        message = message.replace(str(self.config_dir), "<config-dir>")
        for prefix in {sys.prefix, sys.base_prefix}:
            message = message.replace(prefix, "<python>")
        return hide_outside(message, self.roots)  # a Hub cache under the server's home


def validate_config(
    config: Mapping[str, Any], schema: type[RunConfig] | None = None
) -> CheckResult:
    """:func:`cfgcheck.validate` (a module attribute, so tests can slow it down)."""
    from cfgcheck import validate

    return validate(config, schema)


def render(result: CheckResult) -> str:
    """What ``cfgcheck check --format json`` prints for ``result``: the same reporter."""
    from cfgcheck.report import get_reporter

    out = io.StringIO()
    get_reporter("json")(result, out)
    return out.getvalue()


def _compose_request(payload: dict[str, Any]) -> ComposeRequest:
    try:
        return ComposeRequest.model_validate(payload)
    except ValidationError as e:
        raise RequestError(422, _one_line_errors(e)) from e


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _one_line_errors(error: ValidationError) -> str:
    parts = []
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<body>"
        parts.append(f"{loc}: {err['msg']}")
    return "invalid compose request: " + "; ".join(parts)


def _screened(payload: Any) -> Any:
    """What the ``${`` screen reads: a native config in a format whose adapter resolves its
    own interpolations (torchtune: plain ``${key}`` references only, bounded and screened
    linearly by cfgcheck.sources.torchtune_data.interpolate) is checked without its text."""
    from cfgcheck.service.native import INTERPOLATING_FORMATS

    fmt = payload.get(NATIVE_KEY) if isinstance(payload, dict) else None
    if isinstance(fmt, str) and fmt in INTERPOLATING_FORMATS:
        return {k: v for k, v in payload.items() if k != "config"}
    return payload
