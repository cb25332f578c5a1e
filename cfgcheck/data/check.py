"""Scan findings added to a check result (``cfgcheck check --scan-data``)."""

from __future__ import annotations

from cfgcheck.data.scan import NoTokenizerPathError, ScanError, scan_dataset, scan_findings
from cfgcheck.findings import CheckResult, Finding, sort_findings


def with_scan_findings(result: CheckResult) -> CheckResult:
    """``result`` plus the findings of a dataset scan. Nothing is scanned when the schema
    rejected the config or the tokenizer files are unreadable (already a finding)."""
    run = result.config
    if run is None or result.by_rule("tokenizer-unreadable"):
        return result
    try:
        report = scan_dataset(run)
    except NoTokenizerPathError as e:
        extra = [
            Finding(
                "data-scan-skipped",
                "warning",
                ("tokenizer.path",),
                f"--scan-data was asked for but cannot run: {e}",
                "set tokenizer.path=<folder with tokenizer.json> (or drop --scan-data)",
            )
        ]
    except ScanError as e:
        extra = [
            Finding(
                "data-unreadable",
                "error",
                ("data.paths",),
                f"the dataset cannot be scanned: {e}; the training run fails reading it too",
                "fix the file named above, or point data.paths at readable JSONL, text or "
                "Parquet files (paths relative to the working directory)",
            )
        ]
    else:
        extra = scan_findings(report, run)
    return CheckResult(sort_findings([*result.findings, *extra]), config=run)
