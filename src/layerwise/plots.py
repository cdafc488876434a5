"""Figures drawn from a run directory's files only (metrics.jsonl, results.json): no model is loaded.

- drop_heatmap: the per-layer drop rate logged every N steps, as a layer-by-step heatmap.
- convergence: dev metric and train loss against steps, several runs on one figure.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from layerwise.errors import DataError

LAYER_KEY = re.compile(r"^drop/layer(\d+)$")


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of run_dir/metrics.jsonl; DataError naming the line of a bad record."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise DataError(path, "file not found (is this a run directory of finetune or train-embed?)")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise DataError(path, "not a JSON record", line=number) from None
            if not isinstance(record, dict) or "step" not in record:
                raise DataError(path, "expected a JSON object with a 'step'", line=number)
            records.append(record)
    return records


def drop_matrix(records: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(steps, rates[layer, log]) from the training log lines that carry drop/layerN (NaN where missing)."""
    lines = [r for r in records if any(LAYER_KEY.match(k) for k in r)]
    layers = sorted({int(m.group(1)) for r in lines for k in r if (m := LAYER_KEY.match(k))})
    if not lines:
        return np.zeros(0), np.zeros((0, 0))
    rates = np.full((max(layers) + 1, len(lines)), np.nan)
    for column, record in enumerate(lines):
        for layer in layers:
            rates[layer, column] = record.get(f"drop/layer{layer}", np.nan)
    return np.array([r["step"] for r in lines]), rates


def run_metric(run_dir: Path, records: list[dict[str, Any]]) -> str | None:
    """The run's main dev metric: results.json's 'metric', else the first key of the first evaluation."""
    results = Path(run_dir) / "results.json"
    if results.is_file():
        metric = json.loads(results.read_text(encoding="utf-8")).get("metric")
        if metric:
            return metric
    evals = [r["eval"] for r in records if isinstance(r.get("eval"), dict) and r["eval"]]
    return next(iter(evals[0])) if evals else None


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: Path, bbox_inches: str | None = "tight") -> Path:
    """Save atomically (temporary file, then rename; the format from the suffix, png without one) and close the
    figure."""
    from layerwise.evaluation.report import atomic_write

    fmt = path.suffix.lstrip(".") or "png"
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=120, bbox_inches=bbox_inches))
    finally:
        _figure().close(fig)
    return path


def drop_heatmap(run_dir: Path, path: Path) -> Path:
    """Draw the learned (or applied) per-layer drop rates as a layer-by-step heatmap into `path`."""
    steps, rates = drop_matrix(read_metrics(run_dir))
    if not steps.size:
        raise DataError(Path(run_dir) / "metrics.jsonl", "no drop/layerN entries (a run with --dropout none "
                        "logs no drop rates)")
    plt = _figure()
    fig, ax = plt.subplots(figsize=(max(6.0, min(14.0, 0.15 * len(steps) + 4)), 0.4 * len(rates) + 1.8))
    edges = np.concatenate([[steps[0] - (steps[1] - steps[0] if len(steps) > 1 else 1)], steps])
    mesh = ax.pcolormesh(edges, np.arange(len(rates) + 1) - 0.5, rates, cmap="viridis", vmin=0,
                         vmax=max(0.1, float(np.nanmax(rates))))
    fig.colorbar(mesh, ax=ax, label="mean drop rate")
    ax.set(xlabel="step", ylabel="layer", yticks=range(len(rates)), title=f"drop rate per layer: {Path(run_dir).name}")
    return save_figure(fig, path)


def convergence(run_dirs: list[Path], path: Path) -> Path:
    """Dev metric and train loss against steps for several runs, one line per run, into `path`."""
    plt = _figure()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    metrics = set()
    for run_dir in run_dirs:
        records = read_metrics(run_dir)
        label = Path(run_dir).name
        metric = run_metric(run_dir, records)
        evals = [(r["step"], r["eval"][metric]) for r in records if metric and metric in r.get("eval", {})]
        if evals:
            metrics.add(metric)
            top.plot(*zip(*evals), marker="o", label=label)
        loss = [(r["step"], r.get("task_loss", r["loss"])) for r in records if "loss" in r]
        if loss:
            bottom.plot(*zip(*loss), label=label)
    top.set(ylabel=f"dev {' / '.join(sorted(metrics)) or 'metric'}", title="convergence")
    bottom.set(xlabel="step", ylabel="train loss")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    return save_figure(fig, path)
