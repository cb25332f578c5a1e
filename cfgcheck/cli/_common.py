"""Options shared by the commands that compose a config."""

from __future__ import annotations

import argparse

from cfgcheck.compose import DEFAULT_CONFIG_DIR, DEFAULT_CONFIG_NAME


def add_config_args(parser: argparse.ArgumentParser, formats: list[str]) -> None:
    parser.add_argument(
        "--config-dir",
        default=DEFAULT_CONFIG_DIR,
        help="Hydra config directory (default: ./conf)",
    )
    parser.add_argument(
        "--config-name", default=DEFAULT_CONFIG_NAME, help="primary config (default: config)"
    )
    parser.add_argument("--format", choices=formats, default="text", help="output format")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="OVERRIDE",
        help="Hydra overrides, e.g. data.max_seq_length=2048 model=llama-3-8b",
    )
