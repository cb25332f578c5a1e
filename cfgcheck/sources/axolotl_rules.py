"""What Axolotl itself does (axolotl-ai-cloud/axolotl at
067b021c8b87a9e5e380b9173c704cf7340e30f5) with a ``sequence_len`` past the model's positions,
``gptq: true`` and hybrid FSDP sharding.

Positions:

* ``src/axolotl/loaders/model.py`` ``_adjust_model_config`` (lines 393-404): when
  ``sequence_len > model.config.max_position_embeddings`` it logs "increasing
  model.config.max_position_embeddings from {old} to {sequence_len}" and sets the config
  value; nothing else changes. A RoPE model computes rotary angles for any position and
  trains on positions it never saw; a learned position table (GPT-2, OPT) keeps its rows, so
  the first longer row fails in the embedding with "IndexError: index out of range in self".
* ``src/axolotl/utils/data/utils.py`` ``handle_long_seq_in_dataset``: rows longer than
  ``sequence_len`` are dropped (``excess_length_strategy: drop``, the default), truncated
  (``truncate``) or refused (``raise``): no row is longer than ``sequence_len``, and with
  ``sample_packing`` every packed row is ``sequence_len`` long.

LitGPT's "Cannot attend to ..." guard does not exist here; this rule replaces it.

GPTQ: ``src/axolotl/loaders/utils.py`` ``check_model_config`` (lines 110-120) raises
"model_config.quantization_config is not set or quant_method is not set to gptq. Please make
sure to point to a GPTQ model." when ``gptq`` is set and the model's config.json has no GPTQ
``quantization_config``; with one, ``loaders/model.py`` (lines 679-691) loads it with
``GPTQConfig(**quantization_config)``, so the weights are the checkpoint's packed format
(``model.weight_format``, read from config.json by cfgcheck.models).

Hybrid sharding: ``dp_shard_size`` (``src/axolotl/utils/distributed.py``
``_get_parallel_config_kwargs``: FSDP shards over ``dp_shard_size`` GPUs and replicates over
the rest), or ``fsdp: [hybrid_shard]`` (transformers' ``TrainingArguments.fsdp`` option,
``FSDPOption.HYBRID_SHARD``: shards within a node).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources.base import Builder, NativeConfig
from cfgcheck.sources.trl_rules import LEARNED_POSITIONS

if TYPE_CHECKING:
    from cfgcheck.schema.run import RunConfig

ADJUST = "src/axolotl/loaders/model.py _adjust_model_config"


def positions_past_context(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    if cfg is None:
        return
    from cfgcheck.memory.modules import architecture_of

    m = cfg.model
    block, length = m.block_size, cfg.data.max_seq_length
    if length <= block:
        return
    arch = architecture_of(m)
    logged = (
        f'Axolotl logs "increasing model.config.max_position_embeddings from {block} to '
        f'{length}" ({ADJUST})'
    )
    paths = ("sequence_len", "data.max_seq_length", "model.block_size")
    fixes = (Fix((f"sequence_len={block}",), f"stay within the model's {block} positions"),)
    if arch in LEARNED_POSITIONS:
        packed = bool(native.get("sample_packing"))
        yield Finding(
            "axolotl-positions-past-context",
            "error" if packed else "warning",
            paths,
            f"{logged}, but {m.name} ({arch}) has a learned table of {block} positions that "
            "the config value does not grow: "
            + (
                f"every packed row is {length} tokens, so the first batch fails"
                if packed
                else f"the first row longer than {block} tokens fails"
            )
            + ' in the position embedding with "IndexError: index out of range in self" (a '
            "device-side assert on CUDA)",
            f"set sequence_len<={block}",
            fixes=fixes,
        )
        return
    strategy = str(native.get("excess_length_strategy") or "drop").lower()
    longer = {
        "truncate": "longer ones are truncated",
        "raise": "a longer one stops preprocessing with a ValueError",
    }.get(strategy, "longer ones are dropped")
    yield Finding(
        "axolotl-positions-past-context",
        "warning",
        paths,
        f"{logged} and trains on: {m.name} computes rotary angles for any position, so rows up "
        f"to {length} tokens ({longer}, excess_length_strategy: {strategy}) reach "
        f"positions past the {block} it was pretrained on (quality), and each extra token costs "
        "activation memory",
        f"set sequence_len<={block}, unless you mean to extend the context (then scale RoPE: "
        "rope_scaling)",
        fixes=fixes,
    )


def shard_group(b: Builder) -> None:
    """``trainer.shard_group`` from ``dp_shard_size`` or ``fsdp: [hybrid_shard]``."""
    n = b.native
    size = n.get("dp_shard_size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        b.from_key("trainer.shard_group", "dp_shard_size", size)
        return
    options = n.get("fsdp")
    words = options.split() if isinstance(options, str) else options
    if isinstance(words, list) and {"hybrid_shard", "hybrid_shard_zero2"} & set(map(str, words)):

        def within_node(b: Builder, _model: object) -> None:
            devices = b.config["trainer"].get("devices", 1)
            b.from_key("trainer.shard_group", "fsdp", devices)

        b.after_model.append(within_node)


def gptq_rules(native: NativeConfig, cfg: RunConfig | None) -> Iterator[Finding]:
    if not native.get("gptq") or cfg is None:
        return
    fmt = cfg.model.weight_format or ""
    if fmt.startswith("gptq"):
        return
    yield Finding(
        "axolotl-gptq-not-gptq-model",
        "error",
        ("gptq", "model.weight_format"),
        f"gptq is set but {cfg.model.name}'s config.json has "
        + (f"a {fmt} quantization_config" if fmt else "no quantization_config")
        + ': Axolotl refuses it before loading, "ValueError: model_config.quantization_config '
        "is not set or quant_method is not set to gptq. Please make sure to point to a GPTQ "
        'model." (src/axolotl/loaders/utils.py check_model_config)',
        "point base_model at a GPTQ checkpoint, or remove gptq",
        fixes=(Fix(("~gptq",), "load the checkpoint as it is"),),
    )
