"""Cold start: ``cfgcheck check`` with a real tokenizer file imports neither torch nor
transformers (2-3 s of imports); the wall-time comparison is benchmarks/cold_start.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.factories import bpe, save_file, save_folder

HEAVY = ("torch", "transformers")

# Runs the real CLI entry point, then reports which heavy modules got imported.
PROBE = f"""
import json, sys
from cfgcheck.cli import main
rc = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
sys.stderr.write("\\nPROBE " + json.dumps({{"rc": rc, "heavy": heavy}}) + "\\n")
"""


def probe(*args: str, prelude: str = "") -> tuple[dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-c", prelude + PROBE, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    marker = [line for line in proc.stderr.splitlines() if line.startswith("PROBE ")]
    assert marker, proc.stderr
    result: dict[str, Any] = json.loads(marker[-1].removeprefix("PROBE "))
    return result, proc.stdout


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A real byte-level BPE tokenizer whose special ids match conf/tokenizer/llama-2.yaml
    (<unk>=0, <s>=1, </s>=2, pad=<unk>)."""
    tok = bpe(special=("<unk>", "<s>", "</s>"))
    folder = save_folder(tok, tmp_path_factory.mktemp("tok"), pad_token="<unk>")
    assert (tok.token_to_id("<unk>"), tok.token_to_id("<s>"), tok.token_to_id("</s>")) == (0, 1, 2)
    return folder, tok.get_vocab_size()


@pytest.mark.parametrize("fmt", ["text", "json", "github"])
def test_check_with_a_tokenizer_folder_imports_neither(
    tokenizer_dir: tuple[Path, int], fmt: str
) -> None:
    folder, size = tokenizer_dir
    sizes = [f"tokenizer.vocab_size={size}", f"model.vocab_size={size}"]
    result, out = probe("check", "--format", fmt, f"+tokenizer.path={folder}", *sizes)
    assert result == {"rc": 0, "heavy": []}, out


def test_check_that_reads_the_file_and_finds_a_mismatch_imports_neither(
    tokenizer_dir: tuple[Path, int], tmp_path: Path
) -> None:
    _folder, size = tokenizer_dir
    lone = save_file(bpe(special=("<unk>", "<s>", "</s>")), tmp_path / "lone")
    declared = [f"tokenizer.vocab_size={size + 1}", f"model.vocab_size={size}"]
    result, out = probe("check", "--format", "json", f"+tokenizer.path={lone}", *declared)
    assert result == {"rc": 1, "heavy": []}
    rules = {f["rule"] for f in json.loads(out)["findings"]}
    # The finding needs the real file's size: proof that the tokenizer was read.
    assert "tokenizer-declared-mismatch" in rules, out


def test_probe_sees_heavy_imports_when_they_happen(tmp_path: Path) -> None:
    """The probe is not blind: an import of torch before the command shows up."""
    pytest.importorskip("torch")
    result, _ = probe("schema", "--out", str(tmp_path), prelude="import torch\n")
    assert result["rc"] == 0 and "torch" in result["heavy"]
