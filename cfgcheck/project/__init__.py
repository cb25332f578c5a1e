"""Adopting cfgcheck in a team's own project (docs/adoption.md).

- :mod:`~cfgcheck.project.mapping`: the ``cfgcheck:`` node that maps the team's keys onto the
  run config, and findings and fixes told back in the team's keys;
- :mod:`~cfgcheck.project.settings`: ``[tool.cfgcheck]`` in ``pyproject.toml`` or
  ``.cfgcheck.toml``;
- :mod:`~cfgcheck.project.suppressions`: ``# cfgcheck: ignore[rule-id]`` on a YAML line;
- :mod:`~cfgcheck.project.plugins`: rules installed through the ``cfgcheck.rules`` entry points;
- :mod:`~cfgcheck.project.schema`: a team's own ``RunConfig`` subclass, named ``pkg.mod:Class``.

Nothing here is imported by a check of a tree that uses none of it, except the settings lookup
(a few ``stat`` calls, and ``tomllib`` only when a settings file exists).
"""
