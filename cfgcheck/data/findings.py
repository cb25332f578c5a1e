"""Findings from a dataset scan: too long for the model, heavy truncation, samples left with
no label, empty samples, ids past the embedding rows, padding waste."""

from __future__ import annotations

from cfgcheck.data.report import ScanReport
from cfgcheck.data.summary import Sample
from cfgcheck.findings import Finding, Fix
from cfgcheck.pipeline import round_up
from cfgcheck.rules.sequence import length_fix
from cfgcheck.schema.run import RunConfig

TRUNCATED_WARN = 0.05  # share of samples cut by truncation that earns a warning
WASTE_INFO = 0.5  # share of padding positions in the configured scheme that earns an info

SCHEMES = {
    "max_length": "padding every sample to max_length",
    "longest": "padding each micro batch to its longest sample",
    "packed": "packing",
}
FIXES = {
    "max_length": "data.padding=max_length data.collator=default",
    "longest": "data.padding=longest data.collator=padded",
    "packed": "data.collator=packed data.padding=do_not_pad",
}


def findings_from_scan(report: ScanReport, run: RunConfig) -> list[Finding]:
    out: list[Finding] = []
    d = run.data
    block = report.block_size
    if report.over_block_count:
        fed = report.longest_fed
        where = f"{report.longest.file}:{report.longest.line}"
        if d.truncation:
            why = f"data.max_length={d.effective_max_length} is above model.block_size={block}"
            paths = ("data.max_length", "model.block_size")
        else:
            why = "data.truncation=false keeps every token"
            paths = ("data.truncation", "model.block_size")
        out.append(
            Finding(
                "data-longer-than-block-size",
                "error",
                paths,
                f"{report.over_block_count} of {report.samples} samples reach the model longer "
                f"than model.block_size={block} ({why}); the longest, {where}, has {fed} tokens: "
                f'LitGPT fails when its batch comes with "ValueError: Cannot attend to {fed}, '
                f'block size is only {block}", whatever data.max_seq_length says',
                f"set data.truncation=true and data.max_length<={block} (e.g. "
                f"data.max_length={min(d.max_seq_length, block)}), drop samples over {block} "
                f"tokens, or use data.collator=packed",
                fixes=length_fix(run),
            )
        )
    out += _labels(report, run) + _empty(report) + _ids(report)
    if d.truncation and report.samples:
        cut = report.truncated
        share = cut / report.samples
        if share > TRUNCATED_WARN or report.cut_share > TRUNCATED_WARN:
            pct = report.percentiles()
            target = round_up(pct["p99"], d.pad_to_multiple_of)
            fixes: tuple[Fix, ...] = ()
            if target <= block:
                fix = (
                    f"raise data.max_seq_length to {target} (the p99 length; it fits "
                    f"model.block_size={block})"
                )
                fixes = (
                    Fix(
                        (f"data.max_seq_length={target}", f"data.max_length={target}"),
                        "truncate at the p99 length",
                    ),
                )
            else:
                fix = (
                    f"use data.collator=packed, or split samples longer than {block} tokens "
                    f"(no single setting keeps them whole within model.block_size={block})"
                )
            out.append(
                Finding(
                    "data-truncated",
                    "warning",
                    ("data.max_length", "data.max_seq_length", "data.truncation"),
                    f"{cut} of {report.samples} samples ({share:.1%}{_interval(report)}) are "
                    f"longer than max_length={report.max_length} and lose their tail "
                    f"(p99={pct['p99']}, max={pct['max']} tokens), {report.cut_share:.1%} of "
                    f"all tokens ({report.tokens_cut:,}): in instruction data the tail is the "
                    f"response the model should learn",
                    fix,
                    fixes=fixes,
                )
            )
    configured = report.configured
    waste = report.waste.get(configured)
    if waste is not None and waste.share > WASTE_INFO:
        others = ", ".join(
            f"{SCHEMES[k]} {w.share:.0%}" for k, w in report.waste.items() if k != configured
        )
        best = min(report.waste, key=lambda k: report.waste[k].share)
        out.append(
            Finding(
                "data-padding-waste",
                "info",
                ("data.padding", "data.collator", "trainer.micro_batch_size"),
                f"{SCHEMES[configured]} (data.padding={d.padding}, data.collator={d.collator}, "
                f"trainer.micro_batch_size={report.micro_batch_size}) makes "
                f"{waste.share:.0%} of the positions padding ({waste.slots - waste.tokens:,} "
                f"of {waste.slots:,}); {others} ({report.summary.packed_rows:,} packed rows of "
                f"{d.max_seq_length})",
                f"{SCHEMES[best]} wastes {report.waste[best].share:.0%}: {FIXES[best]}",
            )
        )
    return out


def _interval(report: ScanReport) -> str:
    """With --sample: the 95 % Wilson interval of the share, for the whole dataset."""
    interval = report.over_length_interval()
    if interval is None or report.sampling is None:
        return ""
    lo, hi = interval
    return f"; 95% Wilson interval {lo:.1%}-{hi:.1%} from a {report.sampling.describe()} sample"


def _where(samples: list[Sample], count: int) -> str:
    shown = ", ".join(f"{s.file}:{s.line}" for s in samples)
    return shown + (" ..." if count > len(samples) else "")


def _labels(report: ScanReport, run: RunConfig) -> list[Finding]:
    """Samples with no label left after truncation: the loss of a micro batch of only such
    samples is NaN in transformers (cross-entropy averaged over zero labels, reproduced in
    tests/test_data_scan_findings.py); TRL's SFTTrainer drops them instead
    (trl/trainer/sft_trainer.py, "Dropping fully masked examples", TRL 1.16)."""
    s, d = report.summary, run.data
    if not s.no_targets:
        return []
    if d.masks_completion:
        masked = "the completion's tokens" + (
            ", the assistant's only" if d.assistant_only_loss else ""
        )
    else:
        masked = "the assistant's tokens" if d.assistant_only_loss else "tokens after the first"
    fixable = s.no_targets - s.no_targets_ever
    if fixable and s.no_targets_need and s.no_targets_need <= report.block_size:
        length = round_up(s.no_targets_need, d.pad_to_multiple_of)
        fix = (
            f"raise data.max_length (and data.max_seq_length) to at least {length}, which keeps "
            f"a label in each, or drop these samples"
        )
    else:
        fix = "drop these samples before training (no length setting gives them a label)"
    return [
        Finding(
            "data-no-labels",
            "warning",
            (
                "data.max_length",
                "data.max_seq_length",
                "data.assistant_only_loss",
                "data.completion_only_loss",
            ),
            f"{s.no_targets} of {report.samples} samples have no label left after truncation "
            f"to {report.max_length} tokens (labels: {masked}); "
            f"{_where(s.no_targets_at, s.no_targets)}: a micro batch of only such samples "
            f"gives loss NaN in transformers (cross-entropy over zero labels), and TRL's "
            f"SFTTrainer drops them",
            fix,
        )
    ]


def _empty(report: ScanReport) -> list[Finding]:
    s = report.summary
    if not s.empty:
        return []
    return [
        Finding(
            "data-empty-samples",
            "warning",
            ("data.paths",),
            f"{s.empty} of {report.samples} samples have an empty text "
            f"({_where(s.empty_at, s.empty)}): they train on the special tokens alone",
            "drop records whose text is empty, or fix data.text_field / data.template / "
            "data.messages_field / data.prompt_field if it names the wrong field",
        )
    ]


def _ids(report: ScanReport) -> list[Finding]:
    s = report.summary
    if not s.over_vocab:
        return []
    rows = report.embedding_rows
    return [
        Finding(
            "data-ids-over-embedding",
            "error",
            ("model.vocab_size", "model.padded_vocab_size", "tokenizer.path"),
            f"{s.over_vocab} of {report.samples} samples hold token ids at or above the model's "
            f"{rows} embedding rows (the largest, {s.max_id}; "
            f"{_where(s.over_vocab_at, s.over_vocab)}): "
            f'the embedding lookup fails ("IndexError: index out of range in self" on CPU, a '
            f"device-side assert on CUDA)",
            f"give the model at least {s.max_id + 1} embedding rows (model.padded_vocab_size, "
            f"resize_token_embeddings after adding tokens), or use the tokenizer the model was "
            f"trained with",
        )
    ]
