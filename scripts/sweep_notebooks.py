"""Check every notebook or script under a folder with ``--from python`` and count verdicts.

Used on unslothai/notebooks' ``nb/`` folder for docs/native-python.md: no file may crash the
reader (a traceback); each either gets a verdict or one ``ConfigLoadError`` line. Usage::

    python scripts/sweep_notebooks.py FOLDER
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

from cfgcheck.errors import ConfigLoadError
from cfgcheck.sources import check_native


def main() -> None:
    counts: collections.Counter[str] = collections.Counter()
    files = sorted(p for p in Path(sys.argv[1]).iterdir() if p.suffix in (".ipynb", ".py"))
    for path in files:
        try:
            result = check_native(path, "python")
        except ConfigLoadError as e:
            text = str(e)
            kind = (
                "no trainer"
                if "no training run" in text
                else "model not resolvable"
                if "preset" in text or "model" in text
                else "unreadable"
            )
            counts[kind] += 1
            if kind == "unreadable":
                print(f"{path.name}: {text}")
            continue
        counts["verdict, no error" if result.ok else "verdict with errors"] += 1
        for f in result.errors:
            print(f"{path.name}: error[{f.rule}] {f.message[:160]}")
    print(dict(counts))


if __name__ == "__main__":
    main()
