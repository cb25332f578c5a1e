"""Shared by the web page's tests (tests/test_service_web*.py): the seed failures of
tests/test_cli.py as pasted run configs, and where their keys are in the text."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.conftest import CONF
from tests.test_cli import SEEDS

GIB = 1024**3


def seed_yaml(overrides: list[str]) -> str:
    """The shipped conf/ composed with ``overrides``, as the YAML a user pastes."""
    from cfgcheck.compose import compose
    from cfgcheck.validate import to_plain

    return yaml.safe_dump(to_plain(compose(CONF, "config", overrides)), sort_keys=False)


def seed_cases() -> dict[str, tuple[str, str]]:
    """seed name -> (pasted YAML, the rule it must raise)."""
    return {name: (seed_yaml(bad), rule) for name, (bad, rule, _, _) in SEEDS.items()}


def line_of(text: str, dotted: str) -> int | None:
    """The 1-based line of ``dotted`` (``data.max_seq_length``) in block-style YAML ``text``."""
    parts = dotted.split(".")
    depth = 0
    for n, line in enumerate(text.split("\n"), start=1):
        indent = len(line) - len(line.lstrip(" "))
        if indent == 2 * depth and re.match(rf"^\s*{re.escape(parts[depth])}:", line):
            depth += 1
            if depth == len(parts):
                return n
    return None


def api_finding(report: dict[str, Any], rule: str) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["rule"] == rule)
