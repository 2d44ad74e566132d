"""`simulate.png`: the mean allocation ratio against arrived GPU demand, one line per policy.

matplotlib is imported here, when the plot is drawn, so the rest of the CLI does not pay for it;
the figure is drawn on an Agg canvas (no display, no pyplot global state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuplex.replay.placement_report import ReportRow, curve_of, policies


def write_plot(rows: Sequence[ReportRow], path: Path, *, seeds: int) -> None:
    """Draw the curves of `rows` into the PNG file `path`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for policy in policies(rows):
        arrived, allocated = curve_of(rows, policy)
        axes.plot(arrived, allocated, label=policy)
    axes.plot([0, 100], [0, 100], color="grey", linestyle=":", linewidth=1, label="ideal")
    axes.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
    axes.set_ylabel("GPU allocation ratio (%)")
    axes.set_title(f"GPU allocation ratio, mean over {seeds} seed(s)")
    axes.set_ylim(0, 100)
    axes.grid(visible=True, alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, format="png")
