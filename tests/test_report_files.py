"""Report files: written atomically with the permissions a plain open() would give, plots readable."""
from __future__ import annotations

import os
import stat

from layerwise.evaluation.report import bar_plot, write_text


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
