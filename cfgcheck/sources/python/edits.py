"""Fixes of a run written as code, as edits of that code, each verified by reading it again.

A rule's fix is a cfgcheck override (``data.padding=max_length``); :func:`native_change`
writes it as the argument of the call that set the value (``tokenize.padding="max_length"``),
and :func:`with_edits` turns each such change into a :class:`~cfgcheck.findings.CodeEdit`:
the keyword's value replaced where it is written, or ``, keyword=value`` inserted after the
call's last argument where it is not (plus the import a new name needs). The edited file is
then read and checked again, exactly as the original was; a fix is kept only when the
finding is gone and no new error appears.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
from typing import TYPE_CHECKING

from cfgcheck.errors import ConfigLoadError
from cfgcheck.findings import CodeEdit, Finding, Fix, Location
from cfgcheck.sources.code import CodeFile, Unit

if TYPE_CHECKING:
    from cfgcheck.sources.native import Loaded
    from cfgcheck.sources.python import CodeConfig

MAX_VERIFIED = 24  # fixes re-checked per file

# cfgcheck path -> the native keys that can carry it, first present wins.
_KEYS: dict[str, tuple[str, ...]] = {
    "trainer.micro_batch_size": ("args.per_device_train_batch_size", "loader.batch_size"),
    "trainer.gradient_accumulation_steps": (
        "args.gradient_accumulation_steps",
        "lightning.accumulate_grad_batches",
    ),
    "trainer.learning_rate": ("args.learning_rate",),
    "trainer.lora.rank": ("peft.r",),
    "trainer.lora.alpha": ("peft.lora_alpha",),
    "trainer.lora.targets": ("peft.target_modules",),
    "trainer.lora.target_parameters": ("peft.target_parameters",),
    "data.padding": ("tokenize.padding",),
    "data.truncation": ("tokenize.truncation",),
    "data.max_length": ("tokenize.max_length",),
    "data.pad_to_multiple_of": ("tokenize.pad_to_multiple_of",),
}
_IMPORTS = {
    "DataCollatorForSeq2Seq": "from transformers import DataCollatorForSeq2Seq",
    "padded_collate_sft": "from torchtune.data import padded_collate_sft",
}


def _python(value: str) -> str:
    """A Hydra override value as a Python literal (``max_length`` -> ``"max_length"``)."""
    from cfgcheck.sources.reader import parse_override

    try:
        _, parsed = parse_override(f"x={value}")
    except ConfigLoadError:
        return repr(value)
    return repr(parsed)


def native_change(native: CodeConfig, path: str, value: str) -> str | None:
    """``group.keyword=<python>`` for the cfgcheck override ``path=value``; ``""`` when the
    code needs no change for it; None when the code cannot express it."""
    groups = native.collected.calls
    if path == "data.collator" and value == "padded":
        if "loader" in groups and "trainer" not in groups:
            return "loader.collate_fn=padded_collate_sft"
        if "trainer" in groups:
            tokenizer = _tokenizer_name(native)
            return f"trainer.data_collator=DataCollatorForSeq2Seq({tokenizer})"
        return None
    if path == "data.max_seq_length":
        key = native.path_keys.get(path)
        return f"{key}={_python(value)}" if key and key in native.collected.sites else ""
    if path == "trainer.gradient_checkpointing":
        if native.collected.notes.get("peft") == "unsloth":
            flag = '"unsloth"' if value == "true" else "False"
            return f"peft.use_gradient_checkpointing={flag}"
        return f"args.gradient_checkpointing={_python(value).title()}" if "args" in groups else None
    if path == "trainer.precision" and "args" in groups:
        precision_flag = {"16-mixed": "fp16", "bf16-mixed": "bf16"}.get(value)
        return f"args.{precision_flag}=True" if precision_flag else None
    if path == "trainer.precision" and "lightning" in groups:
        return f"lightning.precision={value!r}"
    for key in _KEYS.get(path, ()):
        if key.split(".")[0] in groups:
            literal = _python(value)
            if path == "data.truncation":
                literal = literal.title() if literal in ("true", "false") else literal
            return f"{key}={literal}"
    return None


def _tokenizer_name(native: CodeConfig) -> str:
    call = native.collected.calls.get("tokenize")
    if call is not None:
        root = call.written.split(".")[0]
        if root.isidentifier():
            return root
    return "tokenizer"


def _edits_of(native: CodeConfig, change: str) -> list[CodeEdit] | None:
    key, _, code = change.partition("=")
    site = native.collected.sites.get(key)
    if site is None or native.code is None:
        return None
    call = site.call
    unit = call.unit
    keyword = site.keyword
    out: list[CodeEdit] = []
    if site.arg is not None:
        node = site.arg.node
        old = ast.get_source_segment(unit.source, node) or ""
        if site.arg.location.cell != _loc(native, unit, node.lineno).cell or old == "":
            return None  # the value was written elsewhere (a **dict): not edited in place
        if old == code:
            return []  # already so
        out.append(
            CodeEdit(
                _loc(native, unit, node.lineno),
                (node.lineno, node.col_offset),
                (node.end_lineno or node.lineno, node.end_col_offset or node.col_offset),
                old,
                code,
            )
        )
    else:
        last = _last_argument(call.node)
        if last is not None:
            line, col = last.end_lineno or last.lineno, last.end_col_offset or 0
            text = f", {keyword}={code}"
        else:
            line = call.node.end_lineno or call.node.lineno
            col = (call.node.end_col_offset or 1) - 1
            text = f"{keyword}={code}"
        out.append(CodeEdit(_loc(native, unit, line), (line, col), (line, col), "", text))
    for name, statement in _IMPORTS.items():
        if name in code and not _imports(unit, name):
            out.append(CodeEdit(_loc(native, unit, 1), (1, 0), (1, 0), "", statement + "\n"))
    return out


def _imports(unit: Unit, name: str) -> bool:
    for node in ast.walk(unit.tree):
        if isinstance(node, ast.ImportFrom) and any(
            (a.asname or a.name) == name for a in node.names
        ):
            return True
    return False


def _last_argument(call: ast.Call) -> ast.expr | ast.keyword | None:
    nodes: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    if not nodes:
        return None
    return max(nodes, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))


def _code(native: CodeConfig) -> CodeFile:
    if native.code is None:
        raise TypeError("a code config without its code")
    return native.code


def _loc(native: CodeConfig, unit: Unit, line: int) -> Location:
    return _code(native).location(unit, line)


def apply(source: str, edits: list[CodeEdit]) -> str:
    """``source`` with ``edits`` applied (later positions first, so earlier ones stay put)."""
    lines = source.split("\n")
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        (l1, c1), (l2, c2) = edit.start, edit.end
        head = "\n".join([*lines[: l1 - 1], lines[l1 - 1][:c1]]) if l1 <= len(lines) else source
        tail_line = lines[l2 - 1][c2:] if l2 <= len(lines) else ""
        tail = "\n".join([tail_line, *lines[l2:]])
        lines = (head + edit.new + tail).split("\n")
    return "\n".join(lines)


def edited_text(native: CodeConfig, edits: list[CodeEdit]) -> str:
    """The whole file (script text or notebook JSON) with ``edits`` applied."""
    code = _code(native)
    by_unit: dict[int | None, list[CodeEdit]] = {}
    for edit in edits:
        by_unit.setdefault(edit.location.cell, []).append(edit)
    if not code.notebook:
        return apply(code.units[0].source, by_unit.get(None, []))
    raw = copy.deepcopy(code.raw or {})
    cells = raw.get("cells", [])
    for cell, cell_edits in by_unit.items():
        if cell is None or not 0 <= cell < len(cells):
            continue
        source = cells[cell].get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        cells[cell]["source"] = apply(text, cell_edits)
    return json.dumps(raw)


def with_edits(loaded: Loaded, findings: list[Finding]) -> list[Finding]:
    """Each fix of ``findings`` as code edits, kept when the edited code clears the finding."""
    from cfgcheck.sources.python import CodeConfig

    native = loaded.native
    if not isinstance(native, CodeConfig) or native.code is None:
        return findings
    budget = MAX_VERIFIED
    out: list[Finding] = []
    before_errors = {(f.rule, f.paths) for f in findings if f.severity == "error"}
    for f in findings:
        if not f.fixes:
            out.append(f)
            continue
        fixes: list[Fix] = []
        for fix in f.fixes:
            edits: list[CodeEdit] = []
            for change in fix.overrides:
                found = _edits_of(native, change)
                if found is None:
                    edits = []
                    break
                edits += found
            if not any(e.old != e.new for e in edits) or budget <= 0:
                continue
            budget -= 1
            if _verified(native, loaded, f, edits, before_errors):
                fixes.append(dataclasses.replace(fix, edits=tuple(edits)))
        hint = f.hint.split(f" (in {native.file}:")[0]
        if fixes:
            hint += "; in the code: " + "; ".join(
                str(e) for e in fixes[0].edits if e.old or "import" not in e.new
            )
        out.append(dataclasses.replace(f, fixes=tuple(fixes), hint=hint))
    return out


def _verified(
    native: CodeConfig,
    loaded: Loaded,
    finding: Finding,
    edits: list[CodeEdit],
    before: set[tuple[str, tuple[str, ...]]],
) -> bool:
    from cfgcheck.sources.native import check_loaded
    from cfgcheck.sources.python import load_text

    try:
        text = edited_text(native, edits)
        again = load_text(text, _code(native).file, native.overrides, native.cli_gpu, verify=False)
        result = check_loaded(again)
    except ConfigLoadError:
        return False
    same_rule = [g for g in result.findings if g.rule == finding.rule]
    new = [g for g in result.findings if g.severity == "error" and (g.rule, g.paths) not in before]
    return not same_rule and not new
