"""Generate ``cfgcheck/sources/launcher/training_args_versions.json``: transformers'
``TrainingArguments`` fields (name, annotation as written, literal default) per release, read
with :mod:`ast` from each release's own ``src/transformers/training_args.py`` (nothing
imported), the fields ``Seq2SeqTrainingArguments`` adds (``training_args_seq2seq.py``:
``predict_with_generate``, ``generation_max_length``...; ChatGLM's ptuning/main.py parses it),
and which of the ``__post_init__`` checks cfgcheck models each release makes.

``cfgcheck check --from launch SCRIPT --transformers-version X`` parses the script's flags
against release X's fields (a flag the release does not declare is refused, as its
``HfArgumentParser`` refuses it).

Usage (the wheels from PyPI, ``pip download --no-deps transformers==X``; or a source file)::

    python scripts/training_args_versions.py \\
        4.27.1=/tmp/tfw/transformers-4.27.1-py3-none-any.whl \\
        4.30.2=/tmp/tfw/transformers-4.30.2-py3-none-any.whl \\
        4.37.2=/tmp/tfw/transformers-4.37.2-py3-none-any.whl \\
        4.45.2=/tmp/tfw/transformers-4.45.2-py3-none-any.whl \\
        4.46.3=/tmp/tfw/transformers-4.46.3-py3-none-any.whl \\
        4.51.3=/tmp/tfw/transformers-4.51.3-py3-none-any.whl \\
        4.57.1=/tmp/tfw/transformers-4.57.1-py3-none-any.whl \\
        --installed
"""

from __future__ import annotations

import argparse
import ast
import json
import zipfile
from pathlib import Path
from typing import Any

from cfgcheck.sources.pydataclass import NO_DEFAULT, classes_in

OUT = Path(__file__).resolve().parents[1] / "cfgcheck" / "sources" / "launcher"
OUT = OUT / "training_args_versions.json"
# The TrainingArguments.__post_init__ refusals cfgcheck models, by the text each raises.
CHECKS = {
    "fp16_and_bf16": "At most one of fp16 and bf16 can be True",
}


def _source(spec: str, name: str = "training_args.py") -> str:
    """``transformers/<name>`` of a wheel, or the file ``spec`` (its sibling ``name``)."""
    path = Path(spec)
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            return wheel.read(f"transformers/{name}").decode("utf-8")
    return (path.parent / name if name != "training_args.py" else path).read_text("utf-8")


def _fields(source: str, cls: str) -> dict[str, Any]:
    info = classes_in(ast.parse(source))[cls]
    return {
        name: {
            "type": info.types.get(name, ""),
            "default": None if default == NO_DEFAULT else default,
            "literal": default != NO_DEFAULT,
        }
        for name, default in sorted(info.fields.items())
    }


def table(source: str, version: str, seq2seq: str) -> dict[str, Any]:
    return {
        "source": f"transformers {version} src/transformers/training_args.py",
        "fields": _fields(source, "TrainingArguments"),
        "seq2seq": _fields(seq2seq, "Seq2SeqTrainingArguments"),
        "checks": sorted(name for name, text in CHECKS.items() if text in source),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("releases", nargs="*", metavar="VERSION=WHEEL_OR_FILE")
    ap.add_argument("--installed", action="store_true", help="add the installed transformers")
    args = ap.parse_args()
    versions: dict[str, Any] = {}
    for spec in args.releases:
        version, _, path = spec.partition("=")
        versions[version] = table(_source(path), version, _source(path, "training_args_seq2seq.py"))
    if args.installed:
        import importlib.metadata
        import importlib.util

        found = importlib.util.find_spec("transformers")
        root = Path(next(iter(found.submodule_search_locations or []))) if found else None
        if root is None:
            raise SystemExit("transformers is not installed")
        version = importlib.metadata.version("transformers")
        versions[version] = table(
            (root / "training_args.py").read_text("utf-8"),
            version,
            (root / "training_args_seq2seq.py").read_text("utf-8"),
        )
    ordered = dict(sorted(versions.items(), key=lambda kv: [int(p) for p in kv[0].split(".")]))
    body = {"generated_by": "scripts/training_args_versions.py", "versions": ordered}
    OUT.write_text(json.dumps(body, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({', '.join(ordered)})")


if __name__ == "__main__":
    main()
