"""`layerwise finetune`: GLUE fine-tuning with a selectable attention-dropout strategy (AttendOut and baselines)."""
from __future__ import annotations

from layerwise.training.run_dir import add_training_arguments, run_training_command
from layerwise.training.finetune import RESULTS_FILE, FinetuneConfig, finetune, summary


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "finetune", help="fine-tune a classifier on a GLUE task with an attention-dropout strategy",
        description="Fine-tune a pretrained encoder with a classification (or regression) head on a GLUE task, "
                    "evaluate on dev each epoch (or every --eval-every steps) with the task's metric, keep the "
                    "best model, and log per-layer drop rates. Strategies: none, standard, attendout, layerdrop, "
                    "attn_layerdrop, scheduled_bernoulli (options under drop.*, e.g. --set drop.rate=0.2).")
    add_training_arguments(parser, FinetuneConfig)
    parser.set_defaults(func=run)


def run(args) -> int:
    return run_training_command(args, FinetuneConfig, lambda cfg: f"finetune-{cfg.task}-{cfg.dropout}", RESULTS_FILE,
                                finetune, summary)
