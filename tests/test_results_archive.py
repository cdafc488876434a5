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
    ("attendout", ["--tasks", "mrpc", "--seeds", "3"], "results/attendout-glue-cpu"),
    ("attendout", ["--tasks", "rte", "--seeds", "5"], "results/attendout-glue-cpu"),
    ("attendout", ["--tasks", "mrpc", "--seeds", "5"], "results/attendout-glue-cpu"),
    ("attendout", ["--tasks", "cola,rte,mrpc", "--seeds", "5"], "results/attendout-glue-cpu"),
    ("attendout", ["--tasks", "sst2", "--seeds", "4"], "results/attendout-glue-cpu"),
    ("pooling", ["--poolers", "avg_last,weighted_layers", "--objectives", "supervised", "--pooler-lrs", "1e-2,1e-1,1",
                 "--seeds", "3"], "results/pooling-wl-cpu"),
]


def _copy_of_archive(folder: Path, tmp_path: Path) -> Path:
    """An output directory holding a copy of folder/runs (the test skips when the checkout lacks it)."""
    if not (folder / "runs").is_dir():
        pytest.skip(f"{folder.relative_to(REPO)}/runs is not in this checkout")
    out = tmp_path / "out"
    shutil.copytree(folder / "runs", out / "runs")
    return out


@pytest.mark.parametrize("experiment, options, folder", ARCHIVED_GRIDS)
def test_docs_tables_rebuild_from_the_archived_records(experiment, options, folder, tmp_path, capsys):
    out = _copy_of_archive(REPO / folder, tmp_path)
    assert main(["reproduce", experiment, *options, "--data-dir", str(tmp_path / "no-data"),
                 "--output-dir", str(out), "--report"]) == 0  # the report needs no data and no weights
    rows = [line for line in (out / f"{experiment}.md").read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and "---" not in line]
    assert len(rows) >= 2
    docs = (REPO / "docs" / "results.md").read_text(encoding="utf-8").splitlines()
    assert [row for row in rows if row not in docs] == []


def _archive_table_rows() -> list[tuple[str, list[str], int, int]]:
    """(folder, reproduce arguments, kept runs, grid runs) for each row of results/README.md's table."""
    rows = []
    for line in (REPO / "results" / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`") or " of " not in cells[2]:
            continue
        command = cells[1].split("`")[1].split()
        kept, total = (int(n) for n in cells[2].split(" of "))
        rows.append((cells[0].strip("`/"), command[2:], kept, total))
    return rows


def test_the_archive_table_lists_rows():
    assert len(_archive_table_rows()) >= 4


@pytest.mark.parametrize("folder, arguments, kept, total", _archive_table_rows())
def test_results_readme_run_counts_match_the_archive(folder, arguments, kept, total, tmp_path, capsys, monkeypatch):
    out = _copy_of_archive(REPO / "results" / folder, tmp_path)
    monkeypatch.chdir(REPO)  # the commands name their config files relative to the repository
    assert main(["reproduce", *arguments, "--data-dir", str(tmp_path / "no-data"),
                 "--output-dir", str(out), "--dry-run"]) == 0
    summary = [line for line in capsys.readouterr().out.splitlines() if " finished, " in line][-1]
    assert summary.startswith(f"{total} runs, {kept} finished, "), summary
