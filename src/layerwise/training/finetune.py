"""GLUE fine-tuning with a selectable attention-dropout strategy: configuration, data, evaluation, the run.

The run directory (like train-embed's): config.yaml, metrics.jsonl (train loss, lr, drop rates per layer and
head every log_every steps; dev metrics at each evaluation), best/ and final/ (plain transformers models with
their tokenizer), gnet/best and gnet/final (AttendOut only: G-Net beside the model, not inside it),
checkpoints/, drop_pattern.json (per-layer drop rates: last logging window and all of training) and
results.json, written last (its presence marks a finished run).
"""
from __future__ import annotations

import json
import warnings
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from layerwise.training import distributed
from layerwise.config import TrainingConfig, default_data_dir, non_negative, positive, save_config
from layerwise.data.batching import count_batches, epoch_batches
from layerwise.data.glue import Examples, GlueTask, get_task, read_split
from layerwise.errors import LayerwiseError
from layerwise.modeling.encoder import count_truncated, warn_truncated
from layerwise.evaluation.glue_metrics import glue_scores
from layerwise.registry import DROPOUT_STRATEGIES
from layerwise.regularization import DropoutOptions, DropoutStrategy, build_strategy
from layerwise.atomic import write_json
from layerwise.regularization.pattern import RUN_PATTERN

RESULTS_FILE = "results.json"


def _finetune_training_defaults() -> TrainingConfig:
    return TrainingConfig(lr=5e-5, batch_size=32, epochs=3.0, eval_every=0, warmup_ratio=0.1)


@dataclass
class FinetuneConfig:
    """Options of `layerwise finetune`."""

    model: str = "all-MiniLM-L6-v2"  # any transformers model name or path
    task: str = "cola"
    data_dir: str = field(default_factory=default_data_dir)
    dataset: str = ""  # Hugging Face Hub dataset instead of data_dir: glue/<task> (sets the task), or one with
                       # --task's GLUE columns
    output_dir: str = ""
    dropout: str = "standard"  # attention-dropout strategy (registry name)
    drop: DropoutOptions = field(default_factory=DropoutOptions)
    max_length: int = 128
    subset: int = 0  # cap on train and dev examples each (0: all); a seeded random sample
    eval_batch_size: int = 128
    train: TrainingConfig = field(default_factory=_finetune_training_defaults)

    def validate(self) -> None:
        get_task(self.task)
        DROPOUT_STRATEGIES.get(self.dropout)
        positive(self, "max_length", "eval_batch_size")
        non_negative(self, "subset")


# ------------------------------------------------------------------------------------------------ data
@dataclass
class GlueData:
    task: GlueTask
    train: Examples
    evals: dict[str, Examples]  # eval split -> examples


def load_glue_data(cfg: FinetuneConfig) -> GlueData:
    """Read the train split and every eval split (capped by cfg.subset); DataError on any bad file."""
    if cfg.dataset:
        from layerwise.data.hub import read_glue

        return GlueData(*read_glue(cfg.dataset, cfg.task, cfg.subset, cfg.train.seed))
    task = get_task(cfg.task)
    train = read_split(task, Path(cfg.data_dir), "train").subset(cfg.subset, cfg.train.seed)
    evals = {s: read_split(task, Path(cfg.data_dir), s).subset(cfg.subset, cfg.train.seed) for s in task.eval_splits}
    return GlueData(task, train, evals)


class Encoded:
    """Examples tokenised once (no padding); `batch(indices)` pads a batch and adds the labels."""

    def __init__(self, tokenizer: Any, examples: Examples, max_length: int, regression: bool) -> None:
        columns = list(zip(*examples.texts))
        encoded = tokenizer(*[list(c) for c in columns], truncation=True, max_length=max_length)
        warn_truncated(count_truncated(encoded), len(examples), max_length)
        self.features = [{k: encoded[k][i] for k in encoded.keys()} for i in range(len(examples))]
        self.labels = torch.tensor(examples.labels, dtype=torch.float32 if regression else torch.long)
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return len(self.features)

    def batch(self, indices: Any) -> dict[str, torch.Tensor]:
        padded = self.tokenizer.pad([self.features[i] for i in indices], return_tensors="pt")
        return {**padded, "labels": self.labels[torch.as_tensor(indices, dtype=torch.long)]}


# ------------------------------------------------------------------------------------------ model, eval
def load_classifier(cfg: FinetuneConfig, task: GlueTask) -> tuple[Any, Any]:
    """(AutoModelForSequenceClassification with a fresh head for the task, tokenizer)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from layerwise.modeling.backbone import quiet_transformers, resolve_model_path

    path = resolve_model_path(cfg.model)
    labels = task.labels or ("score",)
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForSequenceClassification.from_pretrained(
                path, num_labels=task.num_labels, id2label=dict(enumerate(labels)),
                label2id={name: i for i, name in enumerate(labels)},
                problem_type="regression" if task.is_regression else "single_label_classification")
    except OSError as exc:
        raise LayerwiseError(f"--model {cfg.model}: cannot load ({str(exc).splitlines()[0]})") from None
    return model, tokenizer


@torch.no_grad()
def predict(model: Any, data: Encoded, batch_size: int, device: torch.device) -> np.ndarray:
    """Class indices (classification) or scores (regression) for every example, in order."""
    outputs = []
    for start in range(0, len(data), batch_size):
        batch = data.batch(range(start, min(start + batch_size, len(data))))
        batch.pop("labels")
        logits = model(**{k: v.to(device) for k, v in batch.items()}).logits.float().cpu()
        outputs.append(logits[:, 0] if logits.shape[1] == 1 else logits.argmax(-1))
    return torch.cat(outputs).numpy()


def make_evaluator(model: Any, task: GlueTask, evals: dict[str, Encoded], batch_size: int,
                   device: torch.device) -> Callable[[], dict[str, float]]:
    """evaluate() -> {metric[+suffix]: value x 100} over the task's eval splits (MNLI: "", "_mm")."""

    def evaluate() -> dict[str, float]:
        was_training = model.training
        model.eval()
        scores: dict[str, float] = {}
        for (split, data), suffix in zip(evals.items(), task.split_suffixes):
            scores.update(glue_scores(task.metrics, predict(model, data, batch_size, device), data.labels.numpy(),
                                      suffix))
        model.train(was_training)
        return scores

    return evaluate


# ---------------------------------------------------------------------------------------------- the run
@dataclass
class FinetuneRun:
    """What finetune produced: the run directory, its results, and the trained model (strategy detached)."""

    run_dir: Path
    results: dict[str, Any]
    model: Any = None
    tokenizer: Any = None


class LossWindow:
    """Mean task loss and strategy penalty since the last log line."""

    def __init__(self) -> None:
        self.task = self.extra = 0.0
        self.count = 0

    def add(self, task: torch.Tensor, extra: torch.Tensor | None) -> None:
        self.task += float(task.detach())
        self.extra += float(extra.detach()) if extra is not None else 0.0
        self.count += 1

    def flush(self, with_extra: bool) -> dict[str, float]:
        n = max(self.count, 1)
        logs = {"task_loss": self.task / n, **({"gnet_penalty": self.extra / n} if with_extra else {})}
        self.__init__()
        return logs


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def param_groups(model: Any, strategy: DropoutStrategy, cfg: TrainingConfig) -> list[dict]:
    """Model parameters (no weight decay on biases and LayerNorm), then the strategy's own groups (G-Net)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if param.ndim < 2 else decay).append(param)
    groups = [{"params": decay, "lr": cfg.lr, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "lr": cfg.lr, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]] + strategy.parameter_groups()


def finetune(cfg: FinetuneConfig, run_dir: Path, resume: bool = False,
             log: Callable[[str], None] = print) -> FinetuneRun:
    """Fine-tune on cfg.task with cfg.dropout, keeping the best model on the task's main dev metric."""
    from layerwise.modeling.backbone import quiet_transformers
    from layerwise.modeling.encoder import position_limit
    from layerwise.training.loop import Trainer

    data = load_glue_data(cfg)  # bad data fails before anything is written
    seed_everything(cfg.train.seed)
    device, dist_info = distributed.setup(cfg.train.device)
    model, tokenizer = load_classifier(cfg, data.task)
    max_length = min(cfg.max_length, position_limit(model.config))
    if max_length < cfg.max_length:
        warnings.warn(f"max_length {cfg.max_length} is capped at the model's limit of {max_length} tokens")
    strategy = build_strategy(cfg.dropout, cfg.drop, model.config)
    model.to(device)
    strategy.to(device).attach(model)
    regression = data.task.is_regression
    train = Encoded(tokenizer, data.train, max_length, regression)
    evals = {s: Encoded(tokenizer, e, max_length, regression) for s, e in data.evals.items()}
    if dist_info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, run_dir / "config.yaml")
    window = LossWindow()
    forward = _distributed_forward(model, strategy, dist_info,
                                   skips_layers=cfg.dropout in ("layerdrop", "attn_layerdrop"))

    def compute_loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        loss = forward(**batch).loss
        extra = strategy.extra_loss()
        window.add(loss, extra)
        return loss if extra is None else loss + extra

    def log_extra() -> dict[str, float]:
        logs = {**window.flush(bool(strategy.parameter_groups())), **strategy.drop_rates()}
        if dist_info.is_main:
            write_json(run_dir / RUN_PATTERN, strategy.pattern())
        return logs

    def save_model(path: Path) -> None:
        with quiet_transformers():
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
        if hasattr(strategy, "save"):
            _save_beside(strategy, run_dir / "gnet" / path.name.removesuffix(".tmp"))

    global_batch = cfg.train.batch_size * dist_info.world_size
    min_size = global_batch if dist_info.enabled else 2  # equal shards for every process

    def make_batches(epoch: int):
        for indices in epoch_batches(len(train), global_batch, cfg.train.seed, epoch, min_size=min_size):
            yield train.batch(distributed.shard(indices, dist_info))

    trainer = Trainer(
        model=model, param_groups=param_groups(model, strategy, cfg.train), compute_loss=compute_loss,
        make_batches=make_batches, steps_per_epoch=count_batches(len(train), global_batch, min_size=min_size),
        evaluate=make_evaluator(model, data.task, evals, cfg.eval_batch_size, device), metric=data.task.metric,
        save_model=save_model, run_dir=run_dir, cfg=cfg.train, stateful={"dropout": strategy},
        log_extra=log_extra, device=device)
    strategy.set_horizon(trainer.total_steps * cfg.train.grad_accum)
    if dist_info.is_main:
        log(f"fine-tuning {cfg.model} on {data.task.name} ({len(train)} train examples) with dropout "
            f"'{cfg.dropout}', {trainer.total_steps} steps -> {run_dir}")
    try:
        result = trainer.fit(resume=resume)
    finally:
        strategy.detach()
    if not dist_info.is_main:
        return FinetuneRun(run_dir, {}, model, tokenizer)
    write_json(run_dir / RUN_PATTERN, strategy.pattern())
    results = {"model": cfg.model, "task": data.task.name, "dropout": cfg.dropout, "metric": data.task.metric,
               "best_metric": result.best_metric, "best_step": result.best_step,
               "best_eval": best_eval(run_dir), "steps": result.global_step,
               "train_seconds": round(result.seconds, 1), "skipped_batches": result.skipped_batches,
               "train_examples": len(train), "eval_examples": {s: len(e) for s, e in evals.items()}}
    write_json(run_dir / RESULTS_FILE, results)  # written last: its presence marks a finished run
    return FinetuneRun(run_dir, results, model, tokenizer)


class _ModelWithStrategy(torch.nn.Module):
    """The classifier and the dropout strategy's own modules (G-Net) as one module, so that
    DistributedDataParallel averages the gradients of both; its forward is the classifier's."""

    def __init__(self, model: torch.nn.Module, strategy: DropoutStrategy) -> None:
        super().__init__()
        self.model, self.strategy = model, strategy

    def forward(self, **batch: torch.Tensor) -> Any:
        return self.model(**batch)


def _distributed_forward(model: torch.nn.Module, strategy: DropoutStrategy, dist_info,
                         skips_layers: bool = False) -> Callable[..., Any]:
    """The classifier's forward, wrapped in DistributedDataParallel in a multi-process run."""
    if not dist_info.enabled:
        return model
    both = _ModelWithStrategy(model, strategy)
    device_ids = [dist_info.local_rank] if next(model.parameters()).device.type == "cuda" else None
    # LayerDrop skips whole layers in some steps: their parameters get no gradient then
    return torch.nn.parallel.DistributedDataParallel(both, device_ids=device_ids, find_unused_parameters=skips_layers)


def _save_beside(strategy: DropoutStrategy, target: Path) -> None:
    """Write the strategy's own weights (G-Net) into `target` atomically."""
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    strategy.save(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)


def best_eval(run_dir: Path) -> dict[str, float] | None:
    """The dev scores of the last evaluation that improved the best metric (from metrics.jsonl)."""
    path = run_dir / "metrics.jsonl"
    best = None
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else {}
            if "eval" in record and record.get("best"):
                best = record["eval"]
    return best


def summary(results: dict[str, Any]) -> str:
    """One line per dev score of the best model."""
    scores = results.get("best_eval") or {}
    lines = [f"{results['task']} / {results['dropout']}: best {results['metric']} "
             f"{results['best_metric']:.2f} at step {results['best_step']} of {results['steps']}"]
    lines += [f"  {name:<14} {value:7.2f}" for name, value in scores.items()]
    return "\n".join(lines)
