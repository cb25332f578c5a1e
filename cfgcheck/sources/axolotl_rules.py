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

Expert parallelism: the ExpertParallelPlugin's ``expert_parallel_size`` (read only when
``plugins:`` lists it), its DeepEP buffer and the world size it implies (see
:func:`expert_parallel` and cfgcheck/memory/expert_parallel.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources.axolotl_plugins import listed
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


def size_of(value: object) -> int | None:
    """A positive integer setting, or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# the DeepEP buffer the plugin allocates (integrations/expert_parallel/args.py defaults)
EP_BUFFER_KEYS = {"expert_parallel_num_nvl_bytes": 256 << 20, "expert_parallel_num_rdma_bytes": 0}
EP_ARGS = "axolotl integrations/expert_parallel/args.py"


def expert_parallel(b: Builder) -> int:
    """``trainer.expert_parallel_size`` and its dispatch buffer from the ExpertParallelPlugin's
    keys (axolotl-ai-cloud/axolotl@067b021c src/axolotl/integrations/expert_parallel/), which
    Axolotl reads only when ``plugins:`` lists the plugin; the size (1 when off)."""
    n = b.native
    ep = size_of(n.get("expert_parallel_size"))
    if ep is None or ep == 1 or "expert_parallel" not in listed(n):
        return 1
    b.from_key("trainer.expert_parallel_size", "expert_parallel_size", ep)
    # buffer.py get_buffer: deep_ep.Buffer(group, num_nvl_bytes, num_rdma_bytes), allocated
    # by DeepEP with cudaMalloc (csrc/deep_ep.cpp Buffer::Buffer)
    total = 0
    for key, default in EP_BUFFER_KEYS.items():
        value = n.get(key)
        total += value if isinstance(value, int) and not isinstance(value, bool) else default
    mib = -(-max(total, 0) // 2**20)
    set_keys = [k for k in EP_BUFFER_KEYS if n.is_set(k)]
    if set_keys:
        b.from_key("trainer.expert_parallel_buffer_mib", set_keys[0], mib)
    else:
        b.default(
            "trainer.expert_parallel_buffer_mib",
            mib,
            f"{EP_ARGS} expert_parallel_num_nvl_bytes=256 << 20 (DeepEP Buffer)",
        )
    return ep


def shard_group(b: Builder) -> None:
    """``trainer.shard_group`` from ``dp_shard_size`` or ``fsdp: [hybrid_shard]``. With
    expert parallelism the outer FSDP wrap shards over ``ep x dp_shard``
    (monkeypatch/accelerate/parallelism_config.py ``_patched_dp_shard_cp_dim_names``)."""
    n = b.native
    size = size_of(n.get("dp_shard_size"))
    if size is not None:
        ep = size_of(n.get("expert_parallel_size")) or 1
        if ep > 1 and "expert_parallel" in listed(n):
            b.from_key("trainer.shard_group", "dp_shard_size", size * ep)
        else:
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
