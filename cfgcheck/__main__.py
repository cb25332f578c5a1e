"""``python -m cfgcheck`` runs the command line."""

import sys

from cfgcheck.cli import EXIT_NOW, _command, _main, exit_now

code = _main(None)
if _command(sys.argv[1:]) in EXIT_NOW:
    exit_now(code)
sys.exit(code)
