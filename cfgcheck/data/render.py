"""Show a scan: a summary table and a histogram in the terminal, optionally a PNG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cfgcheck.data.report import ScanReport
from cfgcheck.plotting import PlotUnavailableError, pyplot

BAR = "█"


def histogram(
    lengths: Sequence[int] | Mapping[int, int], bins: int = 12, width: int = 40
) -> list[str]:
    """Equal-width bins from the shortest to the longest sample, one bar per bin
    (``lengths``: every length, or samples per length)."""
    hist: Mapping[int, int] = (
        lengths if isinstance(lengths, Mapping) else {n: lengths.count(n) for n in set(lengths)}
    )
    lo, hi = min(hist), max(hist)
    step = max(1, -(-(hi - lo + 1) // bins))
    counts = [0] * (-(-(hi - lo + 1) // step))
    for n, c in hist.items():
        counts[(n - lo) // step] += c
    peak = max(counts)
    digits = len(str(hi))
    lines = []
    for i, c in enumerate(counts):
        start = lo + i * step
        end = min(start + step - 1, hi)
        bar = BAR * (round(c / peak * width) if c else 0) or ("▏" if c else "")
        lines.append(f"  {start:>{digits}}-{end:<{digits}} | {bar:<{width}} {c}")
    return lines


def render_text(report: ScanReport, paths: Sequence[str]) -> str:
    pct = report.percentiles()
    s = report.summary
    sample = report.sampling
    lines = [
        f"dataset    {', '.join(paths)}: {report.samples:,} samples, {report.tokens:,} tokens "
        f"({report.seconds:.2f} s)"
        + (f", a {sample.describe()} sample (seed {sample.seed})" if sample else ""),
        f"tokenizer  {report.tokenizer}",
        "lengths    " + "  ".join(f"{k} {v:,}" for k, v in pct.items()),
        f"           longest: {report.longest.file}:{report.longest.line}",
        f"limits     max_length {report.max_length:,} (truncation "
        f"{'on' if report.truncation else 'off'})"
        + (
            f", max_seq_length {report.max_seq_length:,}"
            if report.max_seq_length != report.max_length
            else ""
        )
        + f", model.block_size {report.block_size:,}",
        f"truncated  {report.truncated:,} of {report.samples:,} samples are longer than "
        f"max_length ({report.truncated / report.samples:.1%}{_ci(report)})"
        + (
            f", {report.tokens_cut:,} tokens cut ({report.cut_share:.1%})"
            if report.truncation
            else ", kept whole: truncation is off"
        ),
        f"labels     {s.targets_fed:,} label tokens after truncation"
        + (f" of {s.targets:,}" if s.targets != s.targets_fed else "")
        + f"; {s.no_targets:,} samples with none, {s.empty:,} empty"
        + (
            f", {s.over_vocab:,} with ids >= {report.embedding_rows:,} rows" if s.over_vocab else ""
        ),
        f"padding    waste at trainer.micro_batch_size={report.micro_batch_size}, dataset order:",
    ]
    names = {
        "max_length": f"pad every sample to {report.max_length:,}",
        "longest": "pad each micro batch to its longest",
        "packed": f"pack into {s.packed_rows:,} row{'' if s.packed_rows == 1 else 's'} of "
        f"{report.max_seq_length:,}",
    }
    for key, w in report.waste.items():
        mark = "   <- configured" if key == report.configured else ""
        lines.append(f"  {key:<10} {names[key]:<38} {w.share:6.1%}{mark}")
    lines.append("histogram  tokens per sample")
    lines += histogram(report.hist)
    return "\n".join(lines) + "\n"


def _ci(report: ScanReport) -> str:
    interval = report.over_length_interval()
    if interval is None:
        return ""
    return f", 95% Wilson interval {interval[0]:.1%}-{interval[1]:.1%}"


def write_png(report: ScanReport, path: Path) -> None:
    """A histogram PNG with max_length and block_size marked. Needs matplotlib."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    hist = report.hist
    ax.hist(
        list(hist),
        weights=list(hist.values()),
        bins=min(60, max(5, report.samples // 5)),
        color="#4c72b0",
        edgecolor="white",
    )
    top = max(hist)
    # Mark the limits that fall near the data; far-away ones would squash the histogram.
    for value, style, label in (
        (report.max_length, ("#dd8452", "--"), f"max_length {report.max_length}"),
        (report.block_size, ("#c44e52", ":"), f"model.block_size {report.block_size}"),
    ):
        if value <= 2 * top:
            ax.axvline(value, color=style[0], linestyle=style[1], label=label)
    ax.set_xlabel("tokens per sample")
    ax.set_ylabel("samples")
    ax.set_title(f"{report.samples:,} samples, p50 {report.percentiles()['p50']:,}")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png")
    except OSError as e:
        raise PlotUnavailableError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        plt.close(fig)
