"""The ``cfgcheck`` command line. Each subcommand lives in its own module with a
``register(subparsers)`` function; heavy imports stay inside the command's run function."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from cfgcheck.errors import ConfigLoadError

# Subcommand modules under cfgcheck.cli, in help order.
COMMANDS: tuple[str, ...] = ("check", "data", "memory", "hook", "rules", "schema", "serve")

EXIT_OK, EXIT_FINDINGS, EXIT_LOAD = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    from cfgcheck.cli._common import help_epilog

    parser = argparse.ArgumentParser(
        prog="cfgcheck",
        description="Validate LLM training run configs before anything launches.",
        epilog=help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from cfgcheck import __version__

    parser.add_argument("--version", action="version", version=f"cfgcheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"cfgcheck.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # Hydra overrides may come after options too: `check --format json model=x a.b=1`.
    unknown = [a for a in extra if a.startswith("-")]
    if unknown or not hasattr(args, "overrides"):
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(unknown or extra)}")
    else:
        args.overrides = [*args.overrides, *extra]
    try:
        code: int = args.run(args)
    except ConfigLoadError as e:
        print(f"cfgcheck: error: {e}", file=sys.stderr)
        return EXIT_LOAD
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`cfgcheck check | head -1`): no traceback, and no second
        # error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a process killed by the signal
    return code


if __name__ == "__main__":
    sys.exit(main())
