"""Resolve calibration runs from their cfgcheck overrides into gpu_measure.py's input.

Reads a JSON list of ``{"id", "overrides"}`` and writes the list with each run's resolved
``model``, ``trainer`` and ``data`` sections (derived fields filled), composed exactly as
``cfgcheck memory <overrides>`` composes them on the shipped ``conf/``:

    python benchmarks/calibration/resolve_runs.py planned.json runs-new.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def resolve(planned: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from cfgcheck import check

    out = []
    for run in planned:
        result = check(ROOT / "conf", "config", list(run["overrides"]))
        cfg = result.config
        if cfg is None:
            raise SystemExit(f"{run['id']}: the overrides do not validate")
        out.append(
            {
                "id": run["id"],
                "overrides": list(run["overrides"]),
                "model": cfg.model.model_dump(mode="json"),
                "trainer": cfg.trainer.model_dump(mode="json"),
                "data": cfg.data.model_dump(mode="json"),
            }
        )
    return out


def main() -> int:
    planned = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps(resolve(planned), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
