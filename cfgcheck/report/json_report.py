"""``--format json``: one JSON object, ``{"ok": bool, "findings": [...]}``."""

from __future__ import annotations

import json
from typing import TextIO

from cfgcheck.findings import CheckResult
from cfgcheck.report import register


@register("json")
def report_json(result: CheckResult, out: TextIO) -> None:
    json.dump(result.to_dict(), out, indent=2)
    out.write("\n")
