"""Cross-field rules. Importing this package registers every built-in rule."""

from cfgcheck.findings import Fix
from cfgcheck.rules import (
    attention_kernel,
    batching,
    finetuning,
    gpu_name,
    lora_parameters,
    lora_targets,
    memory,
    offload,
    sequence,
    shapes,
    tokenizer_files,
    tokenizer_model,
    tokens,
    vocab,
)
from cfgcheck.rules._registry import Problem, Rule, all_rules, rule, run_rules

__all__ = ["Fix", "Problem", "Rule", "all_rules", "rule", "run_rules"]

# Keep the rule modules referenced so linters see why they are imported.
_MODULES = (
    attention_kernel,
    batching,
    finetuning,
    gpu_name,
    lora_parameters,
    lora_targets,
    memory,
    offload,
    sequence,
    shapes,
    tokenizer_files,
    tokenizer_model,
    tokens,
    vocab,
)
