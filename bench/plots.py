"""Line charts for the benches (``make soak``'s ``rss.png``), drawn by matplotlib into PNG
bytes: stacked panels over one x axis, an optional dashed goal per panel, a shaded
warm-up. matplotlib's object API with the Agg canvas: no display, no pyplot state."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]


@dataclass(frozen=True)
class Panel:
    title: str
    series: Sequence[Series]
    goal: float | None = None  # drawn as a dashed line; without one the y axis starts at 0


def line_chart_png(
    panels: Sequence[Panel],
    x_label: str,
    shade_until: float | None = None,
    width_in: float = 12.0,
    panel_height_in: float = 3.6,
    dpi: int = 100,
) -> bytes:
    """The panels stacked, sharing the x axis; a series keeps its colour in every panel."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width_in, panel_height_in * len(panels)), dpi=dpi)
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    names = sorted({s.name for panel in panels for s in panel.series})
    colours = {name: f"C{i % 10}" for i, name in enumerate(names)}
    for ax, panel in zip(axes, panels, strict=True):
        if shade_until:
            ax.axvspan(0, shade_until, color="0.92", label="warm-up")
        for series in panel.series:
            xs = [x for x, _ in series.points]
            ys = [y for _, y in series.points]
            ax.plot(xs, ys, color=colours[series.name], linewidth=1.5, label=series.name)
        if panel.goal is not None:
            ax.axhline(panel.goal, color="black", linestyle="--", linewidth=1, label=f"goal {panel.goal:g}")
        elif all(y >= 0 for s in panel.series for _, y in s.points):
            ax.set_ylim(bottom=0)  # absolute values from zero, so the eye judges proportions right
        ax.set_title(panel.title, loc="left", fontsize="medium")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    axes[-1].set_xlabel(x_label)
    figure.subplots_adjust(left=0.07, right=0.83, top=0.95, bottom=0.1, hspace=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
