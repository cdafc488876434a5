"""Mean and std over seeds, the paired test across seeds, and Markdown cells ready to paste.

Pure functions of numbers: no model, no file.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Mapping, Sequence

import numpy as np


def mean_std(values: Sequence[float]) -> dict[str, Any]:
    """{"mean", "std" (sample std, ddof=1; None with one value), "n", "values"}; NaNs are left out."""
    kept = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not kept:
        return {"mean": None, "std": None, "n": 0, "values": []}
    return {"mean": float(np.mean(kept)), "std": float(np.std(kept, ddof=1)) if len(kept) > 1 else None,
            "n": len(kept), "values": kept}


def paired_test(candidate: Mapping[int, float], reference: Mapping[int, float],
                wilcoxon_min: int = 6) -> dict[str, Any]:
    """Paired comparison of two sets of per-seed scores, over the seeds both have.

    Returns n (paired seeds), mean_diff (candidate - reference), t and p_ttest (scipy.stats.ttest_rel, two-sided)
    and, from `wilcoxon_min` pairs on, p_wilcoxon (scipy.stats.wilcoxon). A p-value that cannot be computed (fewer
    than 2 pairs, every difference equal up to float rounding) is None, shown as "n/a".
    """
    from scipy import stats

    seeds = sorted(set(candidate) & set(reference))
    x = np.array([candidate[s] for s in seeds], dtype=np.float64)
    y = np.array([reference[s] for s in seeds], dtype=np.float64)
    out: dict[str, Any] = {"n": len(seeds), "seeds": seeds, "mean_diff": float(np.mean(x - y)) if seeds else None,
                           "t": None, "p_ttest": None, "p_wilcoxon": None}
    if len(seeds) >= 2 and not _all_equal(x - y, scale=np.max(np.abs(np.concatenate([x, y])))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = stats.ttest_rel(x, y)
        if np.isfinite(result.pvalue):
            out["t"], out["p_ttest"] = float(result.statistic), float(result.pvalue)
    if len(seeds) >= wilcoxon_min and np.any(x != y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                p = float(stats.wilcoxon(x, y).pvalue)
                out["p_wilcoxon"] = p if np.isfinite(p) else None
            except ValueError:
                pass
    return out


def _all_equal(diffs: np.ndarray, scale: float) -> bool:
    """Whether the paired differences are equal up to float rounding. Then the t-test has no answer (zero
    variance: t infinite or undefined), yet rounding noise would give an absurd t and p (accuracies on 277 RTE
    examples move in steps of 100/277 points, so two seeds with the same gap of 2 examples differ by 7e-15)."""
    return bool(np.ptp(diffs) <= 1e-9 * max(1.0, float(scale)))


def fmt_cell(stat: Mapping[str, Any] | None, digits: int = 2) -> str:
    """"86.76 ± 0.12"; one value: "86.76"; nothing: "-"."""
    if not stat or stat.get("mean") is None:
        return "-"
    text = f"{stat['mean']:.{digits}f}"
    return text if stat.get("std") is None else f"{text} ± {stat['std']:.{digits}f}"


def fmt_signed(value: float, digits: int = 2, plus: bool = True) -> str:
    """A difference with its sign ("+0.17", "-0.46"); one that rounds to zero is "+0.00" / "0.00", never "-0.00"."""
    rounded = round(value, digits) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{rounded:+.{digits}f}" if plus else f"{rounded:.{digits}f}"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]], align_right_from: int = 1) -> str:
    """A GitHub Markdown table; '|' inside a cell is escaped, numeric columns are right-aligned."""
    def clean(cell: Any) -> str:
        return str(cell).replace("|", "\\|").replace("\n", " ")

    rule = ["---" if i < align_right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(clean(h) for h in header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(clean(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
