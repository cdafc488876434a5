"""Pure metric functions (numpy in, floats out)."""
from __future__ import annotations

import numpy as np
from scipy import stats


def cosine_scores(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two equally shaped matrices."""
    a = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    b = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return np.sum(a * b, axis=1)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (ties get average ranks)."""
    return float(stats.spearmanr(x, y).statistic)


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson linear correlation."""
    return float(stats.pearsonr(x, y).statistic)
