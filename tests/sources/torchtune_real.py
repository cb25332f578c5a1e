"""The real side of tests/sources/test_torchtune_differential.py: runs torchtune's own recipe
(``recipes/<recipe>.py`` as installed with torchtune 0.6.1: ``__init__``, ``setup`` and
``train``) on a config file on CPU, and prints one line: ``OK`` when it trained, else the error
it raised. Run as ``python -m tests.sources.torchtune_real RECIPE=CONFIG ...`` in a subprocess
(one process for several configs: torch and torchtune are imported once); each config's verdict
is one line ``RESULT <i> OK`` or ``RESULT <i> <ErrorType>: <message>``.

torchtune 0.6.1's ``torchtune.training`` imports two names torchao 0.17 no longer has
(``int4_weight_only`` and ``int8_dynamic_activation_int4_weight``, torchtune/training/
quantization.py); they are only used by the quantization recipes, so this runner gives torchao
placeholders for the names it lacks before importing torchtune. Nothing else is replaced.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import warnings
from pathlib import Path
from typing import Any


def _import_training() -> None:
    for _ in range(20):
        try:
            importlib.import_module("torchtune.training")
            return
        except ImportError as e:
            m = re.search(r"cannot import name '(\w+)' from '(torchao[\w.]*)'", str(e))
            if not m:
                raise
            setattr(importlib.import_module(m.group(2)), m.group(1), type(m.group(1), (), {}))
            for name in [k for k in sys.modules if k.startswith("torchtune.training")]:
                del sys.modules[name]
    raise ImportError("torchtune.training does not import")


def _recipe(name: str) -> Any:
    # torchtune's recipes folder, installed next to torchtune (its __init__ refuses imports)
    found = importlib.util.find_spec("recipes")
    assert found is not None and found.submodule_search_locations is not None
    path = Path(next(iter(found.submodule_search_locations))) / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tt_recipe_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_RECIPES: dict[str, Any] = {}


def run(recipe: str, file: str) -> str | None:
    """None when the recipe trains, else "ErrorType: message"."""
    _import_training()
    from omegaconf import OmegaConf

    module = _RECIPES.get(recipe) or _RECIPES.setdefault(recipe, _recipe(recipe))
    cls = next(v for k, v in vars(module).items() if k.endswith("RecipeSingleDevice"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = OmegaConf.load(file)
            # recipe_main (recipes/<recipe>.py): the recipe's __init__, setup and train
            r = cls(cfg=cfg)
            r.setup(cfg=cfg)
            r.train()
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:300]}"
    return None


if __name__ == "__main__":
    import logging

    logging.disable(logging.CRITICAL)
    for i, arg in enumerate(sys.argv[1:]):
        recipe, _, file = arg.partition("=")
        failed = run(recipe, file)
        print(
            f"\nRESULT {i} " + ("OK" if failed is None else failed.replace("\n", " ")), flush=True
        )
