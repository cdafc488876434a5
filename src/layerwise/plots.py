"""Figures drawn from a run directory's files only (metrics.jsonl, results.json): no model is loaded.

- drop_heatmap: the per-layer drop rate logged every N steps, as a layer-by-step heatmap (one run, or the mean
  over several).
- convergence: dev metric and train loss against steps, one line per group of runs (mean ± std over seeds).
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from layerwise.atomic import atomic_write
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
    fmt = path.suffix.lstrip(".") or "png"
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=120, bbox_inches=bbox_inches))
    finally:
        _figure().close(fig)
    return path


def mean_drop_matrix(run_dirs: Sequence[Path]) -> tuple[np.ndarray, np.ndarray]:
    """(steps, rates[layer, log]): the per-layer drop rates averaged over runs, at the steps every run logged;
    DataError naming the first run that logged no drop rates."""
    matrices = []
    for run_dir in run_dirs:
        steps, rates = drop_matrix(read_metrics(run_dir))
        if not steps.size:
            raise DataError(Path(run_dir) / "metrics.jsonl", "no drop/layerN entries (a run with --dropout none "
                            "logs no drop rates)")
        matrices.append((steps, rates))
    common = sorted(set.intersection(*(set(steps.tolist()) for steps, _ in matrices)))
    layers = max(rates.shape[0] for _, rates in matrices)
    stacked = np.full((len(matrices), layers, len(common)), np.nan)
    for index, (steps, rates) in enumerate(matrices):
        column_of = {step: column for column, step in reversed(list(enumerate(steps.tolist())))}  # first log wins
        stacked[index, : rates.shape[0]] = rates[:, [column_of[step] for step in common]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a layer no run logged at a step stays NaN
        return np.array(common), np.nanmean(stacked, axis=0)


def drop_heatmap(run_dir: Path | Sequence[Path], path: Path, title: str | None = None) -> Path:
    """Draw the learned (or applied) per-layer drop rates as a layer-by-step heatmap into `path`: of one run, or
    the mean over several runs (e.g. one configuration's seeds) at the steps they all logged."""
    runs = [Path(run_dir)] if isinstance(run_dir, (str, Path)) else [Path(r) for r in run_dir]
    if not runs:
        raise ValueError("drop_heatmap needs at least one run directory")
    steps, rates = mean_drop_matrix(runs)
    if not steps.size:
        raise DataError(runs[0] / "metrics.jsonl", f"the {len(runs)} runs logged drop rates at no common step")
    name = title or (runs[0].name if len(runs) == 1 else ", ".join(r.name for r in runs))
    over = "" if len(runs) == 1 else f", mean over {len(runs)} runs"
    plt = _figure()
    fig, ax = plt.subplots(figsize=(max(6.0, min(14.0, 0.15 * len(steps) + 4)), 0.4 * len(rates) + 1.8))
    edges = np.concatenate([[steps[0] - (steps[1] - steps[0] if len(steps) > 1 else 1)], steps])
    mesh = ax.pcolormesh(edges, np.arange(len(rates) + 1) - 0.5, rates, cmap="viridis", vmin=0,
                         vmax=max(0.1, float(np.nanmax(rates))))
    fig.colorbar(mesh, ax=ax, label="mean drop rate")
    ax.set(xlabel="step", ylabel="layer", yticks=range(len(rates)), title=f"drop rate per layer{over}: {name}")
    return save_figure(fig, path)


Curve = tuple[np.ndarray, np.ndarray, np.ndarray]  # (steps, mean, sample std: NaN where one run has the step)


def mean_curve(series: Sequence[Sequence[tuple[float, float]]]) -> Curve:
    """The mean and sample std over runs at every step any run has: a band over seeds of one configuration."""
    by_step: dict[float, list[float]] = {}
    for points in series:
        for step, value in points:
            by_step.setdefault(step, []).append(float(value))
    from layerwise.reproduce.tables import mean_std

    steps = sorted(by_step)
    stats = [mean_std(by_step[step]) for step in steps]
    mean = np.array([s["mean"] for s in stats])
    std = np.array([np.nan if s["std"] is None else s["std"] for s in stats])
    return np.array(steps), mean, std


def run_curves(run_dir: Path) -> tuple[str | None, list[tuple[float, float]], list[tuple[float, float]]]:
    """(main dev metric, [(step, dev metric)], [(step, train task loss)]) of one run's metrics.jsonl."""
    records = read_metrics(run_dir)
    metric = run_metric(run_dir, records)
    evals = [(r["step"], r["eval"][metric]) for r in records if metric and metric in r.get("eval", {})]
    loss = [(r["step"], r.get("task_loss", r["loss"])) for r in records if "loss" in r]
    return metric, evals, loss


def convergence(groups: Mapping[str, Sequence[Path]], path: Path, title: str = "convergence") -> Path:
    """Dev metric and train loss against steps into `path`, one line per group of runs (one configuration's
    seeds, or a single run): the mean over the group's runs, with a band of ± one std where two or more have the
    step; the legend gives each group's number of runs."""
    plt = _figure()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    metrics = set()
    for label, run_dirs in groups.items():
        curves = [run_curves(run_dir) for run_dir in run_dirs]
        metrics |= {metric for metric, evals, _ in curves if metric and evals}
        name = label if len(run_dirs) == 1 else f"{label} (n={len(run_dirs)})"
        for ax, series, marker in ((top, [c[1] for c in curves], "o"), (bottom, [c[2] for c in curves], None)):
            if any(series):
                _draw_band(ax, mean_curve(series), name, marker)
    top.set(ylabel=f"dev {' / '.join(sorted(metrics)) or 'metric'}", title=title)
    bottom.set(xlabel="step", ylabel="train loss")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    return save_figure(fig, path)


def _draw_band(ax: Any, curve: Curve, label: str, marker: str | None) -> None:
    steps, mean, std = curve
    line, = ax.plot(steps, mean, marker=marker, label=label)
    if np.isfinite(std).any():
        ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.15, linewidth=0)
