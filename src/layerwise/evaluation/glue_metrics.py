"""GLUE metrics as pure functions (sequences in, a float out), and the per-task score dictionary.

The functions return raw values (accuracy in [0, 1], correlations in [-1, 1]); `glue_scores` reports them x 100,
as the GLUE leaderboard does.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from layerwise.evaluation.metrics import pearson, spearman


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Fraction of predictions equal to the label."""
    p, y = np.asarray(predictions), np.asarray(labels)
    return float((p == y).mean()) if len(y) else 0.0


def f1(predictions: Sequence[int], labels: Sequence[int], positive: int = 1) -> float:
    """Binary F1 of the positive class: 2TP / (2TP + FP + FN); 0 when there is nothing positive at all."""
    p, y = np.asarray(predictions) == positive, np.asarray(labels) == positive
    tp, fp, fn = int((p & y).sum()), int((p & ~y).sum()), int((~p & y).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def matthews(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Matthews correlation (multi-class form, as scikit-learn); 0 when predictions or labels are constant."""
    p, y = np.asarray(predictions), np.asarray(labels)
    classes = np.union1d(p, y)
    confusion = np.array([[np.sum((y == a) & (p == b)) for b in classes] for a in classes], dtype=np.float64)
    t, q = confusion.sum(1), confusion.sum(0)
    c, s = np.trace(confusion), confusion.sum()
    denominator = np.sqrt((s * s - q @ q) * (s * s - t @ t))
    return float((c * s - q @ t) / denominator) if denominator > 0 else 0.0


def pearson_r(predictions: Sequence[float], labels: Sequence[float]) -> float:
    return pearson(np.asarray(predictions, dtype=np.float64), np.asarray(labels, dtype=np.float64))


def spearman_r(predictions: Sequence[float], labels: Sequence[float]) -> float:
    return spearman(np.asarray(predictions, dtype=np.float64), np.asarray(labels, dtype=np.float64))


METRICS: dict[str, Callable[[Sequence, Sequence], float]] = {
    "accuracy": accuracy, "f1": f1, "matthews": matthews, "pearson": pearson_r, "spearman": spearman_r,
}


def glue_scores(metrics: Sequence[str], predictions: Sequence, labels: Sequence, suffix: str = "") -> dict[str, float]:
    """{metric + suffix: value x 100} for each named metric."""
    return {f"{name}{suffix}": 100.0 * METRICS[name](predictions, labels) for name in metrics}
