"""`layerwise finetune`: GLUE fine-tuning with a selectable attention-dropout strategy (AttendOut and baselines)."""
from __future__ import annotations

import json

from layerwise.training.run_dir import prepare_run_dir
from layerwise.config import add_config_arguments, config_from_args
from layerwise.training.finetune import RESULTS_FILE, FinetuneConfig, finetune, summary


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "finetune", help="fine-tune a classifier on a GLUE task with an attention-dropout strategy",
        description="Fine-tune a pretrained encoder with a classification (or regression) head on a GLUE task, "
                    "evaluate on dev each epoch (or every --eval-every steps) with the task's metric, keep the "
                    "best model, and log per-layer drop rates. Strategies: none, standard, attendout, layerdrop, "
                    "attn_layerdrop, scheduled_bernoulli (options under drop.*, e.g. --set drop.rate=0.2).")
    add_config_arguments(parser, FinetuneConfig)
    parser.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its last checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run in --output-dir")
    parser.set_defaults(func=run)


def run(args) -> int:
    cfg = config_from_args(FinetuneConfig, args)
    run_dir = prepare_run_dir(cfg.output_dir, f"finetune-{cfg.task}-{cfg.dropout}", args.resume, args.overwrite)
    if args.resume and (run_dir / "config.yaml").is_file():
        cfg = config_from_args(FinetuneConfig, args, base_file=run_dir / "config.yaml")  # the run's own settings
    if args.resume and (run_dir / RESULTS_FILE).exists():
        results = json.loads((run_dir / RESULTS_FILE).read_text(encoding="utf-8"))
        print(f"{run_dir} is already finished")
    else:
        results = finetune(cfg, run_dir, resume=args.resume).results
        if not results:  # a non-main process of a distributed run: the main one reports
            return 0
    print(summary(results))
    print(f"run directory: {run_dir} (best model: {run_dir / 'best'})")
    return 0
