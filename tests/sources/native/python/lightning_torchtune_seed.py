# The Lightning + torchtune seed (shared/seeds 004: "RuntimeError: each element in list of
# batch should be of equal size"): Lightning's example with its DataLoader over a torchtune
# text dataset, whose samples are unpadded token lists, and torch's default collate with a
# batch above 1. The fix is collate_fn=padded_collate(_sft) from torchtune.
import lightning as L
import torch
from torch.utils.data import DataLoader
from torchtune.datasets import text_completion_dataset
from torchtune.models.llama3 import llama3_tokenizer
from torchtune.models.llama3_2 import llama3_2_1b

BATCH_SIZE = 4


class LitLlama(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = llama3_2_1b()

    def training_step(self, batch, batch_idx):
        logits = self.model(batch["tokens"])
        return torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100
        )

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Shakespeare(L.LightningDataModule):
    def __init__(self, batch_size=BATCH_SIZE):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        tokenizer = llama3_tokenizer("checkpoints/Llama-3.2-1B/original/tokenizer.model")
        self.dataset = text_completion_dataset(
            tokenizer, source="text", data_files="shakespeare.txt", column="text", split="train"
        )

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size, shuffle=True)


trainer = L.Trainer(precision="bf16-mixed", devices=1, max_steps=100)
trainer.fit(LitLlama(), Shakespeare())
