"""The TRL adapter feeds SFTTrainer's dataset preparation into the scan: the EOS it appends
to text (``data.add_eos``), ``completion_only_loss`` and ``assistant_only_loss`` (with the
``messages`` column it reads), located at their keys; the scan of the mapped config counts
what TRL's own ``_prepare_dataset`` makes of the same records."""

from __future__ import annotations

from pathlib import Path

import pytest

from cfgcheck.sources import load_native
from tests.sources.support import is_default, line_of, write

TINY = "model_name_or_path: TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T\n"


def test_sft_data_keys_map_and_are_located(tmp_path: Path) -> None:
    text = TINY + "assistant_only_loss: true\ncompletion_only_loss: false\n"
    file = write(tmp_path, "sft.yaml", text)
    loaded = load_native(file, "trl")
    d, smap = loaded.config["data"], loaded.source_map
    assert (d["add_eos"], d["completion_only_loss"], d["assistant_only_loss"]) == (
        True,
        False,
        True,
    )
    assert d["messages_field"] == "messages"
    for path, key in (
        ("data.assistant_only_loss", "assistant_only_loss"),
        ("data.completion_only_loss", "completion_only_loss"),
    ):
        location = smap.lookup(path)
        assert location is not None and location.line == line_of(file, key), path
    assert is_default(smap.lookup("data.add_eos"), "TRL")
    plain = load_native(write(tmp_path, "min.yaml", TINY), "trl").config["data"]
    assert plain["add_eos"] is True
    assert not {"completion_only_loss", "assistant_only_loss", "messages_field"} & set(plain)


@pytest.mark.slow  # datasets, transformers and TRL load
def test_the_mapped_sft_config_scans_text_as_trl_prepares_it(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    import cfgcheck
    from cfgcheck.data import scan_dataset
    from tests.test_data_scan import write_jsonl
    from tests.test_data_scan_completion import alpaca_records, demo_tokenizer, trl_prepared

    folder, tok = demo_tokenizer()
    rows = [{"text": r["prompt"] + r["completion"]} for r in alpaca_records()]
    path = write_jsonl(tmp_path / "lm.jsonl", rows)
    cfg = load_native(write(tmp_path, "sft.yaml", TINY + "max_length: 64\n"), "trl").config
    cfg["tokenizer"] = {"path": str(folder)}
    cfg["data"]["paths"] = [str(path)]
    run = cfgcheck.validate(cfg).config
    assert run is not None and run.data.add_eos
    report = scan_dataset(run, jobs=1)
    prepared = trl_prepared(tok, rows, None, str(tmp_path / "out"))
    ids = [r["input_ids"] for r in prepared]
    assert report.hist == {n: sum(1 for x in ids if len(x) == n) for n in {len(x) for x in ids}}
    assert report.summary.targets_fed == sum(min(len(x), 64) - 1 for x in ids)
