"""Whole-sweep checks: every point of a Hydra multirun sweep is validated before any job runs.

A sweep (``model=a,b data.max_seq_length=1024,2048``) is expanded into its points exactly as
Hydra's ``BasicSweeper`` does (comma lists, ``range()``, ``choice()``, ``glob()``, plus
``hydra.sweeper.params`` from the config). Composing every point with Hydra is slow (tens of
milliseconds each), so the fast path composes once per combination of *compose-level*
overrides (config-group choices, ``hydra.*`` settings, ``@package`` overrides) and applies each
point's value overrides to a copy of that composition with Hydra's own override code
(``key=value`` must exist, ``+key`` adds, ``++key`` forces, ``~key`` deletes; values typed by
Hydra's override parser). :meth:`SweepChecker.check_composed` composes a point fully, the
reference the fast path is tested against.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cfgcheck.collector import batch_collection
from cfgcheck.compose import (
    DEFAULT_CONFIG_DIR,
    DEFAULT_CONFIG_NAME,
    INPUT_ERRORS,
    compose_errors,
    hydra_session,
    one_line,
    override_error,
)
from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, Finding
from cfgcheck.validate import validate

if TYPE_CHECKING:
    from hydra._internal.hydra import Hydra
    from hydra.core.override_parser.types import Override
    from omegaconf import DictConfig

    from cfgcheck.hydra.plain import PlainBase
    from cfgcheck.project.settings import DefaultGpu
    from cfgcheck.schema.run import RunConfig

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"

Point = tuple[str, ...]


def _finding_key(f: Finding) -> tuple[str, str, tuple[str, ...], str, str]:
    return (f.rule, f.severity, f.paths, f.message, f.hint)


@dataclass(frozen=True)
class PointVerdict:
    """The verdict on one point of a sweep: a check result, or why it could not be composed."""

    overrides: Point
    result: CheckResult | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and self.result.ok

    @property
    def findings(self) -> list[Finding]:
        return [] if self.result is None else self.result.findings

    def signature(self) -> tuple[Any, ...]:
        """What two ways of checking the same point must agree on."""
        return (self.ok, self.error, tuple(_finding_key(f) for f in self.findings))

    def to_dict(self) -> dict[str, Any]:
        return {
            "overrides": list(self.overrides),
            "ok": self.ok,
            "error": self.error,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass
class SweepResult:
    """Every point of a sweep with its verdict; the sweep is OK only when every point is."""

    points: list[PointVerdict]

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.points)

    @property
    def failing(self) -> list[PointVerdict]:
        return [p for p in self.points if not p.ok]

    def findings(self) -> list[Finding]:
        """Every distinct finding over all points, in first-seen order."""
        seen: dict[tuple[str, str, tuple[str, ...], str, str], Finding] = {}
        for point in self.points:
            for f in point.findings:
                seen.setdefault(_finding_key(f), f)
        return list(seen.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "findings": [f.to_dict() for f in self.findings()],
            "points": [p.to_dict() for p in self.points],
        }


@dataclass(frozen=True)
class SweepPlan:
    """The points of a sweep and the ``hydra.*`` overrides every job of it is composed with."""

    points: list[Point]
    hydra_overrides: Point = ()


def plan_sweep(
    hydra_app: Hydra, config_name: str | None, overrides: Sequence[str]
) -> SweepPlan | None:
    """Expand a multirun command line into its points as Hydra's BasicSweeper would.

    Returns None when the config selects another sweeper (Optuna, Ax, ...): its points are
    only known while it runs. Raises Hydra/OmegaConf exceptions on a bad config or override.
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from cfgcheck.overrides import plain_overrides, user_spelling

    master = hydra_app.compose_config(
        config_name=config_name,
        overrides=plain_overrides(overrides),
        run_mode=RunMode.MULTIRUN,
        from_shell=False,
        with_log_configuration=False,
    )
    sweeper = master.hydra.sweeper
    if sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    params = sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()]
    arguments += cast(list[str], OmegaConf.to_container(master.hydra.overrides.task))
    parser = OverridesParser.create(config_loader=hydra_app.config_loader)
    parsed = parser.parse_overrides(arguments)
    _bound_points(parsed)  # before BasicSweeper expands the product in memory
    batches = BasicSweeper.split_arguments(parsed, None)
    hydra_overrides = cast(list[str], OmegaConf.to_container(master.hydra.overrides.hydra))
    # Points keep the user's spelling (trainer.lora.rank=8, not ++trainer.lora.rank=8): the
    # checker rewrites them again when it composes, with the same meaning.
    points = [tuple(user_spelling(p)) for p in batches[0]]
    return SweepPlan(points, tuple(hydra_overrides))


MAX_SWEEP_POINTS = 100_000


def sweep_size(override: Override) -> int:
    """How many values one sweep override expands to, computed without expanding it.
    Raises :class:`ConfigLoadError` on a range that never ends (step 0, infinite bounds)."""
    import math

    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    value = override.value()
    if isinstance(value, ChoiceSweep):
        return len(value.list)
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if not all(isinstance(n, int | float) and math.isfinite(n) for n in (start, stop, step)):
            raise ConfigLoadError(f"{override.input_line}: range() bounds must be finite numbers")
        if step == 0:
            raise ConfigLoadError(f"{override.input_line}: range() step must not be zero")
        count = (cast(float, stop) - cast(float, start)) / cast(float, step)
        return max(0, math.ceil(count)) if count < MAX_SWEEP_POINTS + 1 else MAX_SWEEP_POINTS + 1
    return 1


def _bound_points(overrides: Sequence[Override]) -> None:
    total = 1
    for o in overrides:
        if o.is_sweep_override():
            total *= max(sweep_size(o), 1)
            if total > MAX_SWEEP_POINTS:
                raise ConfigLoadError(
                    f"the sweep has more than {MAX_SWEEP_POINTS} points; split it into smaller "
                    f"sweeps"
                )


class SweepChecker:
    """Validates sweep points of one app (a Hydra instance and a primary config)."""

    def __init__(
        self, hydra_app: Hydra, config_name: str | None, hydra_overrides: Sequence[str] = ()
    ) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self._hydra = hydra_app
        self._name = config_name
        self._hydra_overrides = list(hydra_overrides)
        self._parser = OverridesParser.create(config_loader=hydra_app.config_loader)
        # override string -> (parsed, whether it changes what is composed)
        self._parsed: dict[str, tuple[Override, bool]] = {}
        self._bases: dict[Point, bytes | str] = {}  # pickled composition, or why it failed
        self._plain: dict[Point, PlainBase | None] = {}  # see cfgcheck.hydra.plain
        self.compositions = 0  # how many times Hydra composed (for benchmarks and tests)
        # How a composed point is validated (a team's schema and default GPU: see with_project).
        self.validator: Callable[[DictConfig | dict[str, Any]], CheckResult] = validate
        self._schema: type[RunConfig] | None = None
        # Points of plain value overrides skip OmegaConf (cfgcheck.hydra.plain); off: every
        # point goes through Hydra's override code (benchmarks/sweep.py's baseline row).
        self.plain_points = True

    def with_project(self, schema: type[RunConfig] | None, gpu: DefaultGpu | None) -> SweepChecker:
        """Validate with a team's schema and its settings' default GPU."""
        if schema is not None or gpu is not None:
            self.validator = functools.partial(validate, schema=schema, gpu=gpu)
        self._schema = schema
        return self

    def check_all(
        self,
        points: Iterable[Point],
        *,
        fast: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> SweepResult:
        """Every point's verdict. Points share work (:func:`cfgcheck.reuse.shared_scope`): a
        rule's findings for sections already seen, a fix already verified on the same finding.
        ``progress`` is called with 1 after each point."""
        from cfgcheck.reuse import shared_scope

        check = self.check if fast else self.check_composed
        verdicts = []
        with shared_scope(), batch_collection():  # cfgcheck/collector.py
            for p in points:
                verdicts.append(check(p))
                if progress is not None:
                    progress(1)
        return SweepResult(verdicts)

    def check_parallel(
        self, points: Sequence[Point], jobs: int, progress: Callable[[int], None] | None = None
    ) -> SweepResult:
        """:meth:`check_all` over ``jobs`` processes, verdicts in the points' order.

        Workers are forked from this process (they inherit the composed Hydra app, the
        checker and its compositions) and check contiguous chunks of points, so neighbouring
        points still share work; a verdict's ``config`` (the validated model) stays in the
        worker. Where fork is not available, or for a single job, points are checked here."""
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if jobs <= 1 or len(points) < 2 or "fork" not in multiprocessing.get_all_start_methods():
            return self.check_all(points, progress=progress)
        global _WORKER
        # Several chunks per job: progress moves, and a slow chunk does not hold up the rest.
        size = max(1, min(CHUNK_POINTS, -(-len(points) // (jobs * 4))))
        chunks = [tuple(points[i : i + size]) for i in range(0, len(points), size)]
        _WORKER = self
        try:
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
                verdicts: list[PointVerdict] = []
                for chunk in pool.map(_check_chunk, chunks):
                    verdicts.extend(chunk)
                    if progress is not None:
                        progress(len(chunk))
        finally:
            _WORKER = None
        return SweepResult(verdicts)

    def check(self, point: Point) -> PointVerdict:
        """Fast path: a cached composition per group choice, value overrides applied to a copy."""
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        try:
            parsed = [self._parse(s) for s in point]
        except ConfigLoadError as e:
            return PointVerdict(point, error=str(e))
        key = tuple(s for s, (_, level) in zip(point, parsed, strict=True) if level)
        values = [o for o, level in parsed if not level]
        base = self._base(key)
        if isinstance(base, str):
            return PointVerdict(point, error=base)
        plain = self._plain_base(key, base) if self.plain_points else None
        applied = plain.apply(values) if plain is not None else None
        if applied is not None:
            return self._validate(point, applied)
        # A copy of the composition: unpickling is ~5x faster than copy.deepcopy here and
        # keeps OmegaConf's flags and node metadata.
        cfg = pickle.loads(base)
        try:
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        except compose_errors(*INPUT_ERRORS) as e:
            return PointVerdict(point, error=override_error(e))
        return self._validate(point, cfg)

    def check_composed(self, point: Point) -> PointVerdict:
        """Reference path: compose the point with Hydra from scratch, then validate."""
        cfg = self._compose(list(point))
        if isinstance(cfg, str):
            return PointVerdict(point, error=cfg)
        return self._validate(point, cfg)

    def _plain_base(self, key: Point, base: bytes) -> PlainBase | None:
        if key not in self._plain:
            from cfgcheck.hydra.plain import PlainBase
            from cfgcheck.schema.run import RunConfig

            self._plain[key] = PlainBase.of(pickle.loads(base), self._schema or RunConfig)
        return self._plain[key]

    def _validate(self, point: Point, cfg: DictConfig | dict[str, Any]) -> PointVerdict:
        try:
            return PointVerdict(point, result=self.validator(cfg))
        except ConfigLoadError as e:
            return PointVerdict(point, error=str(e))

    def _parse(self, text: str) -> tuple[Override, bool]:
        if text not in self._parsed:
            from cfgcheck.overrides import plain_overrides

            try:
                override = self._parser.parse_override(plain_overrides([text])[0])
            except compose_errors(*INPUT_ERRORS) as e:
                raise ConfigLoadError(one_line(e)) from e
            self._parsed[text] = (override, self._compose_level(override))
        return self._parsed[text]

    def _compose_level(self, o: Override) -> bool:
        """Overrides that change what is composed, as Hydra's defaults list sorts them."""
        if o.is_hydra_override() or o.package is not None:
            return True
        repository = self._hydra.config_loader.repository  # type: ignore[attr-defined]
        return bool(repository.group_exists(o.key_or_group)) and not isinstance(o.value(), dict)

    def _base(self, key: Point) -> bytes | str:
        if key not in self._bases:
            cfg = self._compose(list(key))
            self._bases[key] = cfg if isinstance(cfg, str) else pickle.dumps(cfg)
        return self._bases[key]

    def _compose(self, overrides: list[str]) -> DictConfig | str:
        """The job config Hydra would hand a job with these overrides, or a one-line error."""
        from hydra.types import RunMode
        from omegaconf import open_dict

        from cfgcheck.overrides import plain_overrides

        self.compositions += 1
        try:
            cfg = self._hydra.compose_config(
                config_name=self._name,
                overrides=[*self._hydra_overrides, *plain_overrides(overrides)],
                run_mode=RunMode.RUN,
                from_shell=False,
                with_log_configuration=False,
            )
        except compose_errors(*INPUT_ERRORS) as e:
            return override_error(e)
        with open_dict(cfg):
            del cfg["hydra"]
        from cfgcheck.errors import ConfigLoadError
        from cfgcheck.interpolation_cost import check_composed

        try:  # before anything resolves it (cfgcheck.interpolation_cost)
            shown = f"{self._name}.yaml" + (f" with {' '.join(overrides)}" if overrides else "")
            check_composed(cfg, shown)
        except ConfigLoadError as e:
            return str(e)
        return cfg


CHUNK_POINTS = 250
_WORKER: SweepChecker | None = None  # the checker a forked worker inherits


def _check_chunk(points: tuple[Point, ...]) -> list[PointVerdict]:
    assert _WORKER is not None  # set before the workers were forked
    return [
        dataclasses.replace(
            v, result=None if v.result is None else dataclasses.replace(v.result, config=None)
        )
        for v in _WORKER.check_all(points).points
    ]


def check_sweep(
    config_dir: str | Path = DEFAULT_CONFIG_DIR,
    config_name: str = DEFAULT_CONFIG_NAME,
    overrides: Sequence[str] = (),
    *,
    fast: bool = True,
    schema: type[RunConfig] | None = None,
    gpu: DefaultGpu | None = None,
    jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Expand a sweep over ``config_dir`` and validate every point (``cfgcheck check --sweep``).

    ``jobs``: processes to split the points over (the fast path only; verdicts in order).
    ``progress(done, total)`` is called as points are checked.

    Raises :class:`ConfigLoadError` (one line) when the config or an override cannot be read.
    """
    from hydra.core.global_hydra import GlobalHydra

    from cfgcheck.compose import screen_overrides

    screen_overrides(overrides)
    with hydra_session(config_dir, config_name) as name:
        hydra_app = GlobalHydra.instance().hydra
        assert hydra_app is not None  # set by hydra_session's initialize_config_dir
        try:
            plan = plan_sweep(hydra_app, name, overrides)
        except ConfigLoadError:
            raise
        except compose_errors(*INPUT_ERRORS) as e:
            raise ConfigLoadError(override_error(e)) from e
        if plan is None:
            raise ConfigLoadError(
                "the config selects a sweeper other than Hydra's basic sweeper; its points "
                "are only known while it runs (set hydra/sweeper=basic to check a sweep)"
            )
        checker = SweepChecker(hydra_app, name, plan.hydra_overrides).with_project(schema, gpu)
        total = len(plan.points)
        done = 0

        def advanced(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(done, total)

        if fast and jobs > 1:
            return checker.check_parallel(plan.points, jobs, advanced)
        return checker.check_all(plan.points, fast=fast, progress=advanced)
