"""Generate cfgcheck/memory/traces/: the meta-device trace of every model preset read
generically (a preset with ``hf_config`` whose architecture has no hand-written layout,
cfgcheck/models/presets.py), built with the installed torch and transformers and stored as
gzip JSON with the transformers version it came from (see cfgcheck/memory/trace_cache.py for
when they are used). Run it after a preset is added or changed, after a change to
cfgcheck/memory/traced.py, or on a new transformers minor release:

    python scripts/gen_preset_traces.py [--check]

``--check`` writes nothing and exits 1 when a shipped file differs from the rebuilt one
(tests/test_trace_cache.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cfgcheck.memory.modules import ARCHITECTURES, architecture_of  # noqa: E402
from cfgcheck.memory.trace_cache import FORMAT, SHIPPED, installed, shipped_name  # noqa: E402
from cfgcheck.memory.traced import build, to_json, trace_key  # noqa: E402
from cfgcheck.models.presets import all_presets  # noqa: E402
from cfgcheck.schema.model import ModelConfig  # noqa: E402


def generic_presets() -> dict[str, str]:
    """Preset name -> the trace key of its ``hf_config``, for the presets read generically."""
    out: dict[str, str] = {}
    for preset in all_presets():
        m = ModelConfig.model_validate(dict(preset.config))
        if m.hf_config is not None and architecture_of(m) not in ARCHITECTURES:
            out[preset.name] = trace_key(m.hf_config)
    return out


def entry(name: str, key: str) -> dict[str, Any]:
    """The shipped entry of one preset, from a fresh meta build."""
    return {
        "format": FORMAT,
        "preset": name,
        "transformers": installed("transformers"),
        "torch": installed("torch"),
        "key": key,
        "trace": to_json(build(key)),
    }


def render(data: dict[str, Any]) -> bytes:
    """Deterministic gzip (no file name, no time stamp) of compact JSON."""
    text = json.dumps(data, separators=(",", ":")).encode()
    return gzip.compress(text, compresslevel=9, mtime=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    wanted = {shipped_name(key): (name, key) for name, key in generic_presets().items()}
    stale = sorted(p.name for p in SHIPPED.glob("*.json.gz") if p.name not in wanted)
    differ = []
    total = 0
    for file, (name, key) in sorted(wanted.items(), key=lambda kv: kv[1][0]):
        data = render(entry(name, key))
        total += len(data)
        path = SHIPPED / file
        if args.check:
            if not path.is_file() or path.read_bytes() != data:
                differ.append(f"{name} ({file})")
            continue
        SHIPPED.mkdir(exist_ok=True)
        path.write_bytes(data)
        print(f"{name}: {file} ({len(data):,} bytes)")
    if args.check:
        problems = differ + [f"{f} (no such preset)" for f in stale]
        for p in problems:
            print(f"out of date: {p}", file=sys.stderr)
        return 1 if problems else 0
    for f in stale:
        (SHIPPED / f).unlink()
        print(f"removed {f} (no such preset)")
    print(f"{len(wanted)} traces, {total:,} bytes, transformers {installed('transformers')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
