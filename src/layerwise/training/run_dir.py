"""The run directory: choosing it, and refusing to clobber an existing run."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from layerwise.errors import LayerwiseError
from layerwise.training.checkpoint import list_checkpoints
from layerwise.training.stopping import TrainingStopped, parse_duration, time_limit as limited_to

# Each command writes one of these last: its presence marks a finished run.
FINISHED_MARKERS = ("eval.json", "results.json")


def is_finished(run_dir: Path) -> bool:
    return any((run_dir / name).exists() for name in FINISHED_MARKERS)


def prepare_run_dir(output_dir: str, default_name: str, resume: bool, overwrite: bool) -> Path:
    """Pick the run directory and refuse to clobber an existing run unless told to (checked by the main process
    of a distributed run only; the others follow it)."""
    run_dir = Path(output_dir) if output_dir else Path("runs") / f"{default_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    from layerwise.training.distributed import launched

    if launched()[0] != 0:
        if not output_dir:
            raise LayerwiseError("distributed runs need an explicit --output-dir shared by all processes")
        return run_dir
    if resume and overwrite:
        raise LayerwiseError("--resume and --overwrite exclude each other")
    if resume:
        if not run_dir.is_dir():
            raise LayerwiseError(f"--resume: {run_dir} does not exist (pass the --output-dir of the run to resume)")
        if not is_finished(run_dir) and not list_checkpoints(run_dir / "checkpoints"):
            raise LayerwiseError(f"--resume: no checkpoint in {run_dir / 'checkpoints'} to resume from "
                                 "(pass --overwrite to start again)")
        return run_dir
    if run_dir.exists() and any(run_dir.iterdir()):
        if not overwrite:
            finished = "a finished run" if is_finished(run_dir) else "an unfinished run"
            raise LayerwiseError(f"--output-dir {run_dir} already holds {finished}: pass --resume to continue it "
                                 "or --overwrite to replace it")
        shutil.rmtree(run_dir)
    return run_dir


def add_training_arguments(parser: Any, config_cls: type) -> None:
    """The flags train-embed and finetune share: the config's options, --resume, --overwrite and --time-limit."""
    from layerwise.config import add_config_arguments

    add_config_arguments(parser, config_cls)
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output-dir from its last checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run in --output-dir")
    parser.add_argument("--time-limit", metavar="DURATION", help="e.g. 45m, 2h, 1h30m: when DURATION is up, save "
                        "a checkpoint at the next step and stop (exit 4; SIGTERM and a first Ctrl-C stop the same "
                        "way, exit 143 and 130); --resume goes on from it")


def run_training_command(args: Any, config_cls: type, default_name: Callable[[Any], str], results_file: str,
                         train: Callable[..., Any], summary: Callable[[dict], str]) -> int:
    """The shared flow of train-embed and finetune: config, run directory (a resumed run keeps its own
    config.yaml, with this command's flags on top), train or report the finished run, print the summary."""
    from layerwise.config import config_from_args

    try:
        time_limit = parse_duration(args.time_limit) if args.time_limit is not None else None
    except ValueError as exc:
        raise LayerwiseError(f"--time-limit {args.time_limit}: {exc}") from None
    cfg = config_from_args(config_cls, args)
    run_dir = prepare_run_dir(cfg.output_dir, default_name(cfg), args.resume, args.overwrite)
    if args.resume and (run_dir / "config.yaml").is_file():
        cfg = config_from_args(config_cls, args, base_file=run_dir / "config.yaml")
    if args.resume and (run_dir / results_file).exists():
        results = json.loads((run_dir / results_file).read_text(encoding="utf-8"))
        print(f"{run_dir} is already finished")
    else:
        from layerwise.training.distributed import teardown

        try:
            with limited_to(time_limit, f"--time-limit {args.time_limit}"):
                results = train(cfg, run_dir, resume=args.resume).results
        except TrainingStopped:
            teardown()  # every process stopped at the same step: they leave the group together
            raise
        teardown()  # under torchrun: every process leaves the group before exiting
        if not results:  # a non-main process of a distributed run: the main one reports
            return 0
    print(summary(results))
    print(f"run directory: {run_dir} (best model: {run_dir / 'best'})")
    return 0
