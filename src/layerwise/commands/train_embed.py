"""`layerwise train-embed`: contrastive sentence-embedding training with a (layer-attention) pooler."""
from __future__ import annotations

from layerwise.training.run_dir import add_training_arguments, run_training_command
from layerwise.training.embed import EmbedConfig, summary_table, train_embed


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train-embed", help="train sentence embeddings (InfoNCE) with a layer-wise pooler",
        description="Train a sentence encoder with InfoNCE (supervised NLI triplets, unsupervised dropout "
                    "positives, or both), evaluate STS-B dev during training, keep the best checkpoint, and "
                    "report STS-B test for the untrained and trained model in every inference mode.")
    add_training_arguments(parser, EmbedConfig)
    parser.set_defaults(func=run)


def run(args) -> int:
    return run_training_command(args, EmbedConfig, lambda cfg: f"train-embed-{cfg.pooler}", "eval.json",
                                train_embed, summary_table)
