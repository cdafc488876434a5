"""Report files: written atomically with the permissions a plain open() would give, plots readable."""
from __future__ import annotations

import os
import stat

import pytest

from layerwise.atomic import write_text
from layerwise.evaluation.report import axis_range, bar_plot, interval_plot


def test_atomic_writes_get_the_umask_permissions_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "table.md", "| a |\n")
        bar_plot([("avg_last", {"dev": 86.8, "test": 82.1}), ("cls_last", {"dev": 81.7, "test": 77.3})],
                 tmp_path / "plot.png", title="t")
    finally:
        os.umask(old)
    for name in ("table.md", "plot.png"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png", "table.md"]  # no temporary file left


def test_axis_range_shows_the_top_span_and_leaves_a_collapsed_outlier_below_it():
    assert axis_range([82.1, 80.5, 55.7], span=12.0) == pytest.approx((69.6, 82.6))
    assert axis_range([82.1, 80.5], span=12.0) == pytest.approx((80.0, 82.6))  # all fit: starts at the lowest


def test_interval_plot_draws_means_stds_single_seeds_and_outliers(tmp_path):
    rows = [("supervised avg_last", "supervised", {"dev": (86.8, 0.03), "test": (82.1, 0.13)}),
            ("supervised layer_att_res (static)", "supervised", {"dev": (66.9, 0.1), "test": (55.7, 0.1)}),
            ("hybrid layer_att_cls", "hybrid", {"test": (81.2, None)}),  # one seed, no dev score
            ("untrained avg_last", "untrained", {"test": (82.0, float("nan"))})]
    interval_plot(rows, tmp_path / "points.png", title="t", columns=["dev", "test"])
    assert (tmp_path / "points.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["points.png"]
