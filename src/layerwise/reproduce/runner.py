"""Run a grid: skip finished runs, resume interrupted ones, record failures and go on, re-plan after every run.

A grid is described by a `Grid`: `plan()` (the RunSpecs as the finished runs now determine them), `train(spec,
run_dir, resume)` (one run), `post(spec, run_dir)` (work after training that needs no retraining: extra
evaluations, a pattern export; it also runs for a finished run that lacks its outputs), `sentences(cfg)`,
`examples(cfg)` and `characters(cfg)` for the time estimate, and `report()` (tables and figures from the finished
runs).

Under torchrun / accelerate launch (a process group of N > 1 processes) every run is trained by all N processes
together. Rank 0 alone plans, decides what is finished and whether a run resumes, clears leftovers, runs `post`,
writes failures.jsonl and logs; it broadcasts each next run to the others, so no rank depends on what its own view
of the file system shows. `train.batch_size` stays the grid's global batch (the key hashes it): each process
trains with batch_size / N, as train-embed and finetune take it per process.
"""
from __future__ import annotations

import copy
import json
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Protocol

from layerwise.reproduce.plan import (
    RunSpec, checkpoint_step, estimate_seconds, fmt_seconds, is_finished, measured_rates, status, total_steps,
)
from layerwise.training import distributed, stopping

FAILURES = "failures.jsonl"
# Rank 0 alone evaluates, post-processes and plans while the others wait on the runner's group: allow it hours. A
# rank that dies ends the whole job (torchrun stops the others), so this long wait never hides a crash.
COORDINATION_TIMEOUT = timedelta(hours=24)


class Grid(Protocol):
    out: Path
    shard: str

    def plan(self) -> list[RunSpec]: ...
    def train(self, spec: RunSpec, run_dir: Path, resume: bool) -> None: ...
    def post(self, spec: RunSpec, run_dir: Path) -> None: ...
    def needs_post(self, spec: RunSpec, run_dir: Path) -> bool: ...
    def sentences(self, cfg: Any) -> int: ...
    def examples(self, cfg: Any) -> int | None: ...
    def characters(self, cfg: Any) -> float | None: ...
    def report(self) -> list[Path]: ...


@dataclass
class Outcome:
    trained: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    out_of_time: str = ""  # set when --time-limit kept a run from starting: the first such run, and why
    stopped: str = ""  # set when a run was stopped (with a checkpoint) by --time-limit or a signal: which, and why
    stop_code: int = 0  # the exit code of that stop: 0 for the time limit, 128 + the signal's number


@dataclass
class Step:
    """The next run as rank 0 decided it; every rank trains it."""

    key: str
    spec: RunSpec
    run_dir: Path
    resume: bool

    def portable(self) -> Step:
        """A copy that pickles for the broadcast (a hash_patch may be a closure); `key` keeps the hash it made."""
        return replace(self, spec=replace(self.spec, hash_patch=None))


def finished_keys(specs: list[RunSpec], out: Path) -> set[str]:
    return {s.key for s in specs if is_finished(s, out)}


def failure_line(key: str, exc: BaseException) -> dict[str, Any]:
    """One failures.jsonl record: time, key, error and the innermost source line."""
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "key": key, "error": f"{type(exc).__name__}: {exc}",
            "where": traceback.format_exception(exc)[-2].strip().splitlines()[0] if exc.__traceback__ else ""}


def write_failure(out: Path, line: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / FAILURES, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def per_process(spec: RunSpec, world: int) -> RunSpec:
    """The spec each of `world` processes trains: the grid's global train.batch_size split evenly (the command
    refuses a batch that does not divide, via `batch_problem`, before any run)."""
    if world <= 1:
        return spec
    config = copy.deepcopy(spec.config)
    config.train.batch_size //= world
    return replace(spec, config=config)


def batch_problem(specs: list[RunSpec], world: int) -> str:
    """Why the runs cannot be split over `world` processes ('' when they can)."""
    sizes = {c.train.batch_size for c in (s.config or s.cost_config for s in specs) if c is not None}
    bad = sorted(size for size in sizes if size % world)
    return (f"train.batch_size {', '.join(map(str, bad))}: the global batch must divide by the {world} processes "
            f"(each trains batch_size / {world})") if bad else ""


def run_grid(grid: Grid, log: Callable[[str], None] = print,
             on_finished: Callable[[RunSpec, Path], None] | None = None, time_limit: float | None = None) -> Outcome:
    """Run every ready, unfinished run in plan order until none is left; failures are recorded, not raised.
    `on_finished(spec, run_dir)` is called on rank 0 after each run that succeeded (e.g. to keep its records), and
    after the missing post-training work of an already finished run is done. With `time_limit` (seconds from now)
    no run starts whose estimate (as --dry-run makes it) does not fit in the time left (a run that does not fit is
    passed over: a later, shorter one may still fit; a run with no estimate starts), and a run still training when
    the time is up stops at its next step with a checkpoint, as on SIGTERM or a first Ctrl-C: the grid ends there
    (`outcome.stopped`) and a rerun resumes that run.

    In a process group every rank must call it: rank 0 decides each next run and broadcasts it, all ranks train
    it, and the runs' outcomes are gathered after each run (the barrier between runs); a run failed when it
    failed on any rank. Every rank returns rank 0's Outcome."""
    info = distributed.current()
    log = log if info.is_main else _quiet
    outcome = Outcome()
    attempted: set[str] = set()
    with stopping.time_limit(time_limit, "--time-limit") as deadline:
        while True:
            step = _next_step(grid, outcome, attempted, log, on_finished, deadline) if info.is_main else None
            received = _broadcast(step.portable() if step and info.enabled else step, info)
            step = step if info.is_main else received
            if step is None:
                break
            try:
                succeeded = _run_step(grid, step, outcome, info, log)
            except stopping.TrainingStopped as stop:
                outcome.stopped = f"{step.key} {stop.where}"
                outcome.stop_code = 0 if stop.exit_code == stopping.EXIT_STOPPED else stop.exit_code
                break
            if succeeded and info.is_main and on_finished is not None:
                on_finished(step.spec, step.run_dir)
    if info.is_main:
        specs = grid.plan()
        finished = finished_keys(specs, grid.out)
        outcome.blocked = [s.key if not s.pending else f"{s.name}-seed{s.seed}" for s in specs
                           if s.key not in finished and s.key not in outcome.failed]
    return _broadcast(outcome, info)


def _does_not_fit(grid: Grid, spec: RunSpec, finished: set[str], rates: dict[tuple, float], deadline: float) -> str:
    """Why `spec`, at the measured `rates`, cannot start before `deadline` ('' when it fits or has no estimate)."""
    _, seconds, _ = run_estimate(grid, spec, status(spec, grid.out, finished), rates)
    left = deadline - time.monotonic()
    if seconds is None or seconds <= left:
        return ""
    return f"{spec.key} is estimated at {fmt_seconds(seconds)} and {fmt_seconds(max(0.0, left))} of the limit is left"


def _next_step(grid: Grid, outcome: Outcome, attempted: set[str], log: Callable[[str], None],
               on_finished: Callable[[RunSpec, Path], None] | None = None,
               deadline: float | None = None) -> Step | None:
    """Rank 0: post-training work missing from finished runs (each completed one handed to `on_finished`), then
    the next ready, unfinished run that fits before `deadline` (a leftover directory without a checkpoint cleared;
    a run that does not fit is passed over and noted in `outcome.out_of_time`); None when no run is left."""
    specs = grid.plan()
    finished = finished_keys(specs, grid.out)
    for spec in specs:  # post-training work missing from a finished run (e.g. an older version's run)
        if spec.key in finished and spec.key not in attempted:
            attempted.add(spec.key)
            outcome.skipped.append(spec.key)
            run_dir = spec.run_dir(grid.out)
            if not grid.needs_post(spec, run_dir):
                continue
            if _safely(grid, spec, outcome, lambda: grid.post(spec, run_dir), log) and on_finished is not None:
                on_finished(spec, run_dir)
    todo = [s for s in specs if not s.pending and s.key not in finished and s.key not in attempted
            and all(k in finished for k in s.after)]
    rates = measured_rates(specs, grid.out, grid.sentences, grid.characters) if deadline is not None and todo else {}
    for spec in todo:
        attempted.add(spec.key)  # time only runs out: a run that does not fit now will not fit later either
        late = "" if deadline is None else _does_not_fit(grid, spec, finished, rates, deadline)
        if not late:
            return _prepared_step(grid, spec)
        outcome.out_of_time = outcome.out_of_time or late
    return None


def _prepared_step(grid: Grid, spec: RunSpec) -> Step:
    """The Step that trains or resumes `spec`, its run directory cleared when it holds no checkpoint."""
    run_dir = spec.run_dir(grid.out)
    resume = checkpoint_step(run_dir) is not None
    if run_dir.exists() and not resume:
        shutil.rmtree(run_dir)  # a run that stopped before its first checkpoint starts over
    return Step(spec.key, spec, run_dir, resume)


def _run_step(grid: Grid, step: Step, outcome: Outcome, info: distributed.DistInfo,
              log: Callable[[str], None]) -> bool:
    """Train one run on every rank (post on rank 0), then decide together whether it succeeded (returned)."""
    log(f"[reproduce] {'resuming' if step.resume else 'running'} {step.key}")
    start = time.perf_counter()
    failures = [(rank, line) for rank, line in enumerate(_gather(_attempt(grid, step, info), info)) if line]
    if not failures:
        (outcome.resumed if step.resume else outcome.trained).append(step.key)
        log(f"[reproduce] finished {step.key} in {fmt_seconds(time.perf_counter() - start)}")
        return True
    outcome.failed.append(step.key)
    rank, line = failures[0]
    if info.enabled:
        line = {**line, "rank": rank}
    if info.is_main:
        write_failure(grid.out, line)
    log(f"[reproduce] FAILED {step.key}: {line['error']}" + (f" (rank {rank})" if info.enabled else ""))
    return False


def _attempt(grid: Grid, step: Step, info: distributed.DistInfo) -> dict[str, Any] | None:
    """This rank's part of one run; its failure record, or None."""
    def work() -> None:
        grid.train(per_process(step.spec, info.world_size), step.run_dir, step.resume)
        if info.is_main:
            grid.post(step.spec, step.run_dir)

    return _failure_of(work, step.key)


def _safely(grid: Grid, spec: RunSpec, outcome: Outcome, work: Callable[[], None], log) -> bool:
    """Run `work` for a finished run on rank 0 alone; a failure is recorded and logged, and the grid goes on."""
    line = _failure_of(work, spec.key)
    if line is None:
        return True
    write_failure(grid.out, line)
    outcome.failed.append(spec.key)
    log(f"[reproduce] FAILED {spec.key}: {line['error']}")
    return False


def _failure_of(work: Callable[[], None], key: str) -> dict[str, Any] | None:
    """Run `work`; the failures.jsonl record of its exception, or None (Ctrl-C still stops the grid)."""
    try:
        work()
        return None
    except (KeyboardInterrupt, stopping.TrainingStopped):
        raise  # Ctrl-C, and a graceful stop, end the grid
    except Exception as exc:  # noqa: BLE001 - one failed run must not stop the grid
        return failure_line(key, exc)


# ------------------------------------------------------------------------------------- process group
_GROUP: tuple[Any, Any] | None = None  # (the world group it belongs to, the runner's gloo group)


def leave() -> None:
    """Leave the launcher's process group: destroy every group, the runner's own included, so none is left for
    interpreter shutdown to destroy (which can abort the process). A no-op in one process."""
    global _GROUP
    distributed.teardown()
    _GROUP = None


def _group():
    """A gloo group of the runner's own for its small messages: CPU objects under nccl too, never interleaved
    with the trainers' collectives, with a timeout that outlasts rank 0's evaluations."""
    import torch.distributed as dist

    global _GROUP
    if _GROUP is None or _GROUP[0] is not dist.group.WORLD:
        _GROUP = (dist.group.WORLD, dist.new_group(backend="gloo", timeout=COORDINATION_TIMEOUT))
    return _GROUP[1]


def _broadcast(obj: Any, info: distributed.DistInfo) -> Any:
    """Rank 0's `obj` on every rank (rank 0 gets its own object back)."""
    if not info.enabled:
        return obj
    import torch.distributed as dist

    box = [obj if info.is_main else None]
    dist.broadcast_object_list(box, src=0, group=_group())
    return obj if info.is_main else box[0]


def _gather(obj: Any, info: distributed.DistInfo) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank."""
    if not info.enabled:
        return [obj]
    import torch.distributed as dist

    box: list[Any] = [None] * info.world_size
    dist.all_gather_object(box, obj, group=_group())
    return box


def agree(code: int) -> int:
    """Rank 0's exit code on every rank, once rank 0 is done (a no-op in one process)."""
    return _broadcast(code, distributed.current())


def _quiet(*_: Any) -> None:
    pass


def run_estimate(grid: Grid, spec: RunSpec, state: str, rates: dict[tuple, float]
                 ) -> tuple[int | None, float | None, str]:
    """(optimizer steps, estimated seconds of what is left, rate source) of one run in `state` (see plan.status)."""
    steps = None
    cfg = spec.config if spec.config is not None else spec.cost_config
    if cfg is not None:
        examples = grid.examples(cfg)
        steps = total_steps(cfg.train, examples) if examples is not None else None
    if state == "finished":
        return steps, 0.0, "-"
    left = steps
    if steps is not None and state.startswith("resume from step"):
        left = max(0, steps - int(state.rsplit(" ", 1)[1]))
    seconds, source = estimate_seconds(spec.kind, cfg, left, rates, grid.sentences, grid.characters)
    return steps, seconds, source


def dry_run(grid: Grid, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """List the runs in order with their state and an estimate of their time; returns the rows."""
    specs = grid.plan()
    finished = finished_keys(specs, grid.out)
    rates = measured_rates(specs, grid.out, grid.sentences, grid.characters)
    rows, total, sources = [], 0.0, set()
    unknown = 0
    for i, spec in enumerate(specs, 1):
        state = status(spec, grid.out, finished)
        steps, seconds, source = run_estimate(grid, spec, state, rates)
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
        f"[from {how} rates: 'measured' = seconds per padded batch character in the finished runs in {grid.out}, "
        "'constant' = a rough per-model-size figure (see docs/reproduce.md); evaluation time is only partly included]")
    return rows


def summarize(outcome: Outcome, out: Path, written: list[Path], log: Callable[[str], None] = print) -> int:
    """Print what happened; exit code 1 when a run failed in this invocation."""
    log(f"[reproduce] trained {len(outcome.trained)}, resumed {len(outcome.resumed)}, already finished "
        f"{len(outcome.skipped)}, failed {len(outcome.failed)}, not run (waiting on a failed or unfinished run) "
        f"{len(outcome.blocked)}")
    for path in written:
        log(f"[reproduce] wrote {path}")
    if outcome.out_of_time:
        log(f"[reproduce] stopped by --time-limit, first at {outcome.out_of_time}: {len(outcome.blocked)} run(s) "
            "left; rerun the same command to go on")
    if outcome.stopped:
        log(f"[reproduce] stopped {outcome.stopped}: {len(outcome.blocked)} run(s) left; rerun the same command "
            "to resume it and go on")
    if outcome.failed:
        print(f"[reproduce] {len(outcome.failed)} run(s) failed; see {out / FAILURES}", file=sys.stderr)
        return 1
    return outcome.stop_code
