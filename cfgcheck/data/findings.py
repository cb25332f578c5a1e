"""Findings from a dataset scan: too long for the model, heavy truncation, padding waste."""

from __future__ import annotations

from cfgcheck.data.report import ScanReport
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
    if d.truncation and report.samples:
        cut = report.truncated
        share = cut / report.samples
        if share > TRUNCATED_WARN:
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
                    f"{cut} of {report.samples} samples ({share:.1%}) are longer than "
                    f"max_length={report.max_length} and lose their tail (p99={pct['p99']}, "
                    f"max={pct['max']} tokens): in instruction data the tail is the response "
                    f"the model should learn",
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
                f"of {waste.slots:,}); {others}",
                f"{SCHEMES[best]} wastes {report.waste[best].share:.0%}: {FIXES[best]}",
            )
        )
    return out
