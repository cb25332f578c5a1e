"""A training entry point guarded by cfgcheck: ``@cfgcheck.main`` instead of ``@hydra.main``.

Run it from the repository root (it uses the repo's ``conf/``; no GPU, nothing is trained)::

    python examples/train.py                               # validated, then the task runs
    python examples/train.py data.max_seq_length=3063      # refused: the task never runs, exit 1
    python examples/train.py -m model=tinyllama-1.1b,llama-2-7b data.max_seq_length=1024,4096
                                                           # every point checked before any job

All of Hydra's command line works as usual (``--cfg job``, ``hydra.run.dir=...``, ``-m``).
"""

from __future__ import annotations

from hydra.core.hydra_config import HydraConfig

import cfgcheck
from cfgcheck import RunConfig
from cfgcheck.hydra import current_dictconfig
from cfgcheck.runtime import tokenizer_kwargs


@cfgcheck.main(config_path="../conf", config_name="config", version_base="1.3")
def train(run: RunConfig) -> None:
    # `run` is the typed, validated config: attribute access is checked by mypy and every
    # cross-field rule (sequence length vs block size, vocab sizes, batch shapes...) has passed.
    model, data, trainer = run.model, run.data, run.trainer
    tokens_per_step = trainer.effective_batch_size * data.max_seq_length
    print(f"run {run.name}: {model.name}, {model.n_layer} layers, block size {model.block_size}")
    print(
        f"  {trainer.finetuning} fine-tuning, micro batch {trainer.micro_batch_size} x "
        f"{trainer.gradient_accumulation_steps} accumulation on {trainer.world_size} device(s), "
        f"{data.max_seq_length} tokens per sample = {tokens_per_step} tokens per optimizer step"
    )
    # The raw OmegaConf config is still there, e.g. for keys the schema does not model.
    print(f"  config keys: {', '.join(current_dictconfig())}")
    print(f"  Hydra output dir: {HydraConfig.get().runtime.output_dir}")
    # What the data pipeline must do, straight from the checked config, so it cannot drift:
    # the tokenizer call's kwargs here, and `make_collate_fn(run)` for the DataLoader (torch).
    print(f"  tokenizer call: tokenizer(texts, **{tokenizer_kwargs(run)})")
    # A real script would build the model, tokenizer and data loader from `run` here.


if __name__ == "__main__":
    train()
