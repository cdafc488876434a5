"""`layerwise train-embed`: contrastive sentence-embedding training with a (layer-attention) pooler."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from layerwise.config import add_config_arguments, config_from_args
from layerwise.errors import LayerwiseError
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


def prepare_run_dir(output_dir: str, default_name: str, resume: bool, overwrite: bool) -> Path:
    """Pick the run directory and refuse to clobber an existing run unless told to (checked by the main process
    of a distributed run only; the others follow it)."""
    run_dir = Path(output_dir) if output_dir else Path("runs") / f"{default_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if int(os.environ.get("RANK", "0")) != 0:
        if not output_dir:
            raise LayerwiseError("distributed runs need an explicit --output-dir shared by all processes")
        return run_dir
    if resume and overwrite:
        raise LayerwiseError("--resume and --overwrite exclude each other")
    if resume:
        if not run_dir.is_dir():
            raise LayerwiseError(f"--resume: {run_dir} does not exist (pass the --output-dir of the run to resume)")
        return run_dir
    if run_dir.exists() and any(run_dir.iterdir()):
        if not overwrite:
            finished = "a finished run" if (run_dir / "eval.json").exists() else "an unfinished run"
            raise LayerwiseError(f"--output-dir {run_dir} already holds {finished}: pass --resume to continue it "
                                 "or --overwrite to replace it")
        shutil.rmtree(run_dir)
    return run_dir


def run(args) -> int:
    cfg = config_from_args(EmbedConfig, args)
    run_dir = prepare_run_dir(cfg.output_dir, f"train-embed-{cfg.pooler}", args.resume, args.overwrite)
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
