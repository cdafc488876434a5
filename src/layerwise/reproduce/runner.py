"""Run a grid: skip finished runs, resume interrupted ones, record failures and go on, re-plan after every run.

A grid is described by a `Grid`: `plan()` (the RunSpecs as the finished runs now determine them), `train(spec,
run_dir, resume)` (one run), `post(spec, run_dir)` (work after training that needs no retraining: extra
evaluations, a pattern export; it also runs for a finished run that lacks its outputs), `sentences(cfg)` and
`examples(cfg)` for the time estimate, and `report()` (tables and figures from the finished runs).
"""
from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from layerwise.reproduce.plan import (
    RunSpec, checkpoint_step, estimate_seconds, fmt_seconds, is_finished, measured_rates, status, total_steps,
)

FAILURES = "failures.jsonl"


class Grid(Protocol):
    out: Path
    shard: str

    def plan(self) -> list[RunSpec]: ...
    def train(self, spec: RunSpec, run_dir: Path, resume: bool) -> None: ...
    def post(self, spec: RunSpec, run_dir: Path) -> None: ...
    def needs_post(self, spec: RunSpec, run_dir: Path) -> bool: ...
    def sentences(self, cfg: Any) -> int: ...
    def examples(self, cfg: Any) -> int | None: ...
    def report(self) -> list[Path]: ...


@dataclass
class Outcome:
    trained: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)


def finished_keys(specs: list[RunSpec], out: Path) -> set[str]:
    return {s.key for s in specs if is_finished(s, out)}


def record_failure(out: Path, spec: RunSpec, exc: BaseException) -> None:
    out.mkdir(parents=True, exist_ok=True)
    line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "key": spec.key, "error": f"{type(exc).__name__}: {exc}",
            "where": traceback.format_exception(exc)[-2].strip().splitlines()[0] if exc.__traceback__ else ""}
    with open(out / FAILURES, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def run_grid(grid: Grid, log: Callable[[str], None] = print) -> Outcome:
    """Run every ready, unfinished run in plan order until none is left; failures are recorded, not raised."""
    outcome = Outcome()
    attempted: set[str] = set()
    while True:
        specs = grid.plan()
        finished = finished_keys(specs, grid.out)
        for spec in specs:  # post-training work missing from a finished run (e.g. an older version's run)
            if spec.key in finished and spec.key not in attempted:
                attempted.add(spec.key)
                outcome.skipped.append(spec.key)
                if grid.needs_post(spec, spec.run_dir(grid.out)):
                    _safely(grid, spec, outcome, lambda s=spec: grid.post(s, s.run_dir(grid.out)), log)
        todo = [s for s in specs if not s.pending and s.key not in finished and s.key not in attempted
                and all(k in finished for k in s.after)]
        if not todo:
            break
        spec = todo[0]
        attempted.add(spec.key)
        run_dir = spec.run_dir(grid.out)
        resume = checkpoint_step(run_dir) is not None
        if run_dir.exists() and not resume:
            shutil.rmtree(run_dir)  # a run that stopped before its first checkpoint starts over
        log(f"[reproduce] {'resuming' if resume else 'running'} {spec.key}")
        start = time.perf_counter()

        def work(spec=spec, run_dir=run_dir, resume=resume) -> None:
            grid.train(spec, run_dir, resume)
            grid.post(spec, run_dir)

        if _safely(grid, spec, outcome, work, log):
            (outcome.resumed if resume else outcome.trained).append(spec.key)
            log(f"[reproduce] finished {spec.key} in {fmt_seconds(time.perf_counter() - start)}")
    specs = grid.plan()
    finished = finished_keys(specs, grid.out)
    outcome.blocked = [s.key if not s.pending else f"{s.name}-seed{s.seed}" for s in specs
                       if s.key not in finished and s.key not in outcome.failed]
    return outcome


def _safely(grid: Grid, spec: RunSpec, outcome: Outcome, work: Callable[[], None], log) -> bool:
    try:
        work()
        return True
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one failed run must not stop the grid
        record_failure(grid.out, spec, exc)
        outcome.failed.append(spec.key)
        log(f"[reproduce] FAILED {spec.key}: {type(exc).__name__}: {exc}")
        return False


def dry_run(grid: Grid, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """List the runs in order with their state and an estimate of their time; returns the rows."""
    specs = grid.plan()
    finished = finished_keys(specs, grid.out)
    rates = measured_rates(specs, grid.out, grid.sentences)
    rows, total, sources = [], 0.0, set()
    unknown = 0
    for i, spec in enumerate(specs, 1):
        state = status(spec, grid.out, finished)
        steps = None
        cfg = spec.config if spec.config is not None else spec.cost_config
        if cfg is not None:
            examples = grid.examples(cfg)
            steps = total_steps(cfg.train, examples) if examples is not None else None
        left = steps
        if steps is not None and state.startswith("resume from step"):
            left = max(0, steps - int(state.rsplit(" ", 1)[1]))
        seconds, source = estimate_seconds(spec.kind, cfg, left, rates, grid.sentences) if state != "finished" else (0.0, "-")
        if state != "finished":
            if seconds is None:
                unknown += 1
            else:
                total += seconds
                sources.add(source)
        rows.append({"n": i, "key": spec.key if not spec.pending else f"{spec.kind}-{spec.name}-seed{spec.seed}-?",
                     "roles": sorted(spec.roles), "state": state, "steps": steps, "estimate_s": seconds,
                     "source": source})
    width = max([len(r["key"]) for r in rows] + [3])
    log(f"{'#':>3}  {'run':<{width}}  {'steps':>6}  {'estimate':>9}  state")
    for r in rows:
        est = "-" if r["state"] == "finished" else fmt_seconds(r["estimate_s"])
        log(f"{r['n']:>3}  {r['key']:<{width}}  {r['steps'] if r['steps'] is not None else '?':>6}  {est:>9}  "
            f"{r['state']}{'  [' + ', '.join(r['roles']) + ']' if r['roles'] else ''}")
    left = sum(1 for r in rows if r["state"] != "finished")
    how = " and ".join(sorted(sources)) or "no"
    log(f"{len(rows)} runs, {len(rows) - left} finished, {left} left; ESTIMATED time left: {fmt_seconds(total)}"
        f"{f' (+{unknown} runs not yet estimable)' if unknown else ''} "
        f"[from {how} rates: 'measured' = seconds per sentence of finished runs in {grid.out}, 'constant' = a rough "
        "per-model-size figure (see docs/reproduce.md); evaluation time is only partly included]")
    return rows


def summarize(outcome: Outcome, out: Path, written: list[Path], log: Callable[[str], None] = print) -> int:
    """Print what happened; exit code 1 when a run failed in this invocation."""
    log(f"[reproduce] trained {len(outcome.trained)}, resumed {len(outcome.resumed)}, already finished "
        f"{len(outcome.skipped)}, failed {len(outcome.failed)}, not run (waiting on a failed or unfinished run) "
        f"{len(outcome.blocked)}")
    for path in written:
        log(f"[reproduce] wrote {path}")
    if outcome.failed:
        print(f"[reproduce] {len(outcome.failed)} run(s) failed; see {out / FAILURES}", file=sys.stderr)
        return 1
    return 0
