"""docs/results.md against the run records kept in results/: every table row the report rebuilds from an archived
grid appears in the docs as it is, so a number there cannot drift from the runs that produced it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from layerwise.cli import main

REPO = Path(__file__).resolve().parents[1]

# (experiment, grid options, archive folder): the grids whose tables docs/results.md shows from results/
ARCHIVED_GRIDS = [
    ("attendout", ["--config", str(REPO / "configs" / "attendout-sst2-cpu.yaml")], "results/attendout-sst2-cpu"),
    ("attendout", ["--tasks", "rte", "--seeds", "3"], "results/attendout-glue-cpu"),
    ("attendout", ["--tasks", "cola", "--seeds", "3"], "results/attendout-glue-cpu"),
    ("attendout", ["--tasks", "cola", "--seeds", "5"], "results/attendout-glue-cpu"),
]


@pytest.mark.parametrize("experiment, options, folder", ARCHIVED_GRIDS)
def test_docs_tables_rebuild_from_the_archived_records(experiment, options, folder, tmp_path, capsys):
    archive = REPO / folder / "runs"
    if not archive.is_dir():
        pytest.skip(f"{folder}/runs is not in this checkout")
    out = tmp_path / "out"
    shutil.copytree(archive, out / "runs")
    assert main(["reproduce", experiment, *options, "--data-dir", str(tmp_path / "no-data"),
                 "--output-dir", str(out), "--report"]) == 0  # the report needs no data and no weights
    rows = [line for line in (out / f"{experiment}.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and "---" not in line]
    assert len(rows) >= 2
    docs = (REPO / "docs" / "results.md").read_text(encoding="utf-8").splitlines()
    assert [row for row in rows if row not in docs] == []
