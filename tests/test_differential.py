"""Differential test: cfgcheck's verdict against a real CPU training step, on generated configs.

Each generated case is a tiny run (a real BPE tokenizer folder, a small JSONL dataset, padding /
truncation / max_length / pad_to_multiple_of / collator / micro batch / block size) checked two
ways:

* cfgcheck: ``cfgcheck.validate`` plus the data-scan findings, exactly as
  ``cfgcheck check --scan-data`` does (``cfgcheck.data.check.with_scan_findings``); the verdict
  is "error" when any finding is an error.
* a real pipeline written here, independently of ``cfgcheck.runtime`` and ``cfgcheck.pipeline``:
  ``PreTrainedTokenizerFast`` loaded from the folder (the declared pad token set on it as a
  script would), one tokenizer call per sample with the config's padding / truncation /
  max_length / pad_to_multiple_of, then torch's ``default_collate``, transformers'
  ``DataCollatorWithPadding`` or a packing collator written below, a ``LlamaForCausalLM`` of the
  model shape, LitGPT's block-size guard, and forward + backward + AdamW on every batch.

They must agree: error <=> crash. Every fix of every config-level error is also applied and the
config checked again: the finding must go and no new error may appear.

A few dozen examples by default; ``CFGCHECK_DIFF_EXAMPLES=500`` runs more (and prints the tally
of agreements, misses and false alarms). Misses fail the test; false alarms fail it above 2 %.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cfgcheck  # noqa: E402
from cfgcheck.data.check import with_scan_findings  # noqa: E402
from tests.factories import CORPUS  # noqa: E402
from tests.real_pipeline import (  # noqa: E402
    TOKENIZERS,
    Case,
    apply_overrides,
    build_tokenizers,
    real_step,
    run_config,
)

EXAMPLES = int(os.environ.get("CFGCHECK_DIFF_EXAMPLES", "30"))
FALSE_ALARM_RATE = 0.02
WORDS = " ".join(CORPUS[:8]).split()

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_tokenizers(tmp_path_factory.mktemp("diff-tokenizers"))


def _texts(seed: int, count: int, longest: int) -> tuple[str, ...]:
    rng = random.Random(seed)
    return tuple(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, longest))) for _ in range(count)
    )


# --- generated cases ---
cases = st.builds(
    Case,
    tokenizer=st.sampled_from(TOKENIZERS),
    declared_pad=st.sampled_from([None, None, "</s>", "<nope>"]),
    padding=st.sampled_from(["longest", "max_length", "do_not_pad"]),
    truncation=st.booleans(),
    max_seq_length=st.integers(6, 48),
    max_length=st.one_of(st.none(), st.integers(6, 72)),
    pad_to_multiple_of=st.sampled_from([None, None, 4, 8, 12, 16]),
    collator=st.sampled_from(["default", "padded", "packed"]),
    micro_batch_size=st.integers(1, 3),
    block_size=st.sampled_from([16, 24, 32, 48, 64]),
    texts=st.builds(_texts, st.integers(0, 10**6), st.integers(1, 6), st.sampled_from([3, 8, 30])),
    shape=st.sampled_from([*[(32, 2, None)] * 5, (32, 4, 16), (30, 4, 8), (36, 8, 8)]),
)


def check_fixes(result: cfgcheck.CheckResult, cfg: dict[str, Any]) -> Iterator[str]:
    """Problems with the fixes of config-level errors: a fix that leaves its finding, or one
    that brings a new error."""
    before = {f.rule for f in result.errors}
    for finding in result.errors:
        for fix in finding.fixes:
            after = cfgcheck.validate(apply_overrides(cfg, fix.overrides))
            rules = {f.rule for f in after.errors}
            if finding.rule in rules:
                yield f"{finding.rule}: fix {fix.overrides} leaves the finding"
            if rules - before:
                yield f"{finding.rule}: fix {fix.overrides} brings {sorted(rules - before)}"


@dataclass
class Tally:
    total: int = 0
    misses: list[str] = field(default_factory=list)
    false_alarms: list[str] = field(default_factory=list)
    fix_problems: list[str] = field(default_factory=list)
    trained: int = 0  # configs whose real step trained (the rest crashed)
    rules: dict[str, int] = field(default_factory=dict)  # error rules seen, by count


TALLY = Tally()


# The default run asserts on every example; a larger run (CFGCHECK_DIFF_EXAMPLES above the
# default) counts them all and asserts the totals in test_tally, which runs after.
TALLY_ONLY = EXAMPLES > 30


def report() -> str:
    t = TALLY
    lines = [
        f"differential: {t.total} configs, {t.total - len(t.misses) - len(t.false_alarms)} "
        f"agree, {len(t.misses)} misses, {len(t.false_alarms)} false alarms, "
        f"{len(t.fix_problems)} fix problems; {t.trained} trained, {t.total - t.trained} "
        f"crashed; errors by rule: {dict(sorted(t.rules.items()))}",
        *(f"  miss: {m}" for m in t.misses[:10]),
        *(f"  false alarm: {m}" for m in t.false_alarms[:10]),
        *(f"  fix: {m}" for m in t.fix_problems[:10]),
    ]
    return "\n".join(lines)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 30,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=cases)
def test_verdict_agrees_with_a_real_step(
    case: Case, tokenizers: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tokenizers[case.tokenizer]
    data_file = tmp_path_factory.mktemp("diff-data") / "train.jsonl"
    data_file.write_text("".join(json.dumps({"text": t}) + "\n" for t in case.texts))
    cfg = run_config(case, folder, data_file)
    result = with_scan_findings(cfgcheck.validate(cfg))
    errors = [f"{f.rule}: {f.message[:160]}" for f in result.errors]
    crash = real_step(case, folder)
    TALLY.total += 1
    TALLY.trained += crash is None
    for f in result.errors:
        TALLY.rules[f.rule] = TALLY.rules.get(f.rule, 0) + 1
    shown = f"{case} -> cfgcheck {errors or 'ok'}, real step {crash or 'trains'}"
    if crash is not None and not errors:
        TALLY.misses.append(shown)
    elif crash is None and errors:
        TALLY.false_alarms.append(shown)
    problems = list(check_fixes(cfgcheck.validate(cfg), cfg))
    TALLY.fix_problems += [f"{p} ({case})" for p in problems]
    if TALLY_ONLY:
        return
    assert not TALLY.misses, TALLY.misses[0]
    assert not problems, problems
    allowed = max(1, int(FALSE_ALARM_RATE * max(TALLY.total, EXAMPLES)))
    assert len(TALLY.false_alarms) <= allowed, TALLY.false_alarms


def test_tally() -> None:
    """The totals of the run above: no miss, no broken fix, false alarms within 2 %."""
    if TALLY.total == 0:
        pytest.skip("the differential test did not run")
    sys.stderr.write(report() + "\n")
    assert not TALLY.misses, report()
    assert not TALLY.fix_problems, report()
    assert len(TALLY.false_alarms) <= FALSE_ALARM_RATE * TALLY.total, report()
