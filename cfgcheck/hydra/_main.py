"""``@cfgcheck.main``: a drop-in for ``@hydra.main`` that validates before the task runs.

Hydra itself does the launching (``hydra.main`` is used underneath), so every Hydra flag,
output directory, logging set-up, launcher and sweeper keeps working. cfgcheck adds two gates:

- every job validates its composed config; the task function is called with the typed
  :class:`~cfgcheck.RunConfig`, or never: the report goes to stderr and the process exits 1
  (2 when the config cannot even be resolved). A passing job prints its warnings, if any. In
  a multirun the failing job raises :class:`~cfgcheck.ConfigError` instead, so Hydra records it
  as failed. The raw ``DictConfig`` of the running job stays reachable with
  :func:`current_dictconfig`.
- a multirun (``-m``, or ``hydra.mode=MULTIRUN`` in the config) is expanded and every point is
  validated *before* Hydra launches anything; one failing point refuses the whole sweep.

Both gates raise ``SystemExit`` rather than use a Hydra Callback: Hydra 1.3 turns an exception
raised in a callback into a warning and runs the job anyway.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NoReturn, cast

from cfgcheck.compose import compose_errors
from cfgcheck.errors import ConfigError, ConfigLoadError
from cfgcheck.findings import CheckResult
from cfgcheck.hydra.sweep import SweepChecker, SweepResult, plan_sweep
from cfgcheck.validate import validate

if TYPE_CHECKING:
    import argparse

    from omegaconf import DictConfig

    from cfgcheck.hydra.sweep import PointVerdict
    from cfgcheck.project.context import Project
    from cfgcheck.project.settings import Settings
    from cfgcheck.schema import RunConfig

EXIT_FINDINGS, EXIT_LOAD = 1, 2

_CURRENT: ContextVar[DictConfig | None] = ContextVar("cfgcheck_current_dictconfig", default=None)

Task = Callable[["RunConfig"], Any]


def current_dictconfig() -> DictConfig:
    """The raw composed job config (an OmegaConf ``DictConfig``) of the running task.

    Only valid inside a task function decorated with :func:`main`; use it for keys that the
    schema does not model. Raises ``RuntimeError`` elsewhere.
    """
    cfg = _CURRENT.get()
    if cfg is None:
        raise RuntimeError("current_dictconfig() is only available inside a @cfgcheck.main task")
    return cfg


_UNSET: Any = object()  # an argument the caller left out: Hydra's own default applies


def main(
    config_path: str | None = _UNSET,
    config_name: str | None = None,
    version_base: str | None = _UNSET,
    *,
    schema: type[RunConfig] | str | None = None,
) -> Callable[[Task], Callable[..., Any]]:
    """Like ``hydra.main``, but the task receives a validated :class:`~cfgcheck.RunConfig`.

    The arguments are handed to ``hydra.main`` unchanged; omitted ones keep Hydra's defaults.
    ``schema``: a team's :class:`~cfgcheck.RunConfig` subclass (or ``"pkg.mod:Class"``); the
    task then receives an instance of it. The project's settings (``[tool.cfgcheck]``, found
    from the app's config directory) apply as in ``cfgcheck check``.
    """
    import hydra
    from hydra.main import _UNSPECIFIED_

    path = _UNSPECIFIED_ if config_path is _UNSET else config_path
    base = _UNSPECIFIED_ if version_base is _UNSET else version_base

    def decorator(task: Task) -> Callable[..., Any]:
        @functools.wraps(task)
        def job(cfg: DictConfig) -> Any:
            run = _validated(cfg, schema)
            token = _CURRENT.set(cfg)
            try:
                return task(run)
            finally:
                _CURRENT.reset(token)

        hydra_entry = hydra.main(config_path=path, config_name=config_name, version_base=base)(job)

        @functools.wraps(task)
        def entry(cfg_passthrough: DictConfig | None = None) -> Any:
            if cfg_passthrough is None:
                _plain_argv()
                _refuse_bad_sweep(job, _config_path(path), config_name, schema)
            return hydra_entry(cfg_passthrough)

        return entry

    return decorator


def _plain_argv() -> None:
    """Rewrite the command line's plain overrides of schema keys as Hydra parses it itself
    (``trainer.lora.rank=16`` -> ``++trainer.lora.rank=16``, see :mod:`cfgcheck.overrides`)."""
    from hydra._internal.utils import get_args_parser

    from cfgcheck.overrides import plain_overrides

    try:
        args = get_args_parser().parse_args(sys.argv[1:])
    except SystemExit:
        return  # Hydra reports the bad command line itself
    wanted = set(args.overrides)
    sys.argv[1:] = [plain_overrides([a])[0] if a in wanted else a for a in sys.argv[1:]]


def _config_path(path: str | None) -> str | None:
    """``config_path`` as ``hydra.main`` resolves an omitted one (after it set the version base)."""
    from hydra import version
    from hydra.main import _UNSPECIFIED_

    if path is _UNSPECIFIED_:
        return None if version.base_at_least("1.2") else "."
    return path


def _stop(code: int, error: ConfigError | ConfigLoadError) -> NoReturn:
    """End the job: exit in a single run; in a multirun, fail this job (Hydra records it)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        raise error
    raise SystemExit(code)


def _validated(cfg: DictConfig, schema: type[RunConfig] | str | None = None) -> RunConfig:
    """The typed config of a job, or the job stops with the report on stderr."""
    from cfgcheck.report.text import report_text

    try:
        project = _job_project(schema)
        result: CheckResult = validate(cfg, project.schema, gpu=project.settings.default_gpu)
        result = _finished(result, project)
    except ConfigLoadError as e:
        print(f"cfgcheck: error: {e}", file=sys.stderr)
        _stop(EXIT_LOAD, e)
    if not result.ok:
        report_text(result, sys.stderr)
    elif result.warnings:  # a passing job shows its warnings, not its infos
        report_text(CheckResult(result.warnings, result.config), sys.stderr)
    if result.config is None or not result.ok:
        print("cfgcheck: the task was not started: fix the errors above", file=sys.stderr)
        _stop(EXIT_FINDINGS, ConfigError(result.errors))
    return result.config


def _job_source() -> tuple[str, str, list[str]] | None:
    """The job's config directory, primary config name and overrides (its Hydra group choices
    and task overrides), when its primary config comes from a directory (not ``pkg://``)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    dirs = [
        s.path for s in hc.runtime.config_sources if s.provider == "main" and s.schema == "file"
    ]
    if not dirs or not hc.job.config_name:
        return None
    from omegaconf import OmegaConf

    from cfgcheck.overrides import user_spelling

    # Hydra's own group choices too (hydra/job_logging=default): the primary config may select
    # a hydra/ option whose defaults only compose with them. Overrides as typed: one may hold
    # an interpolation (x=${y}), which is text here.
    hydra = cast(list[str], OmegaConf.to_container(hc.overrides.hydra, resolve=False))
    task = cast(list[str], OmegaConf.to_container(hc.overrides.task, resolve=False))
    hydra_groups = [o for o in hydra if o.startswith("hydra/")]
    return dirs[0], hc.job.config_name, [*hydra_groups, *user_spelling(task)]


def _job_project(schema: type[RunConfig] | str | None) -> Project:
    """The project of the running job: settings found from its config directory."""
    from cfgcheck.project.context import project

    source = _job_source()
    if source is None:
        return project(schema=schema)
    directory, name, _ = source
    return project(directory, name, schema=schema)


def _finished(result: CheckResult, project: Project) -> CheckResult:
    """``result`` with the file:line (or override) that set each offending value, the inline
    suppressions and the project's settings applied."""
    source = _job_source()
    if source is None:
        return project.settings.apply(result)
    return project.finish(result, source[2])


def _refuse_bad_sweep(
    job: Callable[..., Any],
    config_path: str | None,
    name: str | None,
    schema: type[RunConfig] | str | None = None,
) -> None:
    """Before a multirun launches, validate every point; exit 1 if any fails."""
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args()
    if (
        args.experimental_rerun is not None
        or args.help
        or args.hydra_help
        or args.cfg is not None
        or args.info is not None
        or args.shell_completion
    ):
        return
    try:
        result = _check_multirun(job, args, config_path, name, schema)
    except ConfigLoadError as e:
        print(f"cfgcheck: error: {e}", file=sys.stderr)
        raise SystemExit(EXIT_LOAD) from e
    if result is None or result.ok:
        return
    from cfgcheck.hydra.report import report_sweep_text

    report_sweep_text(result, sys.stderr)
    print(
        f"cfgcheck: sweep refused: {len(result.failing)} of {len(result.points)} points fail; "
        "no job was launched",
        file=sys.stderr,
    )
    raise SystemExit(EXIT_FINDINGS)


def _check_multirun(
    job: Callable[..., Any],
    args: argparse.Namespace,
    config_path: str | None,
    config_name: str | None,
    schema: type[RunConfig] | str | None = None,
) -> SweepResult | None:
    """Every point of the sweep this command line would launch, checked; None when it is not
    a multirun, the sweeper is not Hydra's basic one, or the config is broken (Hydra reports
    that itself, as usual)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import (
        create_automatic_config_search_path,
        detect_calling_file_or_module_from_task_function,
        detect_task_name,
    )
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    name = args.config_name if args.config_name is not None else config_name
    path = args.config_path if args.config_path is not None else config_path
    calling_file, calling_module = detect_calling_file_or_module_from_task_function(job)
    if calling_file is None and calling_module is None:
        return None
    search_path = create_automatic_config_search_path(calling_file, calling_module, path)
    if args.config_dir is not None:
        directory = os.path.abspath(args.config_dir)
        if not os.path.isdir(directory):
            return None
        search_path.prepend(
            provider="command-line",
            path=f"file://{directory}",
            anchor=SearchPathQuery(provider="schema"),
        )
    overrides = list(args.overrides)
    try:
        hydra_app = Hydra.create_main_hydra2(
            task_name=detect_task_name(calling_file, calling_module),
            config_search_path=search_path,
        )
    except compose_errors():
        return None
    try:
        # The run mode as hydra's _run_app decides it.
        mode = hydra_app.get_mode(config_name=name, overrides=overrides)
        if mode != RunMode.MULTIRUN:
            if not args.multirun:
                return None
            overrides.append("hydra.mode=MULTIRUN")
        plan = plan_sweep(hydra_app, name, overrides)
        if plan is None:
            return None
        # The app's own config directory ("file://" or a plain path; not a pkg:// package).
        main_dirs = [
            e.path.removeprefix("file://")
            for e in search_path.get_path()
            if e.provider == "main" and e.path and "://" not in e.path.removeprefix("file://")
        ]
        from cfgcheck.project.context import project

        where = args.config_dir or (main_dirs[0] if main_dirs else None)
        p = project(where, name or None, schema=schema)
        checker = SweepChecker(hydra_app, name, plan.hydra_overrides)
        result = checker.with_project(p.schema, p.settings.default_gpu).check_all(plan.points)
    except compose_errors():
        return None
    finally:
        GlobalHydra.instance().clear()
    if main_dirs and name and args.config_dir is None:
        from cfgcheck.hydra.cli import locate_failing
        from cfgcheck.hydra.report import DETAILED_POINTS

        return locate_failing(result, main_dirs[0], name, DETAILED_POINTS, p.settings)
    return SweepResult([_settled(pt, p.settings) for pt in result.points])


def _settled(point: PointVerdict, settings: Settings) -> PointVerdict:
    """A sweep point with the project's settings applied to its findings."""
    import dataclasses

    if point.result is None:
        return point
    return dataclasses.replace(point, result=settings.apply(point.result))
