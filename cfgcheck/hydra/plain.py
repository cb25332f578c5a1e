"""A sweep point's value overrides applied to a plain dict, where that is exactly what Hydra
and OmegaConf would give.

The fast path of :mod:`cfgcheck.hydra.sweep` applies a point's value overrides to a copy of a
composition with Hydra's own code, then :func:`cfgcheck.validate.owned` turns the sections
cfgcheck checks into a plain dict, resolving interpolations; on a sweep those two steps were
most of a point's time (unpickling the copy, OmegaConf's node machinery, resolving). For the
common point, every override a plain ``key=value`` on an existing, untyped scalar, the result
is known without them: the composition's checked sections, resolved once, with each value
set at its key. :meth:`PlainBase.apply` does that, and answers ``None`` (use Hydra's path)
whenever the shortcut could differ:

* an override that adds (``+key``), deletes, or names a package (Hydra's other branches in
  ``ConfigLoaderImpl._apply_overrides_to_config``, hydra/_internal/config_loader_impl.py);
  ``++key`` on an existing key is the same assignment as ``key``;
* a value that is not an int, float, bool or plain string (a list, dict or null merges or
  sets a node; a string holding ``${`` would become an interpolation, ``???`` MISSING);
* a key that does not exist, passes through a list or an interpolation, holds a mapping or
  list, or is a typed node (OmegaConf converts values assigned to typed nodes);
* a key that any interpolation of the composition reads, or a composition with an
  interpolation other than absolute ``${a.b}`` references (resolvers, relative keys, escapes,
  nesting): its resolved values might change;
* a composition with a ``cfgcheck:`` mapping node, a read-only one, or one whose checked
  sections do not resolve (the OmegaConf path reports that).

``tests/test_sweep.py`` checks the verdicts equal composing every point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cfgcheck.compose_plain import copy_plain
from cfgcheck.compose_plain import references as _references
from cfgcheck.errors import ConfigLoadError

if TYPE_CHECKING:
    from hydra.core.override_parser.types import Override
    from omegaconf import DictConfig

    from cfgcheck.schema.run import RunConfig

SCALARS = (bool, int, float, str)


@dataclass
class PlainBase:
    """One composition, ready for :meth:`apply`."""

    cfg: DictConfig
    unresolved: dict[Any, Any]
    owned: dict[str, Any]
    references: frozenset[str]
    memo: dict[str, tuple[list[str], Any] | None] = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: DictConfig, schema: type[RunConfig]) -> PlainBase | None:
        """The shortcut for ``cfg``, or None where it never applies."""
        from omegaconf import OmegaConf

        from cfgcheck.validate import owned

        if "cfgcheck" in cfg or cfg._get_flag("readonly"):
            return None
        unresolved = OmegaConf.to_container(cfg, resolve=False)
        references: set[str] = set()
        if not isinstance(unresolved, dict) or not _references(unresolved, references):
            return None
        try:
            plain = owned(cfg, schema)
        except ConfigLoadError:
            return None
        if not isinstance(plain, dict):
            return None
        return cls(cfg, unresolved, plain, frozenset(references))

    def _settable(self, override: Override) -> tuple[list[str], Any] | None:
        from hydra.core.override_parser.types import OverrideType
        from omegaconf import AnyNode, DictConfig

        # ``++key`` on an existing key sets it as ``key`` does (OmegaConf.update with
        # force_add only lifts the struct flag); cfgcheck writes plain ``key=`` as ``++key=``
        # (cfgcheck.overrides.plain_overrides). A missing key is refused below.
        changes = (OverrideType.CHANGE, OverrideType.FORCE_ADD)
        if override.type not in changes or override.package is not None:
            return None
        if override.is_sweep_override():
            return None
        value = override.value()
        if type(value) not in SCALARS:
            return None
        if isinstance(value, str) and ("${" in value or value == "???"):
            return None
        key = override.key_or_group
        if any(
            key == r or r.startswith(key + ".") or key.startswith(r + ".") for r in self.references
        ):
            return None
        parts = key.split(".")
        tree: Any = self.unresolved
        node: Any = self.cfg
        for part in parts:
            if not isinstance(tree, dict) or part not in tree or not isinstance(node, DictConfig):
                return None
            tree = tree[part]
            node = node._get_node(part)
        if isinstance(tree, dict | list) or type(node) is not AnyNode:
            return None
        return parts, value

    def apply(self, overrides: Sequence[Override]) -> dict[str, Any] | None:
        """The checked sections with ``overrides`` applied, or None: use Hydra's path."""
        settings = []
        for override in overrides:
            line = override.input_line
            if line is None:
                return None
            if line not in self.memo:
                self.memo[line] = self._settable(override)
            settable = self.memo[line]
            if settable is None:
                return None
            settings.append(settable)
        out: dict[str, Any] = copy_plain(self.owned)
        for parts, value in settings:
            if parts[0] not in out:  # a section cfgcheck does not check
                continue
            tree = out
            for part in parts[:-1]:
                tree = tree[part]
            tree[parts[-1]] = value
        return out
