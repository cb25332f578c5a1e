"""Scan findings added to a check result (``cfgcheck check --scan-data``)."""

from __future__ import annotations

from dataclasses import replace

from cfgcheck.data.sample import Sampling
from cfgcheck.data.scan import (
    DataNotLocalError,
    EngineError,
    NoChatTemplateError,
    NoTokenizerPathError,
    ScanError,
    ScanReport,
    scan_dataset,
    scan_findings,
)
from cfgcheck.findings import CheckResult, Finding, sort_findings
from cfgcheck.pipeline import Pipeline
from cfgcheck.schema.run import RunConfig


def with_scan_findings(
    result: CheckResult,
    *,
    jobs: int | None = None,
    quiet: bool = False,
    sample: Sampling | None = None,
    engine: str = "local",
    ray_address: str | None = None,
) -> CheckResult:
    """``result`` plus the findings of a dataset scan (over ``jobs`` processes, default all
    cores; ``sample``, ``engine`` and ``ray_address`` as :func:`scan_dataset` takes them).
    Nothing is scanned when the schema rejected the config or the tokenizer files are
    unreadable (already a finding). An :class:`EngineError` (Ray missing or unreachable)
    is raised: it says nothing about the config or the data."""
    run = result.config
    if run is None or result.by_rule("tokenizer-unreadable"):
        return result
    try:
        report = scan_dataset(
            run, jobs=jobs, quiet=quiet, sample=sample, engine=engine, ray_address=ray_address
        )
    except EngineError:
        raise
    except NoChatTemplateError as e:
        extra = [
            Finding(
                "data-scan-skipped",
                "warning",
                ("data.messages_field",),
                f"--scan-data was asked for but cannot run: {e}",
                "give the tokenizer a chat template (tokenizer_config.json chat_template or "
                "chat_template.jinja), or drop --scan-data",
            )
        ]
    except NoTokenizerPathError as e:
        extra = [
            Finding(
                "data-scan-skipped",
                "warning",
                ("tokenizer.path",),
                f"--scan-data was asked for but cannot run: {e}",
                "set tokenizer.path=<folder with tokenizer.json> (or drop --scan-data); no "
                "override can name a tokenizer folder cfgcheck does not know",
            )
        ]
    except DataNotLocalError as e:
        extra = [
            Finding(
                "data-not-local",
                "info",
                ("data.hub_dataset",),
                f"--scan-data skipped the dataset: {e}",
                "run the training script (or datasets.load_dataset) once on this machine so "
                "the cache holds it, or set data.paths to local files",
            )
        ]
    except ScanError as e:
        extra = [
            Finding(
                "data-unreadable",
                "error",
                ("data.paths",),
                f"the dataset cannot be scanned: {e}; the training run fails reading it too",
                "fix the file named above, or point data.paths at readable JSONL, text, Parquet "
                "or Arrow files (paths relative to the working directory)",
            )
        ]
    else:
        extra = scan_findings(report, run)
        return CheckResult(
            sort_findings([*(refine(f, report, run) for f in result.findings), *extra]),
            config=run,
        )
    return CheckResult(sort_findings([*result.findings, *extra]), config=run)


# Config-level errors that depend on the data: the scan, which measures every sample through
# the same pipeline description (cfgcheck.pipeline), settles them.
_LENGTH_RULES = frozenset({"seq-len-over-block-size", "pad-multiple-over-block-size"})


def refine(finding: Finding, report: ScanReport, run: RunConfig) -> Finding:
    """``finding``, downgraded to a warning when the scanned data cannot trigger it: no
    sample reaches the model longer than model.block_size (length rules), every sample
    reaches the collator at the same length (``ragged-batch``), or, when only packing needs
    a pad id, every sample fills whole rows (``pad-token-missing``)."""
    if finding.severity != "error":
        return finding
    only_packing = Pipeline.of(run).pad_uses() == ("packing",)
    if finding.rule == "pad-token-missing" and only_packing and report.rows_full:
        return _downgraded(
            finding,
            f"every scanned sample is a whole number of {report.max_seq_length}-token rows, "
            f"so no row is padded; other data would be",
        )
    scanned_fits = report.longest_fed <= report.block_size and report.collator != "packed"
    if finding.rule in _LENGTH_RULES and scanned_fits:
        return _downgraded(
            finding,
            f"the scanned data never reaches it: the longest batch is "
            f"{report.longest_fed} tokens, within model.block_size={report.block_size}",
        )
    if finding.rule == "ragged-batch" and len(report.fed_lengths) == 1:
        (length,) = report.fed_lengths
        return _downgraded(
            finding,
            f"every scanned sample reaches the collator at {length} tokens, so these "
            f"batches stack; other data would not",
        )
    return finding


def _downgraded(finding: Finding, why: str) -> Finding:
    return replace(finding, severity="warning", message=f"{finding.message} ({why})")
