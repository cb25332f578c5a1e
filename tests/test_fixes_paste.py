"""Every fix the text report prints pastes: over a corpus of failing configs (the shipped
``conf/`` with overrides, and native LitGPT / Axolotl / TRL / torchtune files), each ``fix:``
line of ``cfgcheck check`` is pasted, as printed, after the same command line: ``bash -c`` turns
the line into the command's words for real (quoting, word splitting, globbing, as a terminal
does), and cfgcheck's command line (``cfgcheck.cli.main``, what the ``cfgcheck`` script runs)
gets those words, in this process: a fresh process per paste made this file the slowest of the
suite, and the installed command is run by tests/test_cli.py and tests/test_docs_examples.py.
The finding must be gone and no new error appear (gpu-memory included). Native fixes must be
written in the format's keys and flags, never in cfgcheck's."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
from functools import cache

import pytest

from cfgcheck.cli import main
from cfgcheck.findings import Finding
from cfgcheck.fixcheck import new_errors
from tests.conftest import REPO
from tests.sources.support import example
from tests.test_fixes_corpus import CORPUS

pytestmark = pytest.mark.slow

NATIVE = "tests/sources/native"
TINY_LLAMA = "model_name_or_path=TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"
_TT_LORA = "llama3_2_1B_lora_single_device.yaml"
# (--from format, file, native overrides and flags): each fails with fixes to paste.
NATIVE_CORPUS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "litgpt-t4-big-batch": (
        "litgpt",
        "tiny-llama-lora.yaml",
        ("--gpu", "T4", "train.micro_batch_size=16"),
    ),
    "litgpt-quantize-mixed": ("litgpt", "llama-2-7b-qlora.yaml", ("precision=bf16-mixed",)),
    "litgpt-over-block": ("litgpt", "tiny-llama-lora.yaml", ("train.max_seq_length=4096",)),
    "litgpt-7b-lora-4090": (
        "litgpt",
        "mistral-7b-lora.yaml",
        ("--gpu", "RTX4090", "train.micro_batch_size=8"),
    ),
    "axolotl-t4": ("axolotl", "mistral-lora.yml", ("--gpu", "T4")),
    "axolotl-batch": ("axolotl", "llama-3-lora-1b.yml", ("micro_batch_size=64", "--gpu", "L4")),
    "trl-t4": ("trl", "example_config.yaml", (TINY_LLAMA, "--gpu", "T4")),
    "trl-renamed-max-length": (
        "trl",
        "example_config.yaml",
        (TINY_LLAMA, "use_peft=true", "max_seq_length=2048", "--gpu", "10"),
    ),
    **{
        f"torchtune-{name}": ("torchtune", file, args)
        for name, file, args in (
            ("t4", _TT_LORA, ("tokenizer.max_seq_len=2048", "--gpu", "T4")),
            ("collate", _TT_LORA, ("collate_fn=torch.utils.data.default_collate",)),
            ("over-context", "phi3_mini_lora_single_device.yaml", ("tokenizer.max_seq_len=8192",)),
            (
                "lora-names",
                _TT_LORA,
                ("model.lora_attn_modules=[o_proj]", "model.apply_lora_to_mlp=false"),
            ),
            ("typo", _TT_LORA, ("model.lora_rnak=16",)),
        )
    },
}
# cfgcheck's own sections: no native fix may name them (torchtune's own keys live under
# model. and tokenizer.: there only trainer. and data. are cfgcheck's).
CFGCHECK_KEY = re.compile(r"^[~+]*(trainer|tokenizer|model|data)\.")
CFGCHECK_KEY_TORCHTUNE = re.compile(r"^[~+]*(trainer|data)\.")
HEAD = re.compile(r"^(error|warning|info)\[([\w-]+)\] (.*)$")
FIX_LINE = "  fix: "


def words(line: str) -> list[str]:
    """The arguments bash gives a command typed as ``cfgcheck LINE`` in a terminal (``printf``
    prints each word it receives, NUL-terminated)."""
    proc = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {line}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"bash: {line}: {proc.stderr}"
    return proc.stdout.split("\0")[:-1]


def text_fixes(report: str) -> list[tuple[str, tuple[str, ...], str]]:
    """(rule, paths, fix fragment) of every ``fix:`` line of a text report."""
    out: list[tuple[str, tuple[str, ...], str]] = []
    head: tuple[str, tuple[str, ...]] | None = None
    for line in report.splitlines():
        match = HEAD.match(line)
        if match:
            head = (match.group(2), tuple(match.group(3).split(", ")))
        elif line.startswith(FIX_LINE) and head is not None:
            out.append((*head, line.removeprefix(FIX_LINE)))
    return out


def findings(payload: str) -> list[Finding]:
    data = json.loads(payload)
    return [
        Finding(f["rule"], f["severity"], tuple(f["paths"]), f["message"], f["hint"])
        for f in data["findings"]
    ]


def cfgcheck_check(args: str, *, as_json: bool) -> str:
    """The output of ``cfgcheck check [--format json] ARGS`` typed into bash."""
    fmt = " --format json" if as_json else ""
    argv = words(f"check{fmt} {args}")
    assert argv[0] == "check", argv
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(REPO), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's usage error
            code = e.code if isinstance(e.code, int) else 2
    assert code in (0, 1), f"cfgcheck check {args}: {err.getvalue()}"
    return out.getvalue()


@cache
def run(prefix: str) -> tuple[str, str]:
    """(text report, JSON report) of ``cfgcheck check PREFIX`` typed into bash."""
    return cfgcheck_check(prefix, as_json=False), cfgcheck_check(prefix, as_json=True)


def check_pastes(prefix: str) -> list[str]:
    """Paste every text fix of ``cfgcheck check PREFIX``; returns the fragments pasted."""
    report, payload = run(prefix)
    before = findings(payload)
    fixes = text_fixes(report)
    for rule, paths, fragment in fixes:
        after = findings(cfgcheck_check(f"{prefix} {fragment}", as_json=True))
        left = [f for f in after if (f.rule, f.paths) == (rule, paths)]
        assert not left, f"{prefix} {fragment}: leaves {rule}: {left[0].message}"
        new = new_errors(before, after)
        assert not new, f"{prefix} {fragment}: adds {new[0].rule}: {new[0].message}"
    return [fragment for _, _, fragment in fixes]


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_every_text_fix_pastes_through_bash(case: str) -> None:
    prefix = shlex.join(CORPUS[case])
    pasted = check_pastes(prefix)
    report, _ = run(prefix)
    serious = [line for line in report.splitlines() if HEAD.match(line) and "info[" not in line]
    assert serious, f"{case}: the corpus config should fail"
    assert pasted, f"{case}: no fix printed"


@pytest.mark.parametrize("case", sorted(NATIVE_CORPUS))
def test_every_native_text_fix_pastes_in_the_native_format(case: str) -> None:
    fmt, name, args = NATIVE_CORPUS[case]
    path = example(fmt, name).relative_to(REPO)
    prefix = shlex.join(["--from", fmt, str(path), *args])
    pasted = check_pastes(prefix)
    assert pasted, f"{case}: no fix printed"
    for fragment in pasted:
        words = shlex.split(fragment)
        own = CFGCHECK_KEY_TORCHTUNE if fmt == "torchtune" else CFGCHECK_KEY
        assert not [w for w in words if own.match(w)], f"{case}: {fragment}"
        assert "trainer.loss_chunking" not in fragment and "trainer.gpu" not in fragment


def test_a_value_with_shell_and_hydra_characters_pastes() -> None:
    """pad = eos on Llama 3: ``<|end_of_text|>`` must be quoted for Hydra and for the shell."""
    prefix = (
        "model=llama-3-8b tokenizer=llama-3 tokenizer.pad_token=null tokenizer.pad_token_id=null"
    )
    report, _ = run(prefix)
    fragments = [f for rule, _, f in text_fixes(report) if rule == "pad-token-missing"]
    assert "\"tokenizer.pad_token='<|end_of_text|>'\" tokenizer.pad_token_id=128001" in fragments
    check_pastes(prefix)
