"""Accept a validated :class:`RunConfig`, or a :class:`CheckResult` that must be ok."""

from __future__ import annotations

from cfgcheck.findings import CheckResult
from cfgcheck.schema.run import RunConfig
from cfgcheck.tokenizer import tokenizer_facts
from cfgcheck.tokenizer.facts import TokenizerFacts

Validated = RunConfig | CheckResult


def run_config(config: Validated) -> RunConfig:
    """The typed run config; a failed :class:`CheckResult` raises its ``ConfigError``."""
    if isinstance(config, RunConfig):
        return config
    config.raise_for_errors()
    if config.config is None:  # ok but no typed config cannot happen; stay explicit
        raise ValueError("the check result carries no validated run config")
    return config.config


def facts_of(cfg: RunConfig) -> TokenizerFacts:
    """The tokenizer facts the rules saw (declared values, or the resolved tokenizer files)."""
    return tokenizer_facts(cfg.tokenizer)
