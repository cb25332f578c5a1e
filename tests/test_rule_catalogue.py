"""One rule catalogue: every finding id any code path can emit has an entry in
``cfgcheck/rules/explanations.py`` (so ``cfgcheck rules`` lists it, ``cfgcheck explain`` explains
it and docs/rules.md has its anchor), and every entry is an id something emits.

The ids are discovered two ways, so a new id without an entry fails here whoever adds it:

- from the source: every ``Finding(...)`` construction in the package (its first argument, a
  string literal or a module constant), every helper that forwards its own parameter to
  ``Finding`` (then each call of that helper), every ``@rule("id")`` registration, every
  ``rule="id"`` keyword; a construction whose id cannot be read this way fails the test;
- by running checks: a corpus of failing configs (the shipped ``conf/`` with overrides, the
  native formats' copied upstream configs with overrides, a dataset scan, a model folder) and
  every finding id they report.
"""

from __future__ import annotations

import ast
import contextlib
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from cfgcheck.findings import CheckResult
from cfgcheck.rules import all_rules, explanations
from cfgcheck.rules.explanations import EXPLANATIONS, anchor, doc_link, emitted_ids
from tests.conftest import REPO, run_cfgcheck

PACKAGE = REPO / "cfgcheck"
RULES_MD = REPO / "docs" / "rules.md"

# Finding constructions whose id is not a literal by design, and why that is covered.
INDIRECT = {
    # Rule.check stamps each Problem with its registered id: the @rule ids, found below.
    ("cfgcheck/rules/_registry.py", "self.id"),
}


@dataclass
class Discovery:
    ids: dict[str, list[str]] = field(default_factory=dict)  # id -> where (file:line)
    unresolved: list[tuple[str, str, int]] = field(default_factory=list)

    def add(self, rule_id: str, where: str) -> None:
        self.ids.setdefault(rule_id, []).append(where)


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "literal"`` assignments."""
    out: dict[str, str] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _id_argument(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


@cache
def discover_from_source() -> Discovery:
    trees = {
        str(p.relative_to(REPO)): ast.parse(p.read_text(encoding="utf-8"))
        for p in sorted(PACKAGE.rglob("*.py"))
    }
    # name -> (position, keyword) of the finding id among its arguments
    emitters: dict[str, tuple[int, str]] = {"Finding": (0, "rule")}
    found = Discovery()
    changed = True
    while changed:  # helpers that forward a parameter to an emitter are emitters too
        changed = False
        found = Discovery()
        for file, tree in trees.items():
            consts = _constants(tree)
            for func in [None, *_functions(tree)]:
                body = tree if func is None else func
                params = [] if func is None else [a.arg for a in func.args.args]
                for node in ast.walk(body):
                    if not isinstance(node, ast.Call) or _callee(node) not in emitters:
                        continue
                    index, keyword = emitters[_callee(node) or ""]
                    arg = _id_argument(node, index, keyword)
                    where = f"{file}:{node.lineno}"
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        found.add(arg.value, where)
                    elif isinstance(arg, ast.Name) and arg.id in consts:
                        found.add(consts[arg.id], where)
                    elif isinstance(arg, ast.Name) and func is not None and arg.id in params:
                        if func.name not in emitters:
                            emitters[func.name] = (params.index(arg.id), arg.id)
                            changed = True
                    elif func is not None and arg is not None:
                        found.unresolved.append((file, ast.unparse(arg), node.lineno))
    for file, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            where = f"{file}:{node.lineno}"
            first = node.args[0] if node.args else None
            if (
                _callee(node) == "rule"
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                found.add(first.value, where)  # @rule("id", requires=...)
            for k in node.keywords:
                if (
                    k.arg == "rule"
                    and isinstance(k.value, ast.Constant)
                    and isinstance(k.value.value, str)
                ):
                    found.add(k.value.value, where)  # dataclasses.replace(f, rule="id")
    # Nested calls inside module-level code are visited for each enclosing function too.
    found.unresolved = sorted(set(found.unresolved))
    return found


def test_the_source_scan_finds_the_known_emitters() -> None:
    """The scan itself works: it sees registered rules, schema findings, helpers that forward
    an id (LitGPT's _finding), module constants (unknown-native-key) and scan findings."""
    ids = discover_from_source().ids
    for rule_id in (
        "seq-len-over-block-size",
        "unknown-key",
        "litgpt-quantize-optimizer",
        "unknown-native-key",
        "pretrained-shape-mismatch",
        "data-scan-skipped",
    ):
        assert rule_id in ids, rule_id


def test_every_finding_id_in_the_source_has_an_entry() -> None:
    found = discover_from_source()
    unresolved = [
        f"{file}:{line}: Finding({expr}, ...)"
        for file, expr, line in found.unresolved
        if (file, expr) not in INDIRECT
    ]
    assert not unresolved, (
        "a finding id this test cannot read: pass a string literal or a module constant "
        "(or a helper's parameter that callers fill with one)",
        unresolved,
    )
    missing = {i: w for i, w in found.ids.items() if i not in EXPLANATIONS}
    assert not missing, f"add an entry to cfgcheck/rules/explanations.py for each: {missing}"


def test_every_entry_is_emitted_by_something() -> None:
    emitted = set(discover_from_source().ids) | {r.id for r in all_rules()}
    stale = [i for i in EXPLANATIONS if i not in emitted]
    assert not stale, f"entries for ids nothing emits (remove them): {stale}"


def test_every_registered_rule_has_an_entry() -> None:
    assert explanations.missing_ids() == [], "add them to cfgcheck/rules/explanations.py"
    for rule_id, e in EXPLANATIONS.items():
        assert e.severity and e.checks and e.prevents and e.fix, rule_id
        assert e.group in explanations.GROUPS, (rule_id, e.group)


def test_profile_adjustments_name_catalogued_ids() -> None:
    """The frameworks' rule profiles refer to findings by id: each one exists."""
    from cfgcheck.sources import profiles

    for value in vars(profiles).values():
        if isinstance(value, profiles.Profile):
            for adj in value.adjustments:
                assert adj.rule in EXPLANATIONS, (value.name, adj.rule)


# --- ids found by running checks --------------------------------------------------------------

NATIVE = REPO / "tests" / "sources" / "native"
_TT_LORA = "llama3_2_1B_lora_single_device.yaml"
_TORCHTUNE_CORPUS: list[tuple[str, str, tuple[str, ...]]] = [
    ("torchtune", _TT_LORA, ("collate_fn=torch.utils.data.default_collate", "~batch_size")),
    ("torchtune", "phi3_mini_lora_single_device.yaml", ("tokenizer.max_seq_len=8192",)),
    ("torchtune", _TT_LORA, ("dataset.packed=true", "dtype=bfloat16")),
    (
        "torchtune",
        _TT_LORA,
        ("model.lora_attn_modules=[o_proj]", "model.apply_lora_to_output=true"),
    ),
    (
        "torchtune",
        _TT_LORA,
        (
            "model.lora_rnak=16",
            "~tokenizer.path",
            "loss._component_=torchtune.modules.loss.LinearCrossEntropyLos",
        ),
    ),
    ("torchtune", _TT_LORA, ("dtype=fp16", "enable_activation_offloading=true")),
    ("torchtune", "planted/single_device_under_torchrun.yaml", ()),
]
NATIVE_CORPUS: list[tuple[str, str, tuple[str, ...]]] = [
    ("litgpt", "tiny-llama-lora.yaml", ("quantize=bnb.nf4", "precision=bf16-mixed")),
    ("litgpt", "tiny-llama-lora.yaml", ("quantize=bnb.nf4", "devices=2", "optimizer=SGD")),
    ("litgpt", "tiny-llama-lora.yaml", ("train.global_batch_size=1", "devices=2")),
    ("litgpt", "tiny-llama-lora.yaml", ("train.max_seq_lenght=2048",)),
    ("axolotl", "llama-2-qlora-fsdp.yml", ("deepspeed=deepspeed_configs/zero2.json",)),
    ("axolotl", "llama-2-qlora-fsdp.yml", ("optimizer=adamw_bnb_8bit", "fsdp_version=2")),
    ("axolotl", "mistral-lora.yml", ("cut_cross_entropy=true", "chunked_cross_entropy=true")),
    ("axolotl", "mistral-lora.yml", ("~attn_implementation", "sequence_length=2048")),
    ("axolotl", "mistral-lora.yml", ("sequence_len=40000",)),
    ("axolotl", "mistral-lora.yml", ("gptq=true",)),
    ("trl", "example_config.yaml", ("max_seq_length=4096",)),
    (
        "python",
        "scripts/peft_dora_finetuning.py",
        ("load.pretrained_model_name_or_path=meta-llama/Llama-2-7b-hf",),
    ),
    *_TORCHTUNE_CORPUS,
    ("launch", "seed/planted.sh", ("deepspeed=missing.json", "fp16=true", "bf16=true")),
    ("launch", "seed/two_stages.sh", ()),
    ("launch", "seed/train.sh", ("deepspeed=ds_batch4.json", "per_device_train_batch_size=1")),
    ("launch", "seed/dschat_lora.sh", ()),
    ("launch", "seed/clm.sh", ()),
]
# TRL: (file under tests/sources/native/trl, overrides, command-line options).
TRL_ZERO3 = {"accelerate_config": str(NATIVE / "trl" / "accelerate" / "ah-zero3.yaml")}
TRL_GRPO = "open-r1/Qwen2.5-1.5B-Instruct--grpo--config_demo.yaml"
TRL_CORPUS: list[tuple[str, tuple[str, ...], dict[str, str]]] = [
    ("example_config.yaml", ("padding_free=true",), {}),
    ("example_config.yaml", ("padding_free=true",), {"framework_version": "0.20.0"}),
    ("example_config.yaml", ("max_length=65536",), {}),
    ("example_config.yaml", ("fp16=true", "bf16=true"), {}),
    ("example_config.yaml", ("packing=true", "max_length=null"), {}),
    ("example_config.yaml", ("use_peft=true", "lora_target_modules=[q_proj,lm_head]"), {}),
    (
        TRL_GRPO,
        ("model_name_or_path=Qwen/Qwen2.5-1.5B", "num_generations=24"),
        {"framework_version": "0.18.0", **TRL_ZERO3},
    ),
    # the same recipe on TRL 1.16: GRPOTrainer truncates no prompt
    (TRL_GRPO, ("model_name_or_path=Qwen/Qwen2.5-1.5B",), {"framework_version": "1.16.0"}),
]
# LLaMA-Factory resolves deepspeed and dataset_dir against the folder llamafactory-cli runs in:
# these run from tests/sources/native/llamafactory, LLaMA-Factory's own layout.
LF_SFT = "examples/train_lora/llama3_lora_sft.yaml"
LLAMAFACTORY_CORPUS: list[tuple[str, tuple[str, ...]]] = [
    (LF_SFT, ("stage=dpo", "neat_packing=true")),
    (LF_SFT, ("finetuning_type=full", "use_dora=true")),
    (LF_SFT, ("use_galore=true",)),
    (LF_SFT, ("stage=ppo",)),
    (LF_SFT, ("quantization_bit=3",)),
    (LF_SFT, ("quantization_bit=4", "pissa_init=true")),
    (LF_SFT, ("deepspeed=examples/deepspeed/ds_z3_config.json", "pure_bf16=true")),
    (LF_SFT, ("streaming=true",)),
    (LF_SFT, ("stage=sftt",)),
    (LF_SFT, ("template=llama33",)),
    (LF_SFT, ("dataset=identity,alpaca_en_dem",)),
    (LF_SFT, ("dataset_dir=examples",)),
    (LF_SFT, ("deepspeed=examples/deepspeed/nope.json",)),
    (LF_SFT, ("~do_train",)),
    (LF_SFT, ("~dataset",)),
    (LF_SFT, ("do_eval=true",)),
    (LF_SFT, ("packing=true",)),
    ("examples/train_full/llama3_full_sft.yaml", ("quantization_bit=4",)),
    ("examples/extras/fp8/llama3_fp8_fsdp_sft.yaml", ()),
    # a v1 file: fsdpturbo with a dense model
    (
        "examples/v1/train_full/train_full_qwen3_moe_fsdpturbo_ep_fsdp.yaml",
        ("model=Qwen/Qwen3-8B",),
    ),
]


def _run_corpus() -> Iterator[tuple[str, CheckResult]]:
    from cfgcheck.compose_cache import compose_cached
    from cfgcheck.data.check import with_scan_findings
    from cfgcheck.sources import check_native
    from cfgcheck.validate import validate
    from tests.conftest import CONF
    from tests.test_fixes_corpus import CORPUS

    for name, overrides in CORPUS.items():
        yield name, validate(compose_cached(CONF, "config", overrides))
    for fmt, file, overrides in NATIVE_CORPUS:
        yield f"{fmt} {file} {overrides}", check_native(NATIVE / fmt / file, fmt, overrides)
    for file, overrides, options in TRL_CORPUS:
        result = check_native(NATIVE / "trl" / file, "trl", overrides, options=options)
        yield f"trl {file} {overrides} {options}", result
    with tempfile.TemporaryDirectory() as tmp:  # a DeepSpeed JSON whose batch disagrees
        ds = Path(tmp) / "ds.json"
        ds.write_text('{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 3}}')
        sft = Path(tmp) / "sft.yaml"
        sft.write_text(
            "model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\n"
            f"per_device_train_batch_size: 2\ndeepspeed: {ds}\n"
        )
        yield "trl deepspeed", check_native(sft, "trl", gpu="H100")
    with contextlib.chdir(NATIVE / "llamafactory"):
        for file, overrides in LLAMAFACTORY_CORPUS:
            yield f"llamafactory {file} {overrides}", check_native(file, "llamafactory", overrides)
    scans = {
        "scan": ("tokenizer=demo-bpe", "data.max_seq_length=64", "data.truncation=false"),
        "scan-no-tokenizer": (),
    }
    for name, overrides in scans.items():
        composed = compose_cached(CONF, "config", overrides)
        yield name, with_scan_findings(validate(composed))


def test_every_id_reported_by_a_corpus_of_checks_has_an_entry() -> None:
    seen: dict[str, str] = {}
    for name, result in _run_corpus():
        for f in result.findings:
            seen.setdefault(f.rule, name)
    missing = {i: name for i, name in seen.items() if i not in EXPLANATIONS}
    assert not missing, f"ids reported without an entry (first config): {missing}"
    # The corpus reaches every group of findings, native ones included.
    assert {explanations.group(i) for i in seen} >= {
        explanations.SCHEMA,
        explanations.RULES,
        explanations.SCAN,
        explanations.NATIVE,
    }, sorted(seen)
    assert {i for i in seen if explanations.group(i) == explanations.NATIVE} == {
        i for i in EXPLANATIONS if explanations.group(i) == explanations.NATIVE
    }, "each native id has a config in NATIVE_CORPUS that reports it"


# --- the catalogue's three outputs ------------------------------------------------------------


def _anchors(markdown: str) -> set[str]:
    return {
        anchor(line.lstrip("#").strip()) for line in markdown.splitlines() if line.startswith("#")
    }


def test_every_doc_link_points_at_an_anchor_of_docs_rules_md() -> None:
    anchors = _anchors(RULES_MD.read_text(encoding="utf-8"))
    for rule_id in [*emitted_ids(), *discover_from_source().ids]:
        link = doc_link(rule_id)
        assert link.startswith("docs/rules.md#"), link
        assert link.split("#", 1)[1] in anchors, link


def test_rules_and_explain_cover_the_native_ids() -> None:
    listed = run_cfgcheck("rules", "--format", "json")
    rows = {r["rule"]: r for r in json.loads(listed.stdout)}
    for rule_id in ("unknown-native-key", "litgpt-batch-too-small", "trl-max-length-truncates"):
        assert rows[rule_id]["severity"] and rows[rule_id]["doc"] == doc_link(rule_id)
    proc = run_cfgcheck("explain", "unknown-native-key")
    assert proc.returncode == 0, proc.stderr
    assert "Unknown arguments from config file" in proc.stdout
    assert "docs/rules.md#unknown-native-key" in proc.stdout
