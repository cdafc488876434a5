"""`layerwise finetune`: GLUE fine-tuning with a selectable attention-dropout strategy (AttendOut and baselines)."""
from __future__ import annotations

from layerwise.training.run_dir import run_training_command
from layerwise.config import add_config_arguments
from layerwise.training.finetune import RESULTS_FILE, FinetuneConfig, finetune, summary


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "finetune", help="fine-tune a classifier on a GLUE task with an attention-dropout strategy",
        description="Fine-tune a pretrained encoder with a classification (or regression) head on a GLUE task, "
                    "evaluate on dev each epoch (or every --eval-every steps) with the task's metric, keep the "
                    "best model, and log per-layer drop rates. Strategies: none, standard, attendout, layerdrop, "
                    "attn_layerdrop, scheduled_bernoulli (options under drop.*, e.g. --set drop.rate=0.2).")
    add_config_arguments(parser, FinetuneConfig)
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --output-dir from its last checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run in --output-dir")
    parser.set_defaults(func=run)


def run(args) -> int:
    return run_training_command(args, FinetuneConfig, lambda cfg: f"finetune-{cfg.task}-{cfg.dropout}", RESULTS_FILE,
                                finetune, summary)
