"""The LLaMA-Factory adapter against the real code LLaMA-Factory runs (it does not install
here without changing transformers, so its own pieces are reproduced with the libraries it
calls): transformers' HfArgumentParser.parse_dict (how it refuses unknown keys),
DataCollatorForSeq2Seq (its SFT collator's base class, train/sft/workflow.py), PEFT's target
matching (adapter.py hands lora_target to get_peft_model), and a tiny Llama on CPU for packing
without neat_packing and for cutoff_len past max_position_embeddings."""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest

from tests.conftest import requires

pytestmark = requires("torch", "transformers")


def tiny_llama(max_positions: int = 64) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
    )
    return LlamaForCausalLM(config).eval()


def test_parse_dict_refuses_a_key_no_dataclass_has() -> None:
    # hparams/parser.py _parse_args: parser.parse_dict(args, allow_extra_keys=False)
    from transformers import HfArgumentParser, Seq2SeqTrainingArguments

    @dataclasses.dataclass
    class DataArguments:  # the one field of LLaMA-Factory's DataArguments this test needs
        cutoff_len: int = 2048

    parser = HfArgumentParser([DataArguments, Seq2SeqTrainingArguments])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="Some keys are not used by the HfArgumentParser"):
            parser.parse_dict({"output_dir": "out", "cutoff_length": 4096, "use_cpu": True})
        data, _ = parser.parse_dict({"output_dir": "out", "cutoff_len": 4096, "use_cpu": True})
    assert data.cutoff_len == 4096


def test_the_sft_collator_masks_labels_by_position_and_needs_a_pad_token() -> None:
    # Why pad-is-eos and pad-token-missing do not apply: DataCollatorForSeq2Seq pads labels with
    # label_pad_token_id=IGNORE_INDEX by position, and LLaMA-Factory sets pad = eos
    # (data/template.py fix_special_tokens) because the collator cannot pad without one.
    from tokenizers import Tokenizer, models
    from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<eos>": 1, "a": 2, "b": 3}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
        eos_token="<eos>",
    )
    features = [
        {"input_ids": [2, 3, 1], "labels": [2, 3, 1]},
        {"input_ids": [2, 1], "labels": [2, 1]},
    ]
    with pytest.raises(ValueError, match="padding token"):
        DataCollatorForSeq2Seq(tok, label_pad_token_id=-100)([dict(f) for f in features])
    tok.pad_token = tok.eos_token  # what fix_special_tokens does
    collator = DataCollatorForSeq2Seq(tok, label_pad_token_id=-100, pad_to_multiple_of=8)
    batch = collator([dict(f) for f in features])
    assert batch["input_ids"].shape == (2, 8)  # the longest (3) rounded up to 8
    assert batch["labels"][1].tolist()[:2] == [2, 1]  # the real eos keeps its label
    assert batch["labels"][1].tolist()[2:] == [-100] * 6  # padding is masked by position


def test_packing_without_neat_packing_lets_samples_attend_to_each_other() -> None:
    # data/processor/supervised.py packs samples into one row with an all-ones mask unless
    # neat_packing; data/collator.py then builds the block-diagonal 4D mask
    import torch

    model = tiny_llama()
    first, second = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[9, 10, 11]])
    packed = torch.cat([first, second], dim=1)
    with torch.no_grad():
        alone = model(second).logits[0]
        plain = model(packed, attention_mask=torch.ones_like(packed)).logits[0, 4:]
        # neat_packing: the second sample sees only itself (and restarts its positions)
        block = torch.full((1, 1, 7, 7), torch.finfo(torch.float32).min)
        for lo, hi in ((0, 4), (4, 7)):
            block[0, 0, lo:hi, lo:hi] = torch.triu(
                torch.full((hi - lo, hi - lo), torch.finfo(torch.float32).min), diagonal=1
            )
        positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2]])
        neat = model(packed, attention_mask=block, position_ids=positions).logits[0, 4:]
    assert not torch.allclose(plain, alone, atol=1e-4)  # contaminated by the first sample
    assert torch.allclose(neat, alone, atol=1e-5)


def test_cutoff_len_past_the_context_trains_without_an_error_on_a_rope_model() -> None:
    # Why seq-len-over-block-size is a warning for LLaMA-Factory: without rope_scaling it
    # leaves max_position_embeddings alone, and a RoPE model computes any position.
    import torch

    model = tiny_llama(max_positions=16)
    ids = torch.randint(0, 64, (1, 40))
    model.train()
    loss = model(ids, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)


@requires("peft")
def test_lora_target_all_and_a_wrong_target_in_peft() -> None:
    from peft import LoraConfig, get_peft_model

    model = tiny_llama()
    # model_utils/misc.py find_all_linear_modules: the last name of every module whose class
    # name has "Linear" (not "Embedding"), lm_head excluded
    found = {
        name.split(".")[-1]
        for name, module in model.named_modules()
        if "lm_head" not in name
        and "Linear" in module.__class__.__name__
        and "Embedding" not in module.__class__.__name__
    }
    assert found == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    # ... which is what PEFT's all-linear adapts (cfgcheck maps lora_target: all onto it)
    peft_all = get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules="all-linear"))
    adapted = {n.split(".")[-1] for n, m in peft_all.named_modules() if hasattr(m, "lora_A")}
    assert adapted == found
    with pytest.raises(ValueError, match="not found in the base model"):
        get_peft_model(tiny_llama(), LoraConfig(r=2, target_modules=["query_key_value"]))
