"""`layerwise reproduce pooling|attendout`: the papers' experiments as resumable grids over seeds."""
from __future__ import annotations

import argparse
import warnings
from importlib import import_module
from pathlib import Path
from typing import Any

from layerwise.config import build_config, read_config_file
from layerwise.training.stopping import parse_duration

COMMON = "Runs are keyed by a hash of their resolved config under OUT/runs/; finished runs are skipped, interrupted " \
         "ones resume from their last checkpoint, failures go to OUT/failures.jsonl and the others go on; the " \
         "tables are rebuilt from whatever has finished. See docs/reproduce.md."


def _common(parser: argparse.ArgumentParser, seeds: int) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML file: top-level options plus run-config sections "
                        "(configs/*.yaml hold the paper-scale settings)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of every run's config, e.g. --set train.batch_size=32 (repeatable)")
    parser.add_argument("--model", help="transformers model name or path (default: all-MiniLM-L6-v2)")
    parser.add_argument("--data-dir", help="data root (default: $LAYERWISE_DATA or ../shared/data)")
    parser.add_argument("--output-dir", help="where runs/ and the tables go (default: reproduce)")
    parser.add_argument("--seeds", type=int, help=f"seeds 0..N-1 (default: {seeds})")
    parser.add_argument("--max-steps", type=int, help="cap every run at N optimizer steps (a quick look)")
    parser.add_argument("--subset", type=int, help="cap the training examples (a quick look)")
    parser.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    parser.add_argument("--shard", metavar="K/N", help="run only every N-th group of runs, from group K (one "
                        "process per GPU: CUDA_VISIBLE_DEVICES=K ... --shard K/N)")
    parser.add_argument("--dry-run", action="store_true", help="list the runs, their state and an ESTIMATE of "
                        "their time; train nothing")
    parser.add_argument("--report", action="store_true", help="only rebuild the tables and figures from the "
                        "finished runs")
    parser.add_argument("--archive", metavar="DIR", help="copy the finished runs' records (config, metrics, "
                        "results, learned patterns; no checkpoints or weights) to DIR/runs/ and train nothing; "
                        "--report --output-dir DIR rebuilds the tables from them")
    parser.add_argument("--keep-records", metavar="DIR", help="train, and copy each run's records to DIR/runs/ as "
                        "soon as it finishes (what --archive DIR does afterwards), so the results outlive the "
                        "machine: point it into a git checkout")
    parser.add_argument("--time-limit", metavar="DURATION", help="e.g. 45m, 2h, 1h30m: start no run whose "
                        "estimate (as --dry-run makes it) does not fit in what is left of DURATION (later runs "
                        "that fit still start), and stop a run still training when DURATION is up with a "
                        "checkpoint at its next step (for a batch job's or a session's time limit; SIGTERM and a "
                        "first Ctrl-C stop the same way); rerun the same command to go on")


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("reproduce", help="reproduce the papers' tables (pooling ablation, attention "
                                   "dropout study) over seeds", description=__doc__.splitlines()[0] + ". " + COMMON)
    sub = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    pooling = sub.add_parser("pooling", help="the LayerAttPooler ablation: poolers x objectives x inference modes",
                             description="Train every pooler with the supervised objective (and avg_last, "
                             "layer_att_cls unsupervised and hybrid), tune the pooler learning rate on STS-B dev "
                             "(seed 0), and report STS-B dev/test, alignment/uniformity per inference mode as mean "
                             "± std over seeds in OUT/pooling.md. " + COMMON)
    _common(pooling, 3)
    pooling.add_argument("--poolers", help="comma list (default: the paper's ten)")
    pooling.add_argument("--objectives", help="comma list of supervised, unsupervised, hybrid (default: all)")
    pooling.add_argument("--pooler-lrs", help="pooler learning rates tried on seed 0 (default: 1e-4,1e-3,1e-2; one "
                         "value: no tuning)")
    pooling.add_argument("--eval-subset", type=int, help="score only the first N STS-B pairs (a quick look)")
    pooling.add_argument("--sts-dir", help="folder with STS12-16 (STS12-en-test, ...) and/or SICK/: also scored")
    pooling.set_defaults(func=run_pooling)
    attendout = sub.add_parser("attendout", help="every attention-dropout strategy on GLUE tasks over seeds",
                               description="Fine-tune with none, standard, layerdrop, attn_layerdrop, attendout and "
                               "scheduled_bernoulli (following the attendout run's learned pattern), report dev "
                               "metrics as mean ± std over seeds with a paired test against standard in "
                               "OUT/attendout.md, convergence curves and the drop-rate heatmap. " + COMMON)
    _common(attendout, 5)
    attendout.add_argument("--tasks", help="comma list of GLUE tasks (default: cola,rte,mrpc,sst2)")
    attendout.add_argument("--strategies", help="comma list (default: all six)")
    attendout.add_argument("--pattern-which", choices=("last", "overall"),
                           help="learned rates scheduled_bernoulli follows (default: last)")
    attendout.set_defaults(func=run_attendout)


def _options(cls: type, args: argparse.Namespace, sections: tuple[str, ...], names: tuple[str, ...]):
    """Options: defaults < --config top-level keys < flags. Returns (options, run-config sections)."""
    from layerwise.reproduce.plan import read_reproduce_file

    data_dir = args.data_dir
    if not data_dir:
        data_dir = str(read_config_file(args.config).get("data_dir", "")) if args.config else ""
        data_dir = data_dir or cls().data_dir
    file_values, grouped = read_reproduce_file(args.config, data_dir, sections) if args.config else ({}, {})
    cli: dict[str, Any] = {}
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            cli[name] = value
    opts = build_config(cls, file_values, cli, source=str(args.config or "options"))
    return opts, grouped


def _refuse(message: str, rank: int) -> int:
    """A bad option under a launcher: rank 0 raises the one-line error, the others exit 2 quietly."""
    from layerwise.errors import ConfigError

    if rank:
        return 2
    raise ConfigError(message)


def _go(grid, args) -> int:
    from layerwise.reproduce.archive import destination_problem
    from layerwise.reproduce.runner import batch_problem
    from layerwise.training.distributed import launched

    rank, world = launched()
    if world > 1 and grid.shard:
        return _refuse(f"--shard {grid.shard} and torchrun/accelerate launch ({world} processes) cannot be "
                       "combined: either one process per GPU with --shard K/N, or one launcher over all GPUs "
                       "without --shard", rank)
    if args.archive and (args.dry_run or args.report):
        return _refuse(f"--archive {args.archive} trains and reports nothing: run it alone, then --report "
                       f"--output-dir {args.archive} for the tables", rank)
    no_training = "--archive" if args.archive else "--dry-run" if args.dry_run else "--report" if args.report else ""
    if args.keep_records and no_training:
        return _refuse(f"--keep-records {args.keep_records} keeps the records of runs it trains, and {no_training} "
                       f"trains nothing: drop one of them", rank)
    if args.time_limit is not None and no_training:
        return _refuse(f"--time-limit {args.time_limit} limits training, and {no_training} trains nothing: drop one "
                       "of them", rank)
    try:
        time_limit = parse_duration(args.time_limit) if args.time_limit is not None else None
    except ValueError as exc:
        return _refuse(f"--time-limit {args.time_limit}: {exc}", rank)
    if args.keep_records and (problem := destination_problem("--keep-records", Path(args.keep_records), grid.out)):
        return _refuse(problem, rank)
    if args.archive:
        return _archive(grid, args.archive) if rank == 0 else 0
    if args.dry_run or args.report:
        return _look(grid, args.dry_run) if rank == 0 else 0  # under a launcher rank 0 alone lists or reports
    problem = _device_problem(str(grid.opts.device)) or (batch_problem(grid.plan(), world) if world > 1 else "")
    if problem:
        return _refuse(problem, rank)
    return _train(grid, rank, world, args.keep_records, time_limit)


def _look(grid, dry: bool) -> int:
    """--dry-run (the plan and its estimate) or --report (the tables from the finished runs)."""
    from layerwise.reproduce.runner import dry_run

    if dry:
        dry_run(grid)
        return 0
    for path in grid.report():
        print(f"[reproduce] wrote {path}")
    return 0


def _archive(grid, dest: str) -> int:
    """--archive DIR: the finished runs' records, without weights."""
    from layerwise.reproduce.archive import archive_runs

    copied = archive_runs(grid, dest)
    print(f"[reproduce] archived {len(copied)} finished run(s) of {len(grid.unsharded())} to {dest}/runs "
          f"(tables: --report --output-dir {dest})")
    return 0


def _device_problem(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            return (f"--device {device}: CUDA is not available here (use --device cpu, or --dry-run to see the "
                    "plan and its estimate)")
    return ""


def _train(grid, rank: int, world: int, keep_records: str | None, time_limit: float | None = None) -> int:
    """Run the grid (every process of a launcher together), then the report and summary on rank 0; with
    `keep_records`, rank 0 copies each finished run's records there as it finishes; `time_limit` (seconds): see
    run_grid."""
    from layerwise.reproduce.archive import record_keeper
    from layerwise.reproduce.runner import agree, run_grid, summarize

    if world > 1:
        _join(grid.opts.device)
        if rank:
            warnings.simplefilter("ignore")  # rank 0 prints the same warnings once
    keeper = record_keeper(grid, Path(keep_records)) if keep_records and rank == 0 else None
    outcome = run_grid(grid, on_finished=keeper, time_limit=time_limit)
    code = agree(summarize(outcome, grid.out, grid.report()) if rank == 0 else 0)  # the others wait for the report
    if world > 1:
        from layerwise.reproduce.runner import leave

        leave()
    return code


def _join(device_name: str) -> None:
    """Join the launcher's process group before the first run (each process on its own GPU under CUDA)."""
    import torch

    from layerwise.training import distributed

    device, _ = distributed.setup(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)


COMMON_NAMES = ("model", "data_dir", "output_dir", "seeds", "max_steps", "subset", "device", "shard")


def run_pooling(args) -> int:
    from layerwise.reproduce.pooling import PoolingGrid, PoolingOptions

    opts, sections = _options(PoolingOptions, args, ("embed", "per_objective"),
                              COMMON_NAMES + ("poolers", "objectives", "pooler_lrs", "eval_subset", "sts_dir"))
    return _go(PoolingGrid(opts, sections, args.overrides), args)


def run_attendout(args) -> int:
    import_module("layerwise.training.finetune")  # fills the dropout-strategy registry
    from layerwise.reproduce.attendout import AttendoutGrid, AttendoutOptions

    opts, sections = _options(AttendoutOptions, args, ("finetune", "per_strategy", "per_task", "variants"),
                              COMMON_NAMES + ("tasks", "strategies", "pattern_which"))
    return _go(AttendoutGrid(opts, sections, args.overrides), args)
