"""ShareGPT conversations in the scan (``data.message_role_key`` / ``message_content_key`` /
``message_roles``, ``data.assistant_mask=turns``), on records of LLaMA-Factory's own ShareGPT
demo (tests/data/sharegpt/SOURCES.md): the lengths are those of transformers'
``apply_chat_template`` over the messages as the frameworks map them, the turn masks are TRL's
``{% generation %}`` masks where the template has both, and ``--from llamafactory`` wires a
``formatting: sharegpt`` dataset_info.json entry into the scan."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from cfgcheck.data import scan_dataset
from tests.test_data_scan_jobs import _comparable
from tests.test_data_scan_report import chat_tokenizer

SAMPLE = Path(__file__).parent / "data/sharegpt/glaive_toolcall_en_demo.json"
# The template of tests/test_data_scan_report.py with a generation prompt: the assistant's
# header is the prompt, its text and </s> the {% generation %} block.
TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<s>assistant: "
    "{% generation %}{{ m['content'] }}</s>{% endgeneration %}"
    "{% else %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)
# Axolotl's default roles (ChatTemplatePrompter.__init__, src/axolotl/prompt_strategies/
# chat_template.py, axolotl commit 067b021): human -> user, gpt -> assistant, a role not listed
# kept (transform_message: roles.get(role, role)).
AXOLOTL_ROLES = {"human": "user", "user": "user", "assistant": "assistant", "gpt": "assistant"}
AXOLOTL_ROLES |= {"system": "system", "tool": "tool"}


def records() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(SAMPLE.read_text())
    return rows


def axolotl_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """ChatTemplateStrategy.transform_message with message_property_mappings
    {role: from, content: value}: each mapped property taken, the role mapped."""
    out = []
    for m in row["conversations"]:
        role = m["from"]
        out.append({"role": AXOLOTL_ROLES.get(role, role), "content": m["value"]})
    return out


def ids(tk: Any, messages: list[dict[str, Any]]) -> list[int]:
    return list(tk.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])


@pytest.fixture
def tok(tmp_path: Path) -> tuple[Path, Any]:
    folder, _ = chat_tokenizer(tmp_path / "tok")
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = TEMPLATE
    config_path.write_text(json.dumps(config))
    from transformers import AutoTokenizer

    return folder, AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def _run(tok: tuple[Path, Any], data: dict[str, Any], block: int = 8192) -> Any:
    import cfgcheck
    from tests.crash.support import run_config

    cfg = run_config(*tok, model={"block_size": block}, data={"max_seq_length": block, **data})
    result = cfgcheck.validate(cfg)
    assert result.config is not None, result.findings
    return result.config


SHAREGPT = {
    "messages_field": "conversations",
    "message_role_key": "from",
    "message_content_key": "value",
    "message_roles": AXOLOTL_ROLES,
}


def test_sharegpt_lengths_are_the_chat_template_over_the_mapped_messages(
    tok: tuple[Path, Any], tmp_path: Path
) -> None:
    rows = records()
    path = tmp_path / "glaive.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = _run(tok, {"paths": [str(path)], **SHAREGPT})
    report = scan_dataset(run, jobs=1)
    want = [len(ids(tok[1], axolotl_messages(r))) for r in rows]
    assert report.samples == len(rows)
    assert report.hist == {n: want.count(n) for n in set(want)}
    assert report.summary.targets == sum(n - 1 for n in want)  # every token a label
    # the function_call / observation roles are kept as they are (no mapping names them)
    assert {"function_call", "observation"} <= {
        m["role"] for r in rows for m in axolotl_messages(r)
    }
    assert _comparable(report) == _comparable(scan_dataset(run, jobs=2, shard_bytes=4000))


def test_turn_masks_equal_trl_generation_masks(tok: tuple[Path, Any], tmp_path: Path) -> None:
    """data.assistant_mask=turns finds the assistant's tokens by rendering the conversation
    around each assistant turn; on a template with {% generation %} marks and a generation
    prompt both ways give the same labels: transformers' assistant masks (TRL's call)."""
    rows = records()
    path = tmp_path / "glaive.json"
    path.write_text(json.dumps(rows))
    masks = []
    for r in rows:
        out = tok[1].apply_chat_template(
            axolotl_messages(r), tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        masks.append(list(out["assistant_masks"]))
    base = {"paths": [str(path)], **SHAREGPT, "assistant_only_loss": True}
    turns = scan_dataset(_run(tok, {**base, "assistant_mask": "turns"}), jobs=1)
    marks = scan_dataset(_run(tok, base), jobs=1)
    assert turns.summary.targets == marks.summary.targets == sum(sum(m[1:]) for m in masks)
    assert 0 < turns.summary.targets < sum(turns.hist[n] * (n - 1) for n in turns.hist)

    # Cut every sample before its first assistant text: no label left, located the same way.
    first = [m.index(1) for m in masks]
    cut = min(first)
    a = scan_dataset(_run(tok, {**base, "assistant_mask": "turns"}, block=cut), jobs=1)
    assert a.summary.no_targets == len(rows)


def test_turn_masks_need_no_generation_marks(tok: tuple[Path, Any], tmp_path: Path) -> None:
    from cfgcheck.data import ScanError

    folder, _ = tok
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    plain = TEMPLATE.replace("{% generation %}", "").replace("{% endgeneration %}", "")
    config["chat_template"] = plain
    config_path.write_text(json.dumps(config))
    path = tmp_path / "glaive.json"
    shutil.copy(SAMPLE, path)
    base = {"paths": [str(path)], **SHAREGPT, "assistant_only_loss": True}
    with pytest.raises(ScanError, match=r"data\.assistant_mask=turns counts each assistant"):
        scan_dataset(_run(tok, base), jobs=1)
    report = scan_dataset(_run(tok, {**base, "assistant_mask": "turns"}), jobs=1)
    assert report.summary.targets > 0


def test_a_message_without_the_role_key_names_its_record(
    tok: tuple[Path, Any], tmp_path: Path
) -> None:
    from cfgcheck.data import ScanError

    rows = records()
    rows[2]["conversations"][1] = {"role": "gpt", "value": "hi"}  # OpenAI key in ShareGPT data
    path = tmp_path / "glaive.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = _run(tok, {"paths": [str(path)], **SHAREGPT})
    with pytest.raises(ScanError, match=r"glaive\.jsonl:3: .*message 1 is not a \{from, value\}"):
        scan_dataset(run, jobs=1)


def test_llamafactory_sharegpt_entry_is_scanned_with_its_tags(
    tok: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dataset_info.json's entry for the demo (its own registration, SOURCES.md) gives the
    messages column, LLaMA-Factory's default tags (data/parser.py DatasetAttr) and labels on
    the assistant's turns (train_on_prompt=false, data/processor/supervised.py)."""
    from cfgcheck.sources import check_native, load_native
    from tests.model_folders import LLAMA32_1B, write_config

    (tmp_path / "data").mkdir()
    shutil.copy(SAMPLE, tmp_path / "data" / SAMPLE.name)
    entry = {
        "file_name": SAMPLE.name,
        "formatting": "sharegpt",
        "columns": {"messages": "conversations", "tools": "tools"},
    }
    (tmp_path / "data" / "dataset_info.json").write_text(json.dumps({"glaive": entry}))
    folder, tk = tok
    write_config(folder, {**LLAMA32_1B, "vocab_size": len(tk)})
    config = tmp_path / "sft.yaml"
    config.write_text(
        f"model_name_or_path: {folder}\nstage: sft\ndo_train: true\ndataset: glaive\n"
        "cutoff_len: 4096\nfinetuning_type: full\n"
    )
    monkeypatch.chdir(tmp_path)
    data = load_native(config, "llamafactory").config["data"]
    assert data["paths"] == [f"data/{SAMPLE.name}"]
    assert (data["messages_field"], data["message_role_key"]) == ("conversations", "from")
    assert data["message_content_key"] == "value"
    assert data["message_roles"] == {
        "human": "user",
        "gpt": "assistant",
        "observation": "tool",
        "function_call": "assistant",
        "system": "system",
    }
    assert data["assistant_only_loss"] is True and data["assistant_mask"] == "turns"
    run = check_native(config, "llamafactory").config
    assert run is not None
    report = scan_dataset(run, jobs=1)
    assert report.samples == 4
    assert 0 < report.summary.targets < sum(report.hist[n] * (n - 1) for n in report.hist)
    on_prompt = tmp_path / "prompt.yaml"
    on_prompt.write_text(config.read_text() + "train_on_prompt: true\n")
    assert "assistant_only_loss" not in load_native(on_prompt, "llamafactory").config["data"]


def test_axolotl_chat_template_dataset_is_scanned_from_the_hub_cache(
    tok: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Axolotl's own example (examples/falcon-e/falcon-e-3b-ft.yaml: ``type: chat_template``,
    ``field_messages: conversations``, ``message_property_mappings: {role: from, content:
    value}``, ``chat_template: tokenizer_default``) maps to the ShareGPT keys and a Hub dataset
    read from the local cache; the scan gives the lengths of the messages as Axolotl maps them
    and labels on the assistant's turns (roles_to_train=[assistant])."""
    from cfgcheck.sources import load_native
    from tests.sources.test_trl_dataset_cache import hub_repo

    hub = tmp_path / "hub"
    rows = records()
    text = "".join(json.dumps(r) + "\n" for r in rows)
    hub_repo(hub, "cgato/SlimOrcaDedupCleaned", {"data/train-00000-of-00001.jsonl": text})
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)
    example = Path(__file__).parent / "sources/native/axolotl/falcon-e-3b-ft.yaml"
    data = load_native(example, "axolotl").config["data"]
    assert data["hub_dataset"] == "cgato/SlimOrcaDedupCleaned" and "paths" not in data
    assert (data["messages_field"], data["message_role_key"], data["message_content_key"]) == (
        "conversations",
        "from",
        "value",
    )
    assert data["message_roles"] == AXOLOTL_ROLES
    assert data["assistant_only_loss"] is True and data["assistant_mask"] == "turns"
    keys = ("hub_dataset", "hub_split", "message_roles", "assistant_only_loss", "assistant_mask")
    mapped = {k: v for k, v in data.items() if k.startswith("message") or k in keys}
    report = scan_dataset(_run(tok, mapped), jobs=1)
    want = [ids(tok[1], axolotl_messages(r)) for r in rows]
    assert report.hist == {n: [len(x) for x in want].count(n) for n in {len(x) for x in want}}
    masks = [
        list(
            tok[1].apply_chat_template(
                axolotl_messages(r),
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
            )["assistant_masks"]
        )
        for r in rows
    ]
    assert report.summary.targets == sum(sum(m[1:]) for m in masks)


def test_a_tokenizer_without_chat_template(tok: tuple[Path, Any], tmp_path: Path) -> None:
    """TRL fails without a chat template: one error, with any number of jobs (checked before
    the workers start). LLaMA-Factory and Axolotl render with templates of their own
    (assistant_mask=turns): the scan is skipped with a warning, the run is not at fault."""
    from cfgcheck import validate
    from cfgcheck.data import ScanError
    from cfgcheck.data.check import with_scan_findings

    folder, _ = tok
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    del config["chat_template"]
    config_path.write_text(json.dumps(config))
    path = tmp_path / "glaive.json"
    shutil.copy(SAMPLE, path)
    base = {"paths": [str(path)], **SHAREGPT}
    for jobs in (1, 2):
        with pytest.raises(ScanError, match=r"needs a chat template.*TRL's SFTTrainer fails"):
            scan_dataset(_run(tok, base), jobs=jobs, shard_bytes=4000)
    turns = _run(tok, {**base, "assistant_only_loss": True, "assistant_mask": "turns"})
    result = with_scan_findings(validate(turns.model_dump()), jobs=2)
    (f,) = [f for f in result.findings if f.rule == "data-scan-skipped"]
    assert f.severity == "warning" and "has none" in f.message and "chat template" in f.hint
    assert not result.by_rule("data-unreadable")
