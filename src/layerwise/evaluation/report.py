"""Comparison tables (rows = models or inference modes, columns = tasks) as Markdown and JSON, and a bar chart.

Files are written whole or not at all (layerwise.atomic).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from layerwise.plots import save_figure

Row = tuple[str, dict[str, float]]  # (label, {column: value})

SPACE_COLUMNS = {"alignment": "alignment", "uniformity": "uniformity", "anisotropy": "anisotropy",
                 "throughput": "sent/s", "peak_rss_mib": "peak RSS MiB"}


def headline(kind: str, scores: dict) -> dict[str, float]:
    """The table cells of one evaluation result."""
    if kind == "sts":
        cells = {task: r["spearman"] for task, r in scores["tasks"].items()}
        if len(cells) > 1:
            cells["avg"] = scores["avg"]
        return cells
    if kind == "retrieval":
        many = len(scores) > 1
        return {(f"{name} {metric}" if many else metric): value
                for name, result in scores.items() for metric, value in result.items()
                if metric not in ("queries", "documents")}
    if kind == "space":
        return {label: scores[key] for key, label in SPACE_COLUMNS.items()}
    raise ValueError(f"unknown evaluation kind {kind!r}")


def columns_of(rows: list[Row]) -> list[str]:
    """Every column in order of first appearance."""
    return list(dict.fromkeys(col for _, cells in rows for col in cells))


def markdown_table(rows: list[Row], first: str = "model") -> str:
    """A Markdown table, two decimals, '-' for a missing cell."""
    cols = columns_of(rows)
    lines = ["| " + " | ".join([first] + cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for label, cells in rows:
        values = [f"{cells[c]:.2f}" if c in cells else "-" for c in cols]
        lines.append("| " + " | ".join([label] + values) + " |")
    return "\n".join(lines) + "\n"


def table_json(rows: list[Row]) -> dict[str, Any]:
    """{"columns": [...], "rows": [{"label": ..., column: value, ...}]}."""
    return {"columns": columns_of(rows), "rows": [{"label": label, **cells} for label, cells in rows]}


def bar_plot(rows: list[Row], path: Path, title: str = "") -> None:
    """Grouped bar chart: one group per column, one bar per row (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cols = columns_of(rows)
    width = 0.8 / max(len(rows), 1)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(cols) * max(1, len(rows)) ** 0.5 + 2), 4))
    x = np.arange(len(cols))
    for r, (label, cells) in enumerate(rows):
        bars = ax.bar(x + (r - (len(rows) - 1) / 2) * width, [cells.get(c, np.nan) for c in cols], width,
                      label=label)
        ax.bar_label(bars, fmt="%.1f", fontsize=7, rotation=90, padding=2)  # differences too small to see
    ax.set_xticks(x, cols, rotation=30 if len(cols) > 4 else 0, ha="right" if len(cols) > 4 else "center")
    ax.set_title(title)
    ax.margins(y=0.15)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the bars, never over them
    fig.tight_layout()
    save_figure(fig, Path(path), bbox_inches=None)


Interval = tuple[float, float | None]  # (mean, std); std is None (or nan) for a single seed
IntervalRow = tuple[str, str, dict[str, Interval]]  # (label, group that picks the colour, {column: interval})


def axis_range(means: list[float], span: float) -> tuple[float, float]:
    """x-limits that show the best `span` points below the top score; lower means are drawn clipped at the edge."""
    top, bottom = max(means), min(means)
    return max(bottom, top - span) - 0.5, top + 0.5


def interval_plot(rows: list[IntervalRow], path: Path, title: str = "", span: float = 12.0,
                  columns: list[str] | None = None) -> None:
    """One panel per column, a dot with a ±std bar per row (colour = group); outliers below the range are marked
    at the left edge with their value, so a collapsed configuration does not squash the differences of the rest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = columns or columns_of([(label, cells) for label, _, cells in rows])
    groups = list(dict.fromkeys(group for _, group, _ in rows))
    colours = {g: plt.get_cmap("tab10")(i % 10) for i, g in enumerate(groups)}
    fig, axes = plt.subplots(1, len(cols), sharey=True, squeeze=False,
                             figsize=(3.2 * len(cols) + 2.5, 0.28 * len(rows) + 1.2))
    y = list(range(len(rows)))[::-1]  # first row on top
    for ax, col in zip(axes[0], cols):
        lo, hi = axis_range([cells[col][0] for _, _, cells in rows if col in cells], span)
        for yi, (_, group, cells) in zip(y, rows):
            if col not in cells:
                continue
            mean, std = cells[col]
            if mean < lo:
                ax.plot(lo, yi, marker="<", color=colours[group], clip_on=False)
                ax.annotate(f"{mean:.1f}", (lo, yi), xytext=(6, -3), textcoords="offset points", fontsize=7)
                continue
            has_std = std is not None and std == std  # None or nan: one seed
            ax.errorbar(mean, yi, xerr=std if has_std else None, fmt="o", color=colours[group], capsize=2)
        ax.set_xlim(lo, hi)
        ax.set_title(col, fontsize="medium")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(y, [label for label, _, _ in rows], fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, Path(path), bbox_inches=None)
