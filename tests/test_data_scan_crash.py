"""data-longer-than-block-size, reproduced: the config passes `cfgcheck check` (max_seq_length
equals block_size), but with truncation off one real sample is longer than the model's
block size; the scan names it, and the real model fails on exactly that sample.

LitGPT is not installed here; transformers' GPT-2 has the same hard limit (learned position
embeddings with block_size rows), so the longest sample fails with torch's "IndexError: index
out of range in self" where LitGPT says "Cannot attend to N, block size is only B"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import cfgcheck  # noqa: E402
from cfgcheck.data import scan_dataset, scan_findings  # noqa: E402
from tests.crash.support import TEXTS, gpt2, run_config, tokenizer_folder  # noqa: E402

pytestmark = pytest.mark.crash


def setup(tmp_path: Path, truncation: bool) -> tuple[cfgcheck.RunConfig, Any, list[int]]:
    folder, tok = tokenizer_folder(tmp_path / "tok")
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    lengths = [len(tok(t)["input_ids"]) for t in TEXTS]
    block = sorted(lengths)[-2] + 1  # only the longest sample is longer
    cfg = run_config(
        folder,
        tok,
        model={"block_size": block},
        data={
            "max_seq_length": block,
            "truncation": truncation,
            "paths": [str(data)],
            "format": "jsonl",
            "text_field": "text",
        },
    )
    result = cfgcheck.validate(cfg)
    assert result.ok and result.config is not None, result.findings  # the rules see no problem
    return result.config, tok, lengths


def test_the_scan_names_the_sample_that_crashes_the_model(tmp_path: Path) -> None:
    run, tok, lengths = setup(tmp_path, truncation=False)
    longest = max(lengths)
    (f,) = [f for f in scan_findings(scan_dataset(run), run) if f.severity == "error"]
    assert f.rule == "data-longer-than-block-size"
    assert f"d.jsonl:{lengths.index(longest) + 1}" in f.message
    assert f"Cannot attend to {longest}, block size is only {run.model.block_size}" in f.message

    model = gpt2(run.model)
    kwargs = {"truncation": run.data.truncation, "max_length": run.data.effective_max_length}
    with torch.no_grad():
        for text, n in zip(TEXTS, lengths, strict=True):
            ids = torch.tensor([tok(text, **kwargs)["input_ids"]])
            if n <= run.model.block_size:
                assert model(input_ids=ids).logits.shape[1] == n
            else:
                with pytest.raises(IndexError, match=r"^index out of range in self$"):
                    model(input_ids=ids)


def test_with_truncation_every_sample_runs(tmp_path: Path) -> None:
    run, tok, _ = setup(tmp_path, truncation=True)
    assert not [f for f in scan_findings(scan_dataset(run), run) if f.severity == "error"]
    model = gpt2(run.model)
    kwargs = {"truncation": True, "max_length": run.data.effective_max_length}
    with torch.no_grad():
        for text in TEXTS:
            ids = torch.tensor([tok(text, **kwargs)["input_ids"]])
            assert ids.shape[1] <= run.model.block_size
            model(input_ids=ids)
