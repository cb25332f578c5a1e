"""A real training pipeline written for the tests, independently of ``cfgcheck.runtime`` and
``cfgcheck.pipeline``: ``PreTrainedTokenizerFast`` from a real tokenizer folder, one tokenizer call
per sample, torch's ``default_collate`` / transformers' ``DataCollatorWithPadding`` / a packing
collator written here, a ``LlamaForCausalLM`` of the shape, LitGPT's block-size guard, and
forward + backward + AdamW on every batch. Used by the differential test and the crash tests of
the pipeline rules."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.factories import bpe, save_folder

# --- tokenizers -----------------------------------------------------------------------------
# "pad": <pad> is a special token and tokenizer_config.json's pad_token.
# "nopad": no pad token (unk and eos exist).
# "section": no pad in tokenizer_config.json, only in tokenizer.json's "padding" section.
# "bare": no pad and no unk token in the config (a declared pad missing from the vocabulary
#         then gets no id at all).
TOKENIZERS = ("pad", "nopad", "section", "bare")


def build_tokenizers(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    with_pad = ("<unk>", "<s>", "</s>", "<pad>")
    out["pad"] = save_folder(bpe(special=with_pad), root / "pad", pad_token="<pad>")
    out["nopad"] = save_folder(bpe(), root / "nopad")
    section = bpe(special=with_pad)
    section.enable_padding(pad_id=3, pad_token="<pad>")
    out["section"] = save_folder(section, root / "section")
    out["bare"] = save_folder(bpe(), root / "bare", unk_token=None)
    return out


# --- generated cases ------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    tokenizer: str
    declared_pad: str | None
    padding: str
    truncation: bool
    max_seq_length: int
    max_length: int | None
    pad_to_multiple_of: int | None
    collator: str
    micro_batch_size: int
    block_size: int
    texts: tuple[str, ...]
    shape: tuple[int, int, int | None] = (32, 2, None)  # n_embd, n_head, explicit head_size


def load_tokenizer(folder: Path, declared_pad: str | None) -> Any:
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    tok.padding_side = "right"
    if declared_pad is not None:
        tok.pad_token = declared_pad  # what a training script does with the config's value
    return tok


def pack(features: list[dict[str, Any]], length: int, pad_id: int | None) -> dict[str, Any]:
    """Concatenate the real tokens of the batch into rows of ``length``; the last row is
    filled with the pad id (labels -100), as a packing collator does."""
    import torch

    ids: list[int] = []
    for f in features:
        ids += [i for i, m in zip(f["input_ids"], f["attention_mask"], strict=True) if m]
    fill = -len(ids) % length
    labels = ids + [-100] * fill
    rows = torch.tensor(ids + [pad_id] * fill)  # a None pad id fails here
    return {"input_ids": rows.view(-1, length), "labels": torch.tensor(labels).view(-1, length)}


def real_step(case: Case, folder: Path) -> str | None:
    """Run the pipeline; None when every batch trained, else the error."""
    import torch
    from torch.utils.data import default_collate
    from transformers import DataCollatorWithPadding, LlamaConfig, LlamaForCausalLM

    try:
        tok = load_tokenizer(folder, case.declared_pad)
        kwargs = {
            "padding": {"do_not_pad": False}.get(case.padding, case.padding),
            "truncation": case.truncation,
            "max_length": case.max_length or case.max_seq_length,
            "pad_to_multiple_of": case.pad_to_multiple_of,
        }
        features = [dict(tok(t, **kwargs)) for t in case.texts]
        torch.manual_seed(0)
        n_embd, n_head, head_size = case.shape
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=n_embd,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=n_head,
            num_key_value_heads=n_head,
            head_dim=head_size or n_embd // n_head,
            max_position_embeddings=case.block_size,
            pad_token_id=None,
            bos_token_id=None,
            eos_token_id=None,
        )
        model = LlamaForCausalLM(config)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        padder = DataCollatorWithPadding(tok, pad_to_multiple_of=case.pad_to_multiple_of)
        for start in range(0, len(features), case.micro_batch_size):
            chunk = features[start : start + case.micro_batch_size]
            if case.collator == "packed":
                batch = pack(chunk, case.max_seq_length, tok.pad_token_id)
            else:
                if case.collator == "default":
                    batch = default_collate(
                        [{k: torch.tensor(v) for k, v in f.items()} for f in chunk]
                    )
                else:
                    batch = dict(padder(chunk))
                labels = batch["input_ids"].clone()
                labels[batch["attention_mask"] == 0] = -100
                batch["labels"] = labels
            batch.pop("token_type_ids", None)
            t = batch["input_ids"].shape[1]
            if t > case.block_size:  # LitGPT's guard (litgpt/model.py, GPT.forward)
                raise ValueError(f"Cannot attend to {t}, block size is only {case.block_size}")
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    except Exception as e:  # the verdict is "it crashed"; the reason is shown on disagreement
        return f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
    return None


def run_config(case: Case, folder: Path, data_file: Path) -> dict[str, Any]:
    tok = load_tokenizer(folder, case.declared_pad)
    data: dict[str, Any] = {
        "max_seq_length": case.max_seq_length,
        "padding": case.padding,
        "truncation": case.truncation,
        "collator": case.collator,
        "paths": [str(data_file)],
        "format": "jsonl",
    }
    if case.max_length is not None:
        data["max_length"] = case.max_length
    if case.pad_to_multiple_of is not None:
        data["pad_to_multiple_of"] = case.pad_to_multiple_of
    tokenizer: dict[str, Any] = {"path": str(folder)}
    if case.declared_pad is not None:
        tokenizer["pad_token"] = case.declared_pad
    n_embd, n_head, head_size = case.shape
    shape = {"n_embd": n_embd, "n_head": n_head}
    if head_size is not None:
        shape["head_size"] = head_size
    return {
        "name": "diff",
        "model": {
            "name": "tiny",
            "block_size": case.block_size,
            "vocab_size": len(tok),
            "n_layer": 1,
            **shape,
            "intermediate_size": 64,
        },
        "tokenizer": tokenizer,
        "data": data,
        "trainer": {"micro_batch_size": case.micro_batch_size, "precision": "32-true"},
    }


def apply_overrides(cfg: dict[str, Any], overrides: tuple[str, ...]) -> dict[str, Any]:
    """Plain ``key=value`` overrides on a copy of ``cfg`` (values parsed as YAML scalars)."""
    import yaml

    out = json.loads(json.dumps(cfg))
    for item in overrides:
        key, _, raw = item.partition("=")
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = yaml.safe_load(raw)
    return out


def case_of(cfg: dict[str, Any], base: Case) -> Case:
    """The case a (fixed) run config describes; texts and tokenizer from ``base``."""
    d, m = cfg["data"], cfg["model"]
    return Case(
        tokenizer=base.tokenizer,
        declared_pad=cfg["tokenizer"].get("pad_token"),
        padding=d.get("padding", "longest"),
        truncation=d.get("truncation", True),
        max_seq_length=d["max_seq_length"],
        max_length=d.get("max_length"),
        pad_to_multiple_of=d.get("pad_to_multiple_of"),
        collator=d.get("collator", "padded"),
        micro_batch_size=cfg["trainer"]["micro_batch_size"],
        block_size=m["block_size"],
        texts=base.texts,
        shape=(m["n_embd"], m["n_head"], m.get("head_size")),
    )
