"""``python -m bench.plot_results [DIR]``: one PNG per table of every ``DIR/*.json`` that the
benches wrote (default ``out/bench``), drawn by matplotlib: grouped bars, one group per row,
one bar per measured column (a column not measured in a row leaves no gap: the row's bars
stay centred on its tick), the machine in the caption."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.results import OUT, Table, read

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def caption(where: dict[str, Any]) -> str:
    parts = [str(where.get("cpu", "?")), f"{where.get('cores', '?')} cores"]
    if where.get("gpu"):
        parts.append(str(where["gpu"]))
    parts += [f"load {where.get('load_average_1m', '?')}", str(where.get("date", ""))]
    return ", ".join(parts)


def measured(table: Table) -> list[list[tuple[int, float]]]:
    """Per row, (series index, value) of each column measured (a number; None is not)."""
    return [
        [(i, float(v)) for i, name in enumerate(table.series) if isinstance(v := row.get(name), int | float)]
        for row in table.rows
    ]


def bar_chart_png(table: Table, where: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    bar_chart(table, where).savefig(buffer, format="png")
    return buffer.getvalue()


def bar_chart(table: Table, where: dict[str, Any]) -> Figure:
    """The table's bars: one group per row, one bar per measured column; wide enough that
    the rows' labels (wrapped at 22 characters) sit side by side."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    groups = [str(row[table.x]) for row in table.rows]
    values = measured(table)
    slots = max((len(bars) for bars in values), default=1) or 1  # a row's bars sit centred on its tick
    width = 0.8 / slots
    label = min(22, max((len(group) for group in groups), default=1)) * 0.075 + 0.2  # inches a tick label takes
    figure = Figure(figsize=(max(8.0, 0.5 * len(groups) * slots + 3, label * len(groups) / 0.7), 4.5), dpi=100)
    ax = figure.subplots()
    for group, bars in enumerate(values):
        for k, (i, value) in enumerate(bars):
            ax.bar(group + (k - (len(bars) - 1) / 2) * width, value, width, color=f"C{i % 10}")
    drawn = sorted({i for bars in values for i, _ in bars})
    legend = [Patch(facecolor=f"C{i % 10}", label=textwrap.fill(table.series[i], 20)) for i in drawn]
    ax.set_xticks(range(len(groups)), [textwrap.fill(group, 22) for group in groups], fontsize="small")
    ax.set_xlabel(table.x)
    ax.set_ylabel(table.unit + (" (log scale)" if table.log_y else ""))
    if table.log_y:
        ax.set_yscale("log")
    ax.set_title(textwrap.fill(table.title, 80), loc="left", fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=legend, fontsize="small", frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.text(0.01, 0.01, caption(where), fontsize="x-small", color="0.4")
    figure.subplots_adjust(left=0.12, right=0.82, top=0.86, bottom=0.2)
    return figure


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else OUT
    paths = sorted(folder.glob("*.json"))
    if not paths:
        print(f"plot_results: no bench results (*.json) in {folder}", file=sys.stderr)
        return 1
    for path in paths:
        bench, where, tables = read(path)
        for index, table in enumerate(tables):
            png = folder / f"{bench}-{index + 1}.png"
            png.write_bytes(bar_chart_png(table, where))
            print(f"plot: {png} ({table.title})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
