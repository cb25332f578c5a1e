# The Unsloth seed's data path (shared/seeds 002: "expected sequence of length 4096 at dim 1
# (got 3999)") with transformers' own Trainer, runnable on CPU: a batched map tokenizes with
# padding=True, so each map batch is padded only to its own longest sample; the Trainer gets
# no tokenizer, so its collator is default_data_collator, which stacks; the batch is 4.
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

MODEL = "tiny-llama"
MAX_TOKEN_COUNT = 64

tokenizer = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForCausalLM.from_pretrained(MODEL)
texts = [" ".join(f"w{3 + (i * 7 + j) % 90}" for j in range(4 + 3 * i)) for i in range(16)]
dataset = Dataset.from_dict({"text": texts})


def tokenize_function(example):
    tokens = tokenizer(
        example["text"],
        add_special_tokens=False,
        truncation=True,
        padding=True,
        max_length=MAX_TOKEN_COUNT,
        return_attention_mask=True,
    )
    return {
        "input_ids": tokens["input_ids"],
        "attention_mask": tokens["attention_mask"],
        "labels": tokens["input_ids"],
    }


dataset = dataset.map(tokenize_function, batched=True, batch_size=2, remove_columns=["text"])

trainer = Trainer(
    model=model,
    args=TrainingArguments(
        output_dir="out",
        per_device_train_batch_size=4,
        max_steps=1,
        report_to="none",
        use_cpu=True,
    ),
    train_dataset=dataset,
)
trainer.train()
