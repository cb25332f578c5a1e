"""A corpus of hostile and careless inputs, shared by the CLI and service fuzz suites.

Each entry is data only (what to write, which override to pass); the suites decide how to
feed it. ``CFGCHECK_FUZZ_EXAMPLES`` raises the hypothesis example counts (default small, so
CI stays fast): ``CFGCHECK_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz_*.py``.
"""

from __future__ import annotations

import os

FUZZ_EXAMPLES = int(os.environ.get("CFGCHECK_FUZZ_EXAMPLES", "30"))


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """A ~1 KB document whose aliases expand to ``width ** levels`` values."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


# name -> bytes of a YAML config file. Every one must give exit 2 and one line (or a finding),
# never a traceback, never a hang.
CONF_FILES: dict[str, bytes] = {
    "block-nesting-30k": ("- " * 30000 + "1\n").encode(),
    "flow-nesting-30k": ("a: " + "[" * 30000 + "]" * 30000 + "\n").encode(),
    "mapping-nesting-300": "".join(f"{' ' * i}k{i}:\n" for i in range(300)).encode() + b"x\n",
    "flow-map-nesting": ("a: " + "{b: " * 5000 + "1" + "}" * 5000 + "\n").encode(),
    "alias-bomb": alias_bomb().encode(),
    "100k-keys": "".join(f"k{i}: {i}\n" for i in range(100_000)).encode(),
    "utf16": "name: x\n".encode("utf-16"),
    "utf16-le-no-bom": "name: x\n".encode("utf-16-le"),
    "latin1": "name: caf\xe9\n".encode("latin-1"),
    "cp1252": "name: \u201cquoted\u201d\n".encode("cp1252"),
    "binary-tag": b"name: !!binary aGVsbG8=\n",
    "python-tag": b"name: !!python/object/apply:os.system [echo hi]\n",
    "custom-tag": b"name: !secret x\n",
    "scalar-top": b"42\n",
    "list-top": b"- a\n- b\n",
    "defaults-42": b"defaults: 42\n",
    "310-digit-int": b"block_size: " + b"9" * 310 + b"\n",
    "5000-digit-int": b"block_size: " + b"9" * 5000 + b"\n",
    "inf": b"block_size: .inf\n",
    "nul-bytes": b"name: a\x00b\n",
    "malformed": b"name: [1,\n",
    "multi-doc": b"a: 1\n---\nb: 2\n",
    "long-key": b"k" * 5000 + b": 1\n",
    "empty": b"",
}

# Files that are accepted (sanity: the screen is not over-eager).
GOOD_FILES: dict[str, bytes] = {
    "utf8-bom": "\ufeffname: caf\xe9\n".encode(),
    "plain": b"name: x\nblock_size: 2048\n",
    "small-aliases": b"a: &a [1, 2]\nb: *a\n",
}

# Overrides (the CLI's command line, the service's "overrides" list).
OVERRIDES: list[list[str]] = [
    ["model=null"],
    ["trainer=null"],
    ["model=[tinyllama-1.1b,../../../outside/evil]"],
    ["+model=[tinyllama-1.1b,../../x]"],
    ["model={a: ../../x}"],
    ["model=../../../etc/passwd"],
    ["k" * 300 + "=1"],
    ["model=" + "x" * 300],
    ["data.paths=[" + ",".join(["a"] * 8000) + "]"],  # a 16 KB list override
    ["data.paths=" + "[" * 500 + "]" * 500],
    ["name=" + "${" * 200 + "a" + "}" * 200],
    ["name='" + "${a}" * 300 + "'"],
    ["trainer.learning_rate=inf"],
    ["trainer.lora.alpha=inf"],
    ["model.block_size=1" + "0" * 400],
    ["model.block_size=nan"],
    ["defaults=42"],
    ["data.paths=42"],
    ["hydra.searchpath=[file:///etc]"],
    ["\udcff=1"],
]

SWEEPS: list[list[str]] = [
    ["trainer.seed=range(0,100000000)"],
    ["trainer.seed=range(0,1,0)"],
    ["trainer.seed=range(0,10)", "model.block_size=range(1,100000)"],
]

# Values every schema field is tried with (beside the field's own wrong types).
BAD_VALUES: list[object] = [
    float("inf"),
    float("-inf"),
    float("nan"),
    10**400,
    -(10**400),
    2**63,
    "x" * 10_000,
    "",
    [],
    {},
    None,
    True,
    [[[[[]]]]],
    {"a": {"b": {"c": 1}}},
    "${oc.env:HOME}",
]
