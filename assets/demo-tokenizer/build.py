"""Rebuild the demo tokenizer from text in this repository (nothing is downloaded).

A byte-level BPE with Llama's special-token layout (<unk>=0, <s>=1, </s>=2, no pad token;
<s> is prepended to every sequence), trained on datasets/alpaca-tiny.jsonl.
It gives real token counts for `cfgcheck data tokenizer=demo-bpe`; it is no model's tokenizer.

    python assets/demo-tokenizer/build.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
VOCAB_SIZE = 1000


def corpus() -> list[str]:
    texts = []
    for line in (REPO / "datasets" / "alpaca-tiny.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            texts.append("\n".join(str(v) for v in record.values()))
    return texts


def build() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    return tok


def main() -> None:
    tok = build()
    tok.save(str(HERE / "tokenizer.json"))
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 2048, **specials}
    (HERE / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (HERE / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
    print(f"{HERE / 'tokenizer.json'}: {tok.get_vocab_size()} tokens")


if __name__ == "__main__":
    main()
