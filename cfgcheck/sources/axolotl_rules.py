"""What Axolotl itself does with a ``sequence_len`` past the model's positions
(axolotl-ai-cloud/axolotl at 067b021c8b87a9e5e380b9173c704cf7340e30f5):

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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from cfgcheck.findings import Finding, Fix
from cfgcheck.sources.base import NativeConfig
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
