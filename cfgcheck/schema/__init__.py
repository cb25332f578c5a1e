"""Pydantic schemas of a run config, one module per section."""

from cfgcheck.schema.data import DataConfig
from cfgcheck.schema.model import ModelConfig
from cfgcheck.schema.run import SECTIONS, RunConfig
from cfgcheck.schema.tokenizer import TokenizerConfig
from cfgcheck.schema.trainer import LoraConfig, TrainerConfig

__all__ = [
    "SECTIONS",
    "DataConfig",
    "LoraConfig",
    "ModelConfig",
    "RunConfig",
    "TokenizerConfig",
    "TrainerConfig",
]
