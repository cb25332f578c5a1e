"""scripts/check-figures.py: the documented ratios are parsed from the benchmarks' own tables
pasted in the docs, compared with a rerun's within the block's margin. The benchmarks
themselves are not run here (they are not tests); a stand-in command prints a table."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import REPO


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_figures", REPO / "scripts/check-figures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_figures"] = module
    spec.loader.exec_module(module)
    return module


cf = load()

TABLE = """\
| sweep | points | fast path per point | fast vs compose |
|---|---:|---:|---:|
| mostly-passing | 1000 | 6.76 ms | 28.0x |
| mostly-failing | 1000 | 11.43 ms | 20.0x |
"""


def printer(tmp_path: Path, passing: str, failing: str) -> str:
    """A stand-in benchmark: prints a machine line and the table with the given ratios."""
    out = TABLE.replace("28.0x", passing).replace("20.0x", failing).replace("6.76", "9.99")
    script = tmp_path / "bench.py"
    script.write_text(f"import sys\nprint('2 CPUs, loaded')\nprint()\nprint({out!r})\n")
    return f"python {script}"


def doc(tmp_path: Path, command: str, margin: int = 25) -> Path:
    page = tmp_path / "page.md"
    page.write_text(
        f"Some text.\n\n<!-- figures: {command} | quick: --quick | margin: {margin}% -->\n"
        f"Measured on the 2-core box.\n\n{TABLE}<!-- /figures -->\n\nMore text.\n"
    )
    return page


def test_ratio_cells_are_read_by_row_and_column(tmp_path: Path) -> None:
    (block,) = cf.blocks(doc(tmp_path, "python x.py"))
    assert block.command == "python x.py" and block.quick == "--quick"
    assert block.margin == pytest.approx(0.25)
    assert cf.ratios(block.table) == {
        ("mostly-passing", "fast vs compose"): 28.0,
        ("mostly-failing", "fast vs compose"): 20.0,
    }


def test_within_the_margin_passes_and_absolute_cells_are_not_compared(tmp_path: Path) -> None:
    # 24x and 23x are within 25 % of 28x and 20x; the ms cells differ and do not count
    page = doc(tmp_path, printer(tmp_path, "24.0x", "23.0x"))
    assert cf.main([str(page)]) == 0


def test_a_drifted_ratio_fails_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = doc(tmp_path, printer(tmp_path, "9.2x", "21.0x"))
    assert cf.main([str(page)]) == 1
    err = capsys.readouterr().err
    assert "mostly-passing / fast vs compose: documented 28x, measured 9.2x" in err
    assert "mostly-failing" not in err


def test_the_quick_options_are_passed(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys\n"
        "ratio = '28.0x' if sys.argv[1:] == ['--quick'] else '1.0x'\n"
        f"print({TABLE!r}.replace('28.0x', ratio))\n"
    )
    assert cf.main([str(doc(tmp_path, f"python {script}"))]) == 0


@pytest.mark.parametrize(
    ("marker", "phrase"),
    [
        ("<!-- figures: python x.py -->", "must read"),
        ("<!-- figures: python x.py | quick: | margin: ten% -->", "must read"),
    ],
)
def test_malformed_markers_are_refused(tmp_path: Path, marker: str, phrase: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{marker}\n{TABLE}<!-- /figures -->\n")
    with pytest.raises(cf.FigureError, match=phrase):
        cf.blocks(page)


def test_a_marker_in_a_code_block_is_an_example(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"```text\n<!-- figures: python x.py -->\n{TABLE}<!-- /figures -->\n```\n")
    assert cf.blocks(page) == []


def test_a_benchmark_without_the_documented_table_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = doc(tmp_path, f"python -c {'print(1)'!r}")
    assert cf.main([str(page)]) == 2
    assert "printed no table with the header" in capsys.readouterr().err


def test_a_failing_benchmark_is_an_error(tmp_path: Path) -> None:
    page = doc(tmp_path, "python -c 'raise SystemExit(3)'")
    assert cf.main([str(page)]) == 2


def test_every_block_in_the_docs_names_a_benchmark_with_its_quick_mode() -> None:
    found = [
        b for f in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))] for b in cf.blocks(f)
    ]
    assert found, "no figures block in the docs"
    for block in found:
        argv = block.argv()
        script = REPO / argv[1]
        assert script.is_file() and script.parent.name == "benchmarks", block.where()
        for option in re.findall(r"--[\w-]+", block.quick):
            assert option in script.read_text(), (block.where(), option)
        assert cf.ratios(block.table), block.where()
        assert 0 < block.margin <= 1
