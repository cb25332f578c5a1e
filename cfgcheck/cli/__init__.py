"""The ``cfgcheck`` command line. Each subcommand lives in its own module with a
``register(subparsers)`` function; heavy imports stay inside the command's run function."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from cfgcheck.errors import ConfigLoadError

# Subcommand modules under cfgcheck.cli, in help order.
COMMANDS: tuple[str, ...] = ("check", "data", "memory", "hook", "rules", "schema", "serve")

EXIT_OK, EXIT_FINDINGS, EXIT_LOAD = 0, 1, 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only`` (a command of :data:`COMMANDS`), that command's
    parser alone: the other commands' modules (the service's settings, the hook, the schema
    export...) are not imported on a check's path. Help and errors of ``only`` are the same."""
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
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"cfgcheck.cli.{name}").register(sub)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names first, when it names one before any option."""
    first = argv[0] if argv else None
    return first if first in COMMANDS else None


def _say(message: str) -> None:
    """One line on stderr, printable whatever the message holds (file names that are not
    UTF-8 arrive as surrogate escapes)."""
    from cfgcheck.cli._common import say

    say(f"error: {message}")


def _printable_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


# Commands that exit without the interpreter's teardown when run as the program (exit_now).
EXIT_NOW: tuple[str, ...] = ("check", "hook")


def exit_now(code: int) -> NoReturn:
    """Exit as ``sys.exit(code)`` would, minus the interpreter's teardown: freeing every
    object of the ~470 modules a check imports one by one costs ~0.09 s of CPU, a fifth of a
    first check (``python -X importtime``; benchmarks/cold_start.py). What a normal exit does
    that matters still runs: the atexit handlers (logging's flush among them) and flushing
    stdout and stderr."""
    import atexit

    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # the reader went away: nothing left to tell it
        pass
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Run as the program (the ``cfgcheck`` script, ``python -m
    cfgcheck``), ``check`` and ``hook`` end the process here (:func:`exit_now`); called with
    ``argv`` (tests, other programs), it returns the exit code."""
    code = _main(argv)
    if argv is None and Path(sys.argv[0]).name == "cfgcheck" and _command(sys.argv[1:]) in EXIT_NOW:
        exit_now(code)
    return code


def _main(argv: Sequence[str] | None) -> int:
    _printable_streams()
    raw = list(sys.argv[1:] if argv is None else argv)
    # Hydra overrides may come after options too: `check --format json model=x a.b=1`; after
    # `--`, the words are arguments (a launch script's own, as typed: `--from launch run.sh
    # -- -m MODEL out`), cut off before argparse, which would drop the `--`.
    after = raw[raw.index("--") + 1 :] if "--" in raw else []
    raw = raw[: raw.index("--")] if "--" in raw else raw
    parser = build_parser(_command(raw))
    args, extra = parser.parse_known_args(raw)
    unknown = [a for a in extra if a.startswith("-")]
    if unknown or not hasattr(args, "overrides"):
        if extra or after:
            parser.error(f"unrecognized arguments: {' '.join(unknown or [*extra, *after])}")
    elif getattr(args, "source", None) == "launch" and after:
        # a launch script's own arguments, as typed: `-- -m MODEL --use_lora True`
        args.overrides = [*args.overrides, *extra, "--", *after]
    else:
        args.overrides = [*args.overrides, *extra, *after]
    try:
        code: int = args.run(args)
    except ConfigLoadError as e:
        _say(str(e))
        return EXIT_LOAD
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`cfgcheck check | head -1`): no traceback, and no second
        # error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a process killed by the signal
    except (RecursionError, MemoryError) as e:
        # Last resort: the readers bound what they parse (cfgcheck.safeio), so reaching this
        # is a bug; still one line and exit 2, never a traceback.
        _say(f"the input is too large or too deeply nested ({type(e).__name__})")
        return EXIT_LOAD
    except OSError as e:
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        _say(f"cannot read{where}: {e.strerror or e}")
        return EXIT_LOAD
    except Exception as e:  # last resort: one line, exit 2; set CFGCHECK_DEBUG=1 to see it
        if os.environ.get("CFGCHECK_DEBUG"):
            raise
        _say(f"unexpected {type(e).__name__}: {e}")
        return EXIT_LOAD
    return code


if __name__ == "__main__":
    sys.exit(main())
