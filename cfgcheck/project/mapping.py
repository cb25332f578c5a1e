"""The ``cfgcheck:`` mapping node: a team's config keeps its own names, the node says where
cfgcheck's settings are.

```yaml
training: {max_len: 4096, batch: 8}
cfgcheck:
  model: {name: tinyllama-1.1b, block_size: 2048, ...}
  data: {max_seq_length: ${training.max_len}}
  trainer: {micro_batch_size: ${training.batch}}
```

When the composed config has a top-level ``cfgcheck`` node, that node (interpolations resolved
by OmegaConf in the whole tree) is the run config validated, and nothing else in the tree is
checked. Each run-config path is then told in the team's key: a value that is an interpolation
``${training.max_len}`` is followed, through chains of interpolations (relative ones
included), to the key that holds the value, so a finding names ``training.max_len``, the source
map locates it at that key's file:line (group file or command-line override), and a fix is an
override of that key (``training.max_len=2048``), checked like every fix by applying it to the
team's tree and validating again (:func:`cfgcheck.fixcheck.verified`). A literal in the node,
or a value the node does not set, is ``cfgcheck.<path>``: located at the node's own line.

A node that is not a mapping, an interpolation to a missing key, and a cycle are one-line
:class:`~cfgcheck.errors.ConfigLoadError`\\ s.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CheckResult, Finding, Fix, Location

if TYPE_CHECKING:
    from cfgcheck.project.settings import DefaultGpu
    from cfgcheck.schema.run import RunConfig

NODE = "cfgcheck"

# A value that is one node interpolation and nothing else: ``${a.b}``, ``${.sibling}``,
# ``${..x.y}``, ``${a[0]}``. Resolver calls (``${oc.env:X}``) and string templates are not
# followed: such a value is located at the node's own line.
_PURE = re.compile(r"^\$\{\s*(\.*)([A-Za-z_][\w-]*(?:(?:\.[\w-]+)|(?:\[\d+\]))*)?\s*\}$")
MAX_CHAIN = 64

# Fields the schema derives from another when the node does not set them: their value comes
# from that field's key (``cfgcheck/schema/model.py``: padded_vocab_size from vocab_size;
# ``cfgcheck/schema/data.py``: the tokenizer's max_length from max_seq_length).
DERIVED_FROM = {
    "model.padded_vocab_size": "model.vocab_size",
    "data.max_length": "data.max_seq_length",
}


def has_node(config: Any) -> bool:
    """Whether a composed config (plain mapping or ``DictConfig``) carries the mapping node."""
    if not (isinstance(config, Mapping) or type(config).__module__.startswith("omegaconf")):
        return False
    try:
        return NODE in config
    except Exception:  # a DictConfig in a bad state: validation reports it
        return False


def tree_of(config: Any) -> dict[str, Any]:
    """The team's whole composed tree as plain containers, interpolations left unresolved."""
    if type(config).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        tree = OmegaConf.to_container(config, resolve=False)
    else:
        import copy

        tree = copy.deepcopy(dict(config))
    if not isinstance(tree, dict):
        raise ConfigLoadError("the composed config is not a mapping")
    return {str(k): v for k, v in tree.items()}


def _parts(path: str) -> list[str]:
    return [p for p in re.split(r"\.|\[(\d+)\]", path) if p]


def _child(node: Any, part: str) -> tuple[bool, Any]:
    if isinstance(node, dict) and part in node:
        return True, node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return True, node[int(part)]
    return False, None


def _target(value: Any, parent: list[str]) -> str | None:
    """The absolute key a pure interpolation ``value`` found under ``parent`` points to."""
    if not isinstance(value, str):
        return None
    match = _PURE.match(value)
    if match is None:
        return None
    dots, key = match.group(1), match.group(2) or ""
    if not dots:
        return key
    up = len(dots) - 1
    if up > len(parent):
        raise ConfigLoadError(f"{value} climbs above the root of the config")
    base = parent[: len(parent) - up]
    return ".".join([*base, *_parts(key)])


def _redirect(tree: Mapping[str, Any], path: str) -> str | None:
    """Where ``path`` really lives when some key along it is a pure interpolation."""
    parts = _parts(path)
    node: Any = tree
    for i, part in enumerate(parts):
        found, node = _child(node, part)
        if not found:
            return None
        target = _target(node, parts[:i])
        if target is not None:
            return ".".join([target, *parts[i + 1 :]]) if i + 1 < len(parts) else target
    return None


def _exists(tree: Mapping[str, Any], path: str) -> bool:
    node: Any = tree
    for part in _parts(path):
        found, node = _child(node, part)
        if not found:
            return False
    return True


def _keys(tree: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(tree, dict):
        for k, v in tree.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path
            yield from _keys(v, path)


def trace(tree: Mapping[str, Any], path: str, *, strict: bool = False) -> str:
    """The key that holds ``path``'s value, following interpolations. ``strict``: a chain
    that ends at a missing key is a :class:`ConfigLoadError` (else the path is returned as
    the chain left it)."""
    chain = [path]
    current = path
    while True:
        try:
            nxt = _redirect(tree, current)
        except ConfigLoadError as e:
            raise ConfigLoadError(f"{current}: {e}") from e
        if nxt is None:
            break
        if nxt in chain:
            loop = " -> ".join([*chain[chain.index(nxt) :], nxt])
            raise ConfigLoadError(f"the cfgcheck: mapping has an interpolation cycle: {loop}")
        if len(chain) > MAX_CHAIN:
            raise ConfigLoadError(f"{path}: more than {MAX_CHAIN} chained interpolations")
        if strict and not _exists(tree, nxt):
            close = difflib.get_close_matches(nxt, list(_keys(tree)), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigLoadError(
                f"{current} interpolates ${{{nxt}}}, a key the config does not have{hint}"
            )
        chain.append(nxt)
        current = nxt
    return current


def _leaves(node: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix}.{i}")
    else:
        yield prefix, node


def resolve(tree: Mapping[str, Any]) -> dict[str, Any]:
    """The run config the node describes: its values resolved in the whole tree.

    Raises :class:`ConfigLoadError` (one line) when the node is not a mapping, or a value
    interpolates a missing key, loops, or cannot be resolved.
    """
    node = tree.get(NODE)
    if not isinstance(node, dict):
        kind = "null" if node is None else type(node).__name__
        raise ConfigLoadError(
            f"the {NODE}: node must be a mapping of the run config's sections (model, "
            f"tokenizer, data, trainer), got {kind}"
        )
    for path, value in _leaves(node, NODE):
        if isinstance(value, str) and "${" in value:
            trace(tree, path, strict=True)
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from cfgcheck.compose import one_line

    try:
        cfg = OmegaConf.create(dict(tree))
        run = OmegaConf.to_container(cfg[NODE], resolve=True, throw_on_missing=True)
    except (OmegaConfBaseException, ValueError, TypeError, RecursionError) as e:
        raise ConfigLoadError(f"cannot resolve the {NODE}: mapping: {one_line(e)}") from e
    if not isinstance(run, dict):  # pragma: no cover - checked above
        raise ConfigLoadError(f"the {NODE}: node must be a mapping")
    return {str(k): v for k, v in run.items()}


@dataclass(frozen=True)
class Mapped:
    """A team's tree, and the run-config paths told in its keys."""

    tree: dict[str, Any]

    def team_path(self, path: str) -> str:
        """``data.max_seq_length`` -> ``training.max_len`` (or ``cfgcheck.data....``)."""
        if path.startswith("<"):
            return path
        found = trace(self.tree, f"{NODE}.{path}")
        if path in DERIVED_FROM and not _exists(self.tree, found):
            return self.team_path(DERIVED_FROM[path])
        return found

    def override(self, text: str) -> str | None:
        """A fix's override in the team's keys; None for a group choice (``model=x``), which
        has no meaning in the team's tree."""
        key, sep, value = text.partition("=")
        prefix = key[: len(key) - len(key.lstrip("+~"))]
        bare = key[len(prefix) :]
        if "." not in bare and not prefix and sep:
            from cfgcheck.overrides import plain_key

            if plain_key(text) is None:
                return None  # a config group choice
        return f"{prefix}{self.team_path(bare)}{sep}{value}"

    def fixes(self, fixes: Sequence[Fix]) -> tuple[Fix, ...]:
        out: list[Fix] = []
        for fix in fixes:
            rewritten = [self.override(o) for o in fix.overrides]
            if all(r is not None for r in rewritten):
                changes = tuple(dict.fromkeys(r for r in rewritten if r is not None))
                out.append(Fix(changes, fix.summary))
        return tuple(dict.fromkeys(out))

    def with_team_fixes(self, result: CheckResult) -> CheckResult:
        findings = [dataclasses.replace(f, fixes=self.fixes(f.fixes)) for f in result.findings]
        return dataclasses.replace(result, findings=findings)

    def with_team_paths(self, result: CheckResult) -> CheckResult:
        findings: list[Finding] = []
        for f in result.findings:
            paths = tuple(dict.fromkeys(self.team_path(p) for p in f.paths))
            locations: dict[str, Location | None] = {}
            for p in f.paths:
                known = f.locations.get(p)
                if known is not None:
                    locations[self.team_path(p)] = known
            findings.append(dataclasses.replace(f, paths=paths, locations=locations))
        return dataclasses.replace(result, findings=findings)


def validate_mapped(
    config: Any, schema: type[RunConfig] | None = None, gpu: DefaultGpu | None = None
) -> CheckResult:
    """Validate the run config a tree's ``cfgcheck:`` node describes; findings, locations and
    verified fixes in the team's keys (see the module docstring)."""
    from cfgcheck.fixcheck import apply_overrides, verified
    from cfgcheck.validate import at_default_gpu, validate_plain

    tree = tree_of(config)
    mapped = Mapped(tree)

    def run_of(team_tree: Mapping[str, Any]) -> dict[str, Any]:
        run = resolve(team_tree)
        return gpu.fill(run) if gpu is not None else run

    def revalidate(team_tree: Mapping[str, Any]) -> list[Finding]:
        again = validate_plain(run_of(dict(team_tree)), schema)
        return Mapped(dict(team_tree)).with_team_fixes(again).findings

    def apply(team_tree: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
        return apply_overrides(team_tree, overrides, any_key=True)

    run = resolve(tree)
    filled = gpu.fill(run) if gpu is not None else run
    result = validate_plain(filled, schema)
    if gpu is not None and filled is not run:
        result = at_default_gpu(result, gpu)
    result = mapped.with_team_fixes(result)
    result = verified(tree, result, apply=apply, revalidate=revalidate)
    return mapped.with_team_paths(result)
