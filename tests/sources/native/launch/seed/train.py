"""A FastChat-style supervised fine-tuning entry point (after lm-sys/FastChat
fastchat/train/train.py at 0e6d3e4beaab66f4d3f93db72541a4abab8af28d), as the seed article's
run had it: the lazy dataset tokenizes one conversation per __getitem__ with padding=True, and
the Trainer gets no collator. tests/sources/test_launch_ground_truth.py runs it."""

import json
from dataclasses import dataclass, field
from typing import Optional

import torch
import transformers
from torch.utils.data import Dataset
from transformers import Trainer


@dataclass
class ModelArguments:
    model_name_or_path: Optional[str] = field(default="facebook/opt-125m")


@dataclass
class DataArguments:
    data_path: str = field(default=None, metadata={"help": "Path to the training data."})
    lazy_preprocess: bool = False


@dataclass
class TrainingArguments(transformers.TrainingArguments):
    cache_dir: Optional[str] = field(default=None)
    model_max_length: int = field(default=512, metadata={"help": "Maximum sequence length."})


def preprocess(sources, tokenizer):
    conversations = [" ".join(turn["value"] for turn in source) for source in sources]
    input_ids = tokenizer(
        conversations,
        return_tensors="pt",
        padding=True,
        max_length=tokenizer.model_max_length,
        truncation=True,
    ).input_ids
    targets = input_ids.clone()
    return dict(
        input_ids=input_ids,
        labels=targets,
        attention_mask=input_ids.ne(tokenizer.pad_token_id),
    )


class LazySupervisedDataset(Dataset):
    def __init__(self, raw_data, tokenizer):
        super().__init__()
        self.tokenizer = tokenizer
        self.raw_data = raw_data

    def __len__(self):
        return len(self.raw_data)

    def __getitem__(self, i):
        ret = preprocess([self.raw_data[i]["conversations"]], self.tokenizer)
        return dict(
            input_ids=ret["input_ids"][0],
            labels=ret["labels"][0],
            attention_mask=ret["attention_mask"][0],
        )


def train():
    parser = transformers.HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    model_args, data_args, training_args = parser.parse_args_into_dataclasses()
    model = transformers.AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        model_args.model_name_or_path,
        model_max_length=training_args.model_max_length,
        padding_side="right",
    )
    with open(data_args.data_path) as f:
        raw = json.load(f)
    train_dataset = LazySupervisedDataset(raw, tokenizer=tokenizer)
    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset)
    trainer.train()
    return trainer


if __name__ == "__main__":
    train()
