"""The run config: every section of one training run."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from cfgcheck.schema._base import Section
from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.tokenizer import TokenizerConfig
from cfgcheck.schema.trainer import TrainerConfig

SECTIONS: dict[str, type[Section]] = {
    "model": ModelConfig,
    "tokenizer": TokenizerConfig,
    "data": DataConfig,
    "trainer": TrainerConfig,
}


class RunConfig(Section):
    name: str | None = Field(None, description="Run name.")
    seed: int = Field(42, description="Random seed of the run.")
    output_dir: str | None = Field(
        None, description="Where the run writes checkpoints and logs (cfgcheck never reads it)."
    )
    model: ModelConfig
    tokenizer: TokenizerConfig
    data: DataConfig
    trainer: TrainerConfig

    def to_plain(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
