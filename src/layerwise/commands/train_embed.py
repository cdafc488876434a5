"""`layerwise train-embed`: contrastive sentence-embedding training with a (layer-attention) pooler."""
from __future__ import annotations

import json

from layerwise.config import add_config_arguments, config_from_args
from layerwise.training.run_dir import prepare_run_dir
from layerwise.training.embed import EmbedConfig, summary_table, train_embed


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train-embed", help="train sentence embeddings (InfoNCE) with a layer-wise pooler",
        description="Train a sentence encoder with InfoNCE (supervised NLI triplets, unsupervised dropout "
                    "positives, or both), evaluate STS-B dev during training, keep the best checkpoint, and "
                    "report STS-B test for the untrained and trained model in every inference mode.")
    add_config_arguments(parser, EmbedConfig)
    parser.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its last checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run in --output-dir")
    parser.set_defaults(func=run)


def run(args) -> int:
    cfg = config_from_args(EmbedConfig, args)
    run_dir = prepare_run_dir(cfg.output_dir, f"train-embed-{cfg.pooler}", args.resume, args.overwrite)
    if args.resume and (run_dir / "config.yaml").is_file():
        cfg = config_from_args(EmbedConfig, args, base_file=run_dir / "config.yaml")  # the run's own settings
    if args.resume and (run_dir / "eval.json").exists():
        results = json.loads((run_dir / "eval.json").read_text(encoding="utf-8"))
        print(f"{run_dir} is already finished")
    else:
        results = train_embed(cfg, run_dir, resume=args.resume).results
        if not results:  # a non-main process of a distributed run: the main one reports
            return 0
    print(summary_table(results))
    print(f"run directory: {run_dir} (best model: {run_dir / 'best'})")
    return 0
