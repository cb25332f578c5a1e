"""``python -m cfgcheck`` runs the command line."""

import sys

from cfgcheck.cli import main

sys.exit(main())
