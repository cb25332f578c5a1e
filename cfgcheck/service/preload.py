"""Everything a request may import, imported once when the app is created.

cfgcheck imports its heavy parts lazily (``cfgcheck check`` starts without torch or
transformers). In the service that laziness is a hazard: the first requests arrive together
on several worker threads, and two threads importing the same modules in a different order
can meet Python's import-lock deadlock detector (``_DeadlockError``, an answer of 500). So
the app imports, before it serves anything, every cfgcheck module (except the CLI), the
Hydra internals the composer and the source maps use, and the tokenizer/model libraries a
request naming a tokenizer or a model folder loads, where they are installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

# The Hydra modules cfgcheck imports inside functions (grep "from hydra" cfgcheck/).
HYDRA_MODULES: tuple[str, ...] = (
    "omegaconf",
    "omegaconf._impl",
    "antlr4.LL1Analyzer",  # imported by OmegaConf's grammar parser on its first error
    "hydra",
    "hydra.errors",
    "hydra.types",
    "hydra.main",
    "hydra.core.global_hydra",
    "hydra.core.hydra_config",
    "hydra.core.config_search_path",
    "hydra.core.override_parser.overrides_parser",
    "hydra.core.override_parser.types",
    "hydra._internal.hydra",
    "hydra._internal.utils",
    "hydra._internal.defaults_list",
    "hydra._internal.config_repository",
    "hydra._internal.config_loader_impl",
    "hydra._internal.core_plugins.basic_sweeper",
)
# Optional libraries a request may load (a tokenizer file, a model folder, a model's shape),
# with the attributes transformers resolves lazily on first access.
OPTIONAL_MODULES: tuple[str, ...] = (
    "tokenizers",
    "torch",
    "torch.utils.data",
    "transformers",
    "transformers.models.auto.configuration_auto",
    "transformers.conversion_mapping",
)
TRANSFORMERS_ATTRIBUTES: tuple[str, ...] = ("AutoConfig", "AutoTokenizer", "AutoModelForCausalLM")
# Never needed by a request (and __main__ would run the CLI).
SKIPPED = ("cfgcheck.__main__", "cfgcheck.cli", "cfgcheck.plotting")


def cfgcheck_modules() -> list[str]:
    """Every module of the cfgcheck package a request may import."""
    import cfgcheck

    return [
        info.name
        for info in pkgutil.walk_packages(cfgcheck.__path__, "cfgcheck.")
        if not info.name.startswith(SKIPPED)
    ]


def preload() -> list[str]:
    """Import everything a request may need; the names of the optional modules that are
    not installed (a missing extra is reported by the request that needs it)."""
    for name in (*cfgcheck_modules(), *HYDRA_MODULES):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional extra of one adapter: that adapter says so
            continue
    # Hydra imports its core plugins (launchers, config sources, completions) when its
    # plugin registry, a process-wide singleton, is first built: built here, once.
    from hydra.core.plugins import Plugins

    Plugins.instance()
    missing = []
    for name in OPTIONAL_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if "transformers" not in missing:
        import transformers

        for attribute in TRANSFORMERS_ATTRIBUTES:
            try:
                getattr(transformers, attribute)
            except (ImportError, AttributeError):
                missing.append(f"transformers.{attribute}")
    return missing
