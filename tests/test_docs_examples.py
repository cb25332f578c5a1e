"""Every console example of the README and docs/ is run for real and its output compared.

A ```console block holds one or more ``$ command`` lines (a line ending with ``\\`` continues
on the next), each followed by the output it prints, stdout and stderr together. The test runs
each command with bash in the repository root, as a user who followed the README would (the
installed ``cfgcheck``, this checkout's code), and compares the output exactly, after
normalising only what changes from machine to machine: the repository's absolute path,
temporary folders and timings. An example whose output changed fails, so no example can drift.

After a deliberate change of output, refresh every example with
``python -m tests.test_docs_examples --update`` and review the diff.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Examples that take more than a few seconds (a full memory estimate over a sweep).
SLOW = ("examples/train.py -m",)


@dataclass(frozen=True)
class Example:
    file: Path
    line: int  # 1-based line of the command
    command: str
    expected: str
    span: tuple[int, int]  # lines of the expected output, [start, end) 0-based

    @property
    def id(self) -> str:
        return f"{self.file.relative_to(REPO)}:{self.line}"


def examples(path: Path) -> list[Example]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Example] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            if not lines[i].startswith("$ "):
                raise AssertionError(f"{path}:{i + 1}: console block text before a `$ ` line")
            start = i
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + "\n" + lines[i]
            i += 1
            out_start = i
            while i < len(lines) and lines[i].strip() != "```" and not lines[i].startswith("$ "):
                i += 1
            expected = "\n".join(lines[out_start:i])
            found.append(Example(path, start + 1, command, expected, (out_start, i)))
        i += 1
    return found


ALL = [e for f in DOC_FILES for e in examples(f)]


def environment(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(REPO),
        NO_COLOR="1",
        CFGCHECK_NO_LIVE_GPU="1",
        CFGCHECK_CACHE_DIR=str(tmp / "cache"),
        HF_HUB_CACHE=str(tmp / "hf-cache"),
        HF_HUB_OFFLINE="1",
    )
    return env


def paths(text: str, tmp: Path) -> str:
    """The repository's absolute path as relative paths, a temporary folder as $TMP."""
    text = text.replace(str(REPO) + os.sep, "").replace(str(REPO), ".")
    text = text.replace(str(tmp), "$TMP")
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def normalise(text: str, tmp: Path) -> str:
    """Paths, then timings: (0.01 s), 1.2s."""
    return re.sub(r"\b\d+\.\d+ ?s\b", "N s", paths(text, tmp))


def run(example: Example, tmp: Path) -> str:
    proc = subprocess.run(
        ["bash", "-c", example.command],
        cwd=REPO,
        env=environment(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )
    return paths(proc.stdout, tmp)


def _param(e: Example) -> object:
    slow = any(s in e.command for s in SLOW)
    return pytest.param(e, id=e.id, marks=[pytest.mark.slow] if slow else [])


def test_examples_are_found() -> None:
    assert len(ALL) >= 15, [e.id for e in ALL]
    assert any(e.file.name == "README.md" for e in ALL)


@pytest.mark.parametrize("example", [_param(e) for e in ALL])
def test_console_example_prints_what_the_docs_show(example: Example, tmp_path: Path) -> None:
    got = normalise(run(example, tmp_path), tmp_path)
    want = normalise(example.expected, tmp_path)
    assert got == want, (
        f"{example.id}: `{example.command}` prints something else; if the change is meant, "
        "run `python -m tests.test_docs_examples --update` and review the diff"
    )


def update() -> None:
    """Rewrite every example's expected output with what its command prints today."""
    for path in DOC_FILES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for e in reversed(examples(path)):
            with tempfile.TemporaryDirectory() as tmp:
                got = run(e, Path(tmp))
            lines[e.span[0] : e.span[1]] = got.splitlines() if got else []
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python -m tests.test_docs_examples --update")
    update()


def test_readme_is_a_landing_page_whose_set_up_is_what_ci_runs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 280
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    commands = [c.strip() for block in blocks for c in block.strip().splitlines()]
    assert commands == [
        'pip install torch==2.13.0 && pip install -e ".[all]" && cfgcheck check',
        'python -m pytest -q -m "not slow"',
    ]
    for part in commands[0].split(" && "):
        assert f"\n{part}\n" in ci, part
    assert f"\n{commands[1]}\n" in ci and "\npython -m pytest -q -m slow\n" in ci
    assert "\nmkdocs build --strict" in ci
