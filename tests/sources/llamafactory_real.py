"""The real side of tests/sources/test_llamafactory_differential.py: LLaMA-Factory's own
start-up on each config file, as ``llamafactory-cli train`` runs it before any training step
(src/llamafactory/train/tuner.py run_exp -> _training_function): ``get_train_args`` (the
argument parser and every refusal of hparams/parser.py), then what the SFT/DPO workflows do
first: ``load_tokenizer``, ``get_template_and_fix_tokenizer`` (data/template.py), the
dataset list of ``dataset_info.json`` (data/parser.py get_dataset_list) and the model config's
quantization checks (model/model_utils/quantization.py configure_quantization). Prints one line per
file: ``RESULT <i> OK`` or ``RESULT <i> <ErrorType>: <message>``.

LLaMA-Factory pins transformers below the version installed here, so it is installed with
``--no-deps`` in a venv of its own whose ``.pth`` reads the shared site-packages, and run with
its own switch ``DISABLE_VERSION_CHECK=1`` (src/llamafactory/extras/misc.py check_version);
see the test's module docstring. data/mm_plugin.py imports torchaudio at the top for audio
inputs only; where torchaudio is not installed (it is not here) the runner gives it an empty
module, which none of these text-only configs reach; and model/loader.py imports trl's
``AutoModelForCausalLMWithValueHead`` (PPO and reward models' value head), which trl 1.x no
longer has: a placeholder stands for each such name of trl (the runner lists them in its
output), never reached by the start-up this runs. Run as
``$CFGCHECK_LLAMAFACTORY_PYTHON -m tests.sources.llamafactory_real FILE ...``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings


def _torchaudio() -> None:
    import importlib.machinery
    import importlib.util
    import types

    if importlib.util.find_spec("torchaudio") is None:
        module = types.ModuleType("torchaudio")
        module.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
        sys.modules["torchaudio"] = module


def _import_llamafactory() -> list[str]:
    """Import llamafactory.model, giving trl a placeholder for each name it lacks."""
    import importlib
    import re

    placed: list[str] = []
    for _ in range(10):
        try:
            importlib.import_module("llamafactory.model")
            return placed
        except ImportError as e:
            m = re.search(r"cannot import name '(\w+)' from '(trl[\w.]*)'", str(e))
            if not m:
                raise
            setattr(importlib.import_module(m.group(2)), m.group(1), type(m.group(1), (), {}))
            placed.append(f"{m.group(2)}.{m.group(1)}")
            for name in [k for k in sys.modules if k.startswith("llamafactory")]:
                del sys.modules[name]
    raise ImportError("llamafactory.model does not import")


def run(file: str) -> str | None:
    import yaml
    from llamafactory.data.parser import get_dataset_list
    from llamafactory.data.template import get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer
    from llamafactory.model.loader import load_config
    from llamafactory.model.model_utils.quantization import configure_quantization

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with open(file) as f:
                args = yaml.safe_load(f)
            model_args, data_args, _, _, _ = get_train_args(args)
            tokenizer = load_tokenizer(model_args)["tokenizer"]
            get_template_and_fix_tokenizer(tokenizer, data_args)
            get_dataset_list(data_args.dataset, data_args.dataset_dir)
            # load_model -> patch_config -> configure_quantization (model/patcher.py): the
            # quantization refusals, before any weight is read. bitsandbytes is not installed
            # here (a GPU machine's package), so 4 and 8 bits, which only check its version
            # there, stop at the parser's checks.
            bnb = importlib.util.find_spec("bitsandbytes") is not None
            if model_args.quantization_bit not in (4, 8) or bnb:
                config = load_config(model_args)
                configure_quantization(config, tokenizer, model_args, True, {})
    except BaseException as e:  # the parser calls sys.exit on some refusals
        return f"{type(e).__name__}: {str(e)[:300]}"
    return None


if __name__ == "__main__":
    import logging

    os.environ.setdefault("DISABLE_VERSION_CHECK", "1")
    logging.disable(logging.CRITICAL)
    _torchaudio()
    print("placeholders:", _import_llamafactory())
    for i, file in enumerate(sys.argv[1:]):
        failed = run(file)
        print(
            f"\nRESULT {i} " + ("OK" if failed is None else failed.replace("\n", " ")), flush=True
        )
