"""Python code as parsed units: a script is one unit, a notebook's code cells are units.

Every byte goes through :mod:`cfgcheck.safeio` (a regular file, bounded size, UTF-8; a
notebook's JSON nesting and node count bounded before and after ``json.loads``). A notebook's
IPython syntax is blanked line by line, so line numbers stay those of the cell:

- a cell magic (``%%capture``, ``%%time``) on a cell's first line: the line is dropped and the
  body stays Python; a cell magic whose body is not Python (``%%bash``, ``%%writefile``,
  ``%%html`` ...) drops the whole cell;
- line magics and shell lines (``%pip install``, ``!pip install``, ``x = !ls``) become
  ``pass`` at their indentation (so an ``if`` whose body is only ``!pip`` still parses).

Each unit is parsed with :func:`ast.parse`; a syntax error is one line naming the file (and
cell) and line. The tree's depth and size are bounded before anything walks it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cfgcheck import safeio
from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import Location

MAX_BYTES = 8_000_000  # published notebooks with outputs and widget state run to ~1 MB
MAX_CELLS = 5_000
MAX_AST_NODES = 300_000
MAX_AST_DEPTH = 100
_NOTEBOOK_LIMITS = safeio.Limits(max_bytes=MAX_BYTES, max_depth=64, max_nodes=3_000_000)

# Cell magics whose body is not Python (IPython's built-in cell magics).
_NON_PYTHON_MAGICS = frozenset(
    {
        "bash",
        "sh",
        "script",
        "writefile",
        "file",
        "html",
        "HTML",
        "javascript",
        "js",
        "latex",
        "markdown",
        "perl",
        "ruby",
        "svg",
        "sql",
        "system",
    }
)
_SHELL_LINE = re.compile(r"^(\s*)(?:[%!]|[A-Za-z_][\w, ]*=\s*[%!])")


@dataclass(frozen=True)
class Unit:
    """One parsed piece of code: a script, or a notebook's code cell (``cell`` 0-based over
    all cells, markdown ones included, as Jupyter numbers them)."""

    tree: ast.Module
    source: str
    cell: int | None = None


@dataclass(frozen=True)
class CodeFile:
    """A script or a notebook as parsed units, with the notebook's metadata."""

    file: str  # as shown to the user
    units: tuple[Unit, ...]
    notebook: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    # The raw notebook JSON (cells included), kept so an edited copy can be written back.
    raw: dict[str, Any] | None = None

    def location(self, unit: Unit, line: int | None) -> Location:
        return Location(self.file, line, unit.cell)

    @property
    def gpu(self) -> str | None:
        """The GPU the notebook's metadata names (Colab's ``accelerator`` / ``gpuType``)."""
        colab = self.metadata.get("colab")
        gpu = colab.get("gpuType") if isinstance(colab, dict) else None
        return gpu if isinstance(gpu, str) and gpu.strip() else None


def read_code(path: str | Path, shown: str | None = None) -> CodeFile:
    """Read a ``.py`` script or an ``.ipynb`` notebook (by suffix; a body starting with ``{``
    is read as a notebook too). Raises :class:`ConfigLoadError` (one line) when it cannot."""
    display = shown or str(path)
    text = safeio.read_text(path, MAX_BYTES)
    return parse_code(text, display, notebook=Path(path).suffix == ".ipynb" or None)


def parse_code(text: str, shown: str, notebook: bool | None = None) -> CodeFile:
    """:func:`read_code` of text in memory; ``notebook=None`` guesses from the text."""
    if notebook is None:
        notebook = shown.endswith(".ipynb") or text.lstrip().startswith("{")
    if notebook:
        return _parse_notebook(text, shown)
    return CodeFile(shown, (_parse_unit(text, shown, None),))


def _parse_notebook(text: str, shown: str) -> CodeFile:
    try:
        data = safeio.load_json_text(text, shown, _NOTEBOOK_LIMITS)
    except safeio.UnsafeInput as e:
        raise ConfigLoadError(f"{shown} is not a notebook: {e}") from e
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        raise ConfigLoadError(f"{shown} is not a notebook: no list of cells (nbformat 4)")
    if len(cells) > MAX_CELLS:
        raise ConfigLoadError(f"{shown}: more than {MAX_CELLS} cells; not read")
    units: list[Unit] = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if not isinstance(source, str):
            raise ConfigLoadError(f"{shown}, cell {index}: its source is not text")
        python = python_of_cell(source)
        if python is not None:
            units.append(_parse_unit(python, shown, index))
    metadata = data.get("metadata")
    return CodeFile(shown, tuple(units), True, metadata if isinstance(metadata, dict) else {}, data)


def python_of_cell(source: str) -> str | None:
    """The cell's Python with IPython syntax blanked (see the module), or None for a cell
    that is not Python at all."""
    lines = source.split("\n")
    first = lines[0].strip() if lines else ""
    if first.startswith("%%"):
        magic = first[2:].split()[0] if first[2:].split() else ""
        if magic in _NON_PYTHON_MAGICS:
            return None
        lines[0] = ""
    out: list[str] = []
    continued = False
    for line in lines:
        if continued:  # the rest of a shell line continued with a backslash
            continued = line.rstrip().endswith("\\")
            out.append("")
            continue
        match = _SHELL_LINE.match(line)
        if match:
            continued = line.rstrip().endswith("\\")
            out.append(f"{match.group(1)}pass")
            continue
        out.append(line)
    return "\n".join(out)


def _parse_unit(source: str, shown: str, cell: int | None) -> Unit:
    where = shown if cell is None else f"{shown}, cell {cell}"
    try:
        tree = ast.parse(source, filename=where)
    except SyntaxError as e:
        line = f", line {e.lineno}" if cell is not None else f":{e.lineno}"
        raise ConfigLoadError(
            f"{where}{line if e.lineno else ''}: invalid Python: {e.msg}; the file is read, "
            "never run, so it must parse"
        ) from e
    except (RecursionError, MemoryError, ValueError) as e:
        raise ConfigLoadError(f"{where}: code nested too deeply to read; not read") from e
    _bound(tree, where)
    return Unit(tree, source, cell)


def _bound(tree: ast.AST, where: str) -> None:
    """Refuse a tree deeper than MAX_AST_DEPTH or larger than MAX_AST_NODES (no recursion)."""
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_AST_NODES:
            raise ConfigLoadError(f"{where}: more than {MAX_AST_NODES} syntax nodes; not read")
        if depth > MAX_AST_DEPTH:
            line = getattr(node, "lineno", None)
            at = f" (line {line})" if line else ""
            raise ConfigLoadError(
                f"{where}: code nested deeper than {MAX_AST_DEPTH} levels{at}; not read"
            )
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
