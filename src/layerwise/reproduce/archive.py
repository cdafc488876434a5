"""`--archive DIR`: a grid's finished runs without their weights, small enough to keep in git or send along.

A run's records are the files at the top of its directory (config.yaml, metrics.jsonl, results.json or
eval.json, extras.json, the learned drop pattern); its subdirectories (checkpoints/, best/, final/, gnet/) hold
weights and stay behind. `--report --output-dir DIR` rebuilds the tables and figures from the archive, and a grid
whose output directory holds the archived runs skips them as finished."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Callable

from layerwise.errors import ConfigError
from layerwise.reproduce.grid import Grid
from layerwise.reproduce.plan import RunSpec, is_finished


def archive_runs(grid: Grid, dest: Path, specs: list[RunSpec] | None = None) -> list[Path]:
    """Copy every finished run's records (of `specs`, default the whole grid) to DEST/runs/<key>/ (each run
    replaced whole); the run dirs written."""
    dest = Path(dest)
    problem = destination_problem("--archive", dest, grid.out)
    if problem:
        raise ConfigError(problem)
    return [copy_records(spec.run_dir(grid.out), spec.run_dir(dest))
            for spec in (grid.unsharded() if specs is None else specs) if is_finished(spec, grid.out)]


def destination_problem(option: str, dest: Path, out: Path) -> str:
    """Why DEST cannot receive the records of a grid writing to OUT ('' when it can)."""
    if Path(dest).resolve() == Path(out).resolve():
        return f"{option} {dest}: is the output directory itself; name another directory"
    return ""


def record_keeper(grid: Grid, dest: Path) -> Callable[[RunSpec, Path], None]:
    """`--keep-records DEST`: archive this process's runs finished so far now (its --shard only, so shards never
    copy the same run), and return the callback that copies each run's records to DEST/runs/<key>/ as soon as it
    finishes, so a grid's results outlive the machine that trains it. A copy that fails (a full disk) is reported
    on stderr and the grid goes on: the run itself is safe in OUT."""
    dest = Path(dest)
    archive_runs(grid, dest, grid.plan())

    def keep(spec: RunSpec, run_dir: Path) -> None:
        try:
            copy_records(run_dir, spec.run_dir(dest))
        except OSError as exc:
            print(f"[reproduce] could not keep the records of {spec.key} in {dest}: {exc}", file=sys.stderr)

    return keep


def copy_records(run_dir: Path, target: Path) -> Path:
    """The top-level files of `run_dir` into `target`, built beside it and renamed, so a copy is never half-made."""
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for path in sorted(run_dir.iterdir()):
        if path.is_file():
            shutil.copy2(path, staging / path.name)
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)
    return target
