"""``cfgcheck memory --png``: the per-component breakdown as one stacked bar against the GPU's
capacity, with the estimate's stated margin. Needs matplotlib (``cfgcheck[plot]``)."""

from __future__ import annotations

from pathlib import Path

from cfgcheck.memory.estimate import GIB, MemoryEstimate
from cfgcheck.plotting import PlotUnavailableError, pyplot


def write_png(
    est: MemoryEstimate, path: Path, capacity: int | None, where: str, verdict: str | None
) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.8))
    try:
        left = 0.0
        cmap = plt.get_cmap("tab20")
        colors = [cmap(i) for i in range(20)]
        for i, c in enumerate(est.components):
            width = c.bytes / GIB
            if width <= 0:
                continue
            ax.barh(
                0,
                width,
                left=left,
                color=colors[i % len(colors)],
                edgecolor="white",
                label=f"{c.label} {width:.2f} GiB",
            )
            if width / max(est.total_gib, 1e-9) > 0.06:
                ax.text(left + width / 2, 0, f"{width:.1f}", ha="center", va="center", fontsize=8)
            left += width
        upper = est.upper_bytes / GIB
        ax.barh(
            0,
            upper - left,
            left=left,
            color="none",
            edgecolor="grey",
            hatch="//",
            label=f"stated margin +{est.margin:.0%} -> {upper:.1f} GiB",
        )
        top = max(upper, (capacity or 0) / GIB) * 1.08
        if capacity is not None:
            cap = capacity / GIB
            ax.axvline(cap, color="black", linewidth=2)
            ax.text(cap, 0.45, f" {where}: {cap:.1f} GiB", va="bottom", fontsize=9)
        ax.set_xlim(0, top)
        ax.set_ylim(-0.6, 0.9)
        ax.set_yticks([])
        ax.set_xlabel("GiB per GPU")
        title = f"estimated peak {est.total_gib:.1f} GiB ({est.phase})"
        if verdict is not None:
            title += f": {verdict}"
        if est.uncalibrated:
            title += " [not calibrated: " + ", ".join(est.uncalibrated) + "]"
        ax.set_title(title, fontsize=10)
        ax.legend(
            loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, fontsize=8, frameon=False
        )
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise PlotUnavailableError(f"cannot write {path}: {e.strerror or e}") from e
    finally:
        plt.close(fig)
