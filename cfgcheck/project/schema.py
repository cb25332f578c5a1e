"""A team's own run config schema: a :class:`cfgcheck.RunConfig` subclass named ``pkg.mod:Class``
(``--schema``, ``schema =`` in the settings).

```python
class EvalConfig(cfgcheck.schema.Section):
    every_n_steps: int = 500

class MyRun(cfgcheck.RunConfig):
    eval: EvalConfig                    # a new section, checked like the built-in ones
    data: MyData                        # a tighter section (a DataConfig subclass)
```

Naming a schema imports the team's module: that is the team's own code, asked for by name
(as mypy and pytest plugins are); nothing else of the project is imported. The current
directory and the settings file's directory are importable for it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from cfgcheck.errors import ConfigLoadError
from cfgcheck.schema.run import RunConfig


def check_schema(schema: object, where: str = "schema") -> type[RunConfig]:
    """``schema`` when it is a :class:`RunConfig` subclass, else a one-line error."""
    if not (isinstance(schema, type) and issubclass(schema, RunConfig)):
        raise ConfigLoadError(
            f"{where}: {schema!r} is not a subclass of cfgcheck.RunConfig; a team schema "
            f"subclasses it (class MyRun(cfgcheck.RunConfig): ...)"
        )
    return schema


def load_schema(ref: str, *, search: tuple[Path, ...] = ()) -> type[RunConfig]:
    """The class ``ref`` (``pkg.mod:Class``) names. Raises :class:`ConfigLoadError` with one
    line when it is malformed, cannot be imported, or is not a RunConfig subclass."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigLoadError(f"schema {ref!r}: write it as package.module:ClassName")
    added = [str(p) for p in (Path.cwd(), *search) if str(p) not in sys.path and Path(p).is_dir()]
    sys.path[:0] = added
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        raise ConfigLoadError(
            f"schema {ref!r}: cannot import {module_name}: {type(e).__name__}: "
            f"{' '.join(str(e).split())}"
        ) from e
    finally:
        for p in added:
            if p in sys.path:
                sys.path.remove(p)
    target: object = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigLoadError(f"schema {ref!r}: {module_name} has no {attr}")
        target = getattr(target, part)
    return check_schema(target, f"schema {ref!r}")
